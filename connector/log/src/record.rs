//! The record types of the public API: what a producer appends ([`NewRecord`], borrowed,
//! so the hot path copies bytes once, straight into the encode buffer) and what a reader
//! gets back ([`Record`], whose key/value/header bytes are zero-copy slices of the batch
//! buffer that was read from disk).

use bytes::Bytes;

/// A header of a record to append: Kafka header keys are strings, values are bytes or null.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderRef<'a> {
    pub key: &'a str,
    pub value: Option<&'a [u8]>,
}

/// A record to append. `value: None` is a tombstone (a delete, for compacted topics).
/// `timestamp` is the record's create time in milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NewRecord<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [HeaderRef<'a>],
    pub timestamp: i64,
}

impl<'a> NewRecord<'a> {
    /// A record without headers.
    pub fn new(key: Option<&'a [u8]>, value: Option<&'a [u8]>, timestamp: i64) -> Self {
        NewRecord {
            key,
            value,
            headers: &[],
            timestamp,
        }
    }
}

/// A header of a record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub key: String,
    pub value: Option<Bytes>,
}

/// A record read back from the log, with its offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub offset: u64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<Header>,
}

impl Record {
    /// Encoded size estimate used to honour `max_bytes` on reads.
    pub fn size_hint(&self) -> usize {
        self.key.as_ref().map_or(0, |k| k.len())
            + self.value.as_ref().map_or(0, |v| v.len())
            + self
                .headers
                .iter()
                .map(|h| h.key.len() + h.value.as_ref().map_or(0, |v| v.len()))
                .sum::<usize>()
            + 16
    }
}

/// Milliseconds since the Unix epoch, the clock of record timestamps and retention.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
