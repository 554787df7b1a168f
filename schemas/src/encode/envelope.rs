//! One [`ChangeEvent`] to the list of records Debezium emits for it.
//!
//! - create / read / update / truncate / message: one record;
//! - delete: the delete record, then a tombstone (same key, null value) unless
//!   `tombstones_on_delete` is off, so log compaction can drop the key;
//! - an update that changes the primary key: a delete of the old key (header
//!   `__debezium.newkey` = the new key), its tombstone, then a create of the new key
//!   (header `__debezium.oldkey` = the old key), as Debezium's relational emitters do.
//!
//! Header values are the keys encoded exactly as the record keys are (JSON or framed
//! Avro), so a consumer decodes them with the key deserializer it already has. A record
//! may also carry one `cdc.unrepresentable.<image>.<column>` header per value its format
//! cannot carry (`hidden.rs`), after the key-change header.
//!
//! Two forms: [`Encoder::records_into`] appends to a reusable [`RecordBuf`] (one byte
//! buffer plus ranges: no allocation per record once the buffer is warm — the pipeline's
//! hot path); [`Encoder::records`] returns owned [`Record`]s built from it. Headers live
//! in the buffer's [`HeaderBuf`] (their own bytes and spans), each record naming a range
//! of them: any number per record, nothing allocated for records without.
//!
//! Invariant: records come out in the order they must be appended to the log.

use std::ops::Range;

use crate::encode::hidden::{HeaderBuf, HiddenReason};
use crate::encode::{EncodeError, Encoder};
use crate::event::{ChangeEvent, Op, TransactionInfo};

/// Debezium's header on the delete half of a key change: the row's new key.
pub const HEADER_NEW_KEY: &str = "__debezium.newkey";
/// Debezium's header on the create half of a key change: the row's old key.
pub const HEADER_OLD_KEY: &str = "__debezium.oldkey";
/// Header of a truncate record of a topic with more than one partition, which gets a copy
/// of it in every partition: the number of partitions (copies), as decimal text. A sink
/// reading several partitions applies the first copy it meets and passes over the rest
/// of each partition until that partition's copy.
pub const HEADER_TRUNCATE_PARTITIONS: &str = "cdc.truncate.partitions";

/// What a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// A change envelope (or a logical message) with the given `op`.
    Change(Op),
    /// The null-valued record that follows a delete.
    Tombstone,
}

/// One record to append: key, value (`None` for a tombstone) and headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub kind: RecordKind,
    /// `None`: the record has no key (keyless table, truncate).
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
}

/// One record inside a [`RecordBuf`]: ranges of its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordSpan {
    pub kind: RecordKind,
    pub key: Option<Range<usize>>,
    /// `None` for a tombstone.
    pub value: Option<Range<usize>>,
    /// The record's headers: indexes into [`RecordBuf::headers`]' spans (empty for most).
    pub headers: Range<u32>,
}

/// A value of a record that its format could not carry (it is in a header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HiddenValue<'a> {
    /// The table, as `schema.table`.
    pub table: &'a str,
    /// The header key, `cdc.unrepresentable.<image>.<column>`.
    pub header: &'a str,
    /// The column name (the end of the header key).
    pub column: &'a str,
    pub reason: HiddenReason,
}

/// Records encoded back to back into one byte buffer. Clear and reuse it: its capacity
/// is kept, so steady-state encoding allocates nothing per record.
#[derive(Clone, Debug, Default)]
pub struct RecordBuf {
    pub bytes: Vec<u8>,
    pub spans: Vec<RecordSpan>,
    pub headers: HeaderBuf,
}

impl RecordBuf {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
        self.spans.clear();
        self.headers.clear();
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    pub fn key(&self, i: usize) -> Option<&[u8]> {
        self.spans[i].key.clone().map(|r| &self.bytes[r])
    }

    pub fn value(&self, i: usize) -> Option<&[u8]> {
        self.spans[i].value.clone().map(|r| &self.bytes[r])
    }

    /// How many headers record `i` has.
    pub fn header_count(&self, i: usize) -> usize {
        self.spans[i].headers.len()
    }

    /// Record `i`'s headers, in order: (key, value).
    pub fn headers(&self, i: usize) -> impl ExactSizeIterator<Item = (&str, &[u8])> + '_ {
        let r = self.spans[i].headers.clone();
        (r.start as usize..r.end as usize).map(|h| (self.headers.key(h), self.headers.value(h)))
    }

    /// Total headers of all records (a record's are contiguous, in record order).
    pub fn total_headers(&self) -> usize {
        self.headers.spans.len()
    }

    /// Every value of these records that its format could not carry, in record order.
    pub fn hidden_values(&self) -> impl Iterator<Item = HiddenValue<'_>> + '_ {
        self.headers
            .spans
            .iter()
            .enumerate()
            .filter_map(|(h, span)| {
                let (table, reason) = span.hidden.as_ref()?;
                let header = self.headers.key(h);
                let rest = header.strip_prefix(super::hidden::HEADER_UNREPRESENTABLE)?;
                let column = rest.split_once('.').map_or(rest, |(_, c)| c);
                Some(HiddenValue {
                    table,
                    header,
                    column,
                    reason: *reason,
                })
            })
    }

    /// Record `i` as an owned [`Record`].
    pub fn to_record(&self, i: usize) -> Record {
        Record {
            kind: self.spans[i].kind,
            key: self.key(i).map(<[u8]>::to_vec),
            value: self.value(i).map(<[u8]>::to_vec),
            headers: self
                .headers(i)
                .map(|(k, v)| (k.to_string(), v.to_vec()))
                .collect(),
        }
    }

    fn truncate(&mut self, bytes: usize, spans: usize, headers: (usize, usize)) {
        self.bytes.truncate(bytes);
        self.spans.truncate(spans);
        self.headers.truncate(headers.0, headers.1);
    }

    fn header_mark(&self) -> u32 {
        self.headers.spans.len() as u32
    }
}

impl Encoder {
    /// The records Debezium would emit for `ev`, with `processed_at_ns` as the envelopes'
    /// processing time.
    pub fn records(
        &self,
        ev: &ChangeEvent,
        processed_at_ns: i64,
    ) -> Result<Vec<Record>, EncodeError> {
        let mut buf = RecordBuf::new();
        self.records_into(ev, processed_at_ns, &mut buf)?;
        Ok((0..buf.len()).map(|i| buf.to_record(i)).collect())
    }

    /// Appends the records of `ev` to `buf` (see [`Encoder::records`]); returns how many.
    /// On error `buf` is left as it was on entry.
    pub fn records_into(
        &self,
        ev: &ChangeEvent,
        processed_at_ns: i64,
        buf: &mut RecordBuf,
    ) -> Result<usize, EncodeError> {
        let (bytes0, spans0) = (buf.bytes.len(), buf.spans.len());
        let headers0 = (buf.headers.bytes.len(), buf.headers.spans.len());
        let r = self.records_into_inner(ev, processed_at_ns, buf);
        if r.is_err() {
            buf.truncate(bytes0, spans0, headers0);
        }
        r.map(|()| buf.spans.len() - spans0)
    }

    fn records_into_inner(
        &self,
        ev: &ChangeEvent,
        now: i64,
        buf: &mut RecordBuf,
    ) -> Result<(), EncodeError> {
        if ev.op == Op::Update && ev.changes_key() {
            return self.key_change(ev, now, buf);
        }
        let h0 = buf.header_mark();
        let k0 = buf.bytes.len();
        let has_key = self.encode_key_into(ev, &mut buf.bytes, Some(&mut buf.headers))?;
        let key = has_key.then_some(k0..buf.bytes.len());
        let v0 = buf.bytes.len();
        self.encode_value_into(ev, now, &mut buf.bytes, Some(&mut buf.headers))?;
        let value = Some(v0..buf.bytes.len());
        buf.spans.push(RecordSpan {
            kind: RecordKind::Change(ev.op),
            key: key.clone(),
            value,
            headers: h0..buf.header_mark(),
        });
        // A tombstone only means something to compaction when there is a key.
        if ev.op == Op::Delete && self.config().tombstones_on_delete && key.is_some() {
            let h = buf.header_mark();
            buf.spans.push(RecordSpan {
                kind: RecordKind::Tombstone,
                key,
                value: None,
                headers: h..h,
            });
        }
        Ok(())
    }

    fn key_change(
        &self,
        ev: &ChangeEvent,
        now: i64,
        buf: &mut RecordBuf,
    ) -> Result<(), EncodeError> {
        // changes_key() guarantees both rows are present.
        let (Some(before), Some(after)) = (ev.before.as_ref(), ev.after.as_ref()) else {
            return Ok(());
        };
        // Key headers (a hidden value in a key column) go with the record keyed by it.
        let mut key_headers = HeaderBuf::default();
        let s = buf.bytes.len();
        self.encode_key_row(before, &mut buf.bytes, Some(&mut key_headers))?;
        let old_key = s..buf.bytes.len();
        let old_key_headers = key_headers.spans.len();
        let s = buf.bytes.len();
        self.encode_key_row(after, &mut buf.bytes, Some(&mut key_headers))?;
        let new_key = s..buf.bytes.len();
        let h_delete = buf.header_mark();
        buf.headers
            .push(HEADER_NEW_KEY, &buf.bytes[new_key.clone()]);
        buf.headers.extend_from(&key_headers, 0..old_key_headers);
        let s = buf.bytes.len();
        self.encode_envelope(
            Op::Delete,
            Some(before),
            None,
            ev,
            now,
            &mut buf.bytes,
            Some(&mut buf.headers),
        )?;
        let delete = s..buf.bytes.len();
        let h_tomb = buf.header_mark();
        buf.headers
            .push(HEADER_OLD_KEY, &buf.bytes[old_key.clone()]);
        buf.headers
            .extend_from(&key_headers, old_key_headers..key_headers.spans.len());
        // The create half is the next event of the transaction (see TransactionInfo).
        let next;
        let create_ev = match &ev.tx {
            Some(t) => {
                next = ChangeEvent {
                    tx: Some(TransactionInfo {
                        id: t.id.clone(),
                        total_order: t.total_order + 1,
                        data_collection_order: t.data_collection_order + 1,
                    }),
                    ..ev.clone()
                };
                &next
            }
            None => ev,
        };
        let s = buf.bytes.len();
        self.encode_envelope(
            Op::Create,
            None,
            Some(after),
            create_ev,
            now,
            &mut buf.bytes,
            Some(&mut buf.headers),
        )?;
        let create = s..buf.bytes.len();
        let h_end = buf.header_mark();
        buf.spans.push(RecordSpan {
            kind: RecordKind::Change(Op::Delete),
            key: Some(old_key.clone()),
            value: Some(delete),
            headers: h_delete..h_tomb,
        });
        if self.config().tombstones_on_delete {
            buf.spans.push(RecordSpan {
                kind: RecordKind::Tombstone,
                key: Some(old_key.clone()),
                value: None,
                headers: h_tomb..h_tomb,
            });
        }
        buf.spans.push(RecordSpan {
            kind: RecordKind::Change(Op::Create),
            key: Some(new_key),
            value: Some(create),
            headers: h_tomb..h_end,
        });
        Ok(())
    }
}
