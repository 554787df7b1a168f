//! Kafka record batch v2 ("magic 2"): encoder and decoder. This module owns the byte
//! layout of everything inside a segment's `.log` file, which is nothing but batches back
//! to back, exactly as Kafka stores them (a Kafka tool reading our segment sees valid data).
//!
//! # Batch layout (all integers big-endian)
//!
//! ```text
//! offset  size  field
//!      0     8  baseOffset            i64  offset of the first record of the batch
//!      8     4  batchLength           i32  bytes that follow this field (total = 12 + batchLength)
//!     12     4  partitionLeaderEpoch  i32  always 0 here (one machine, one leader)
//!     16     1  magic                 i8   2
//!     17     4  crc                   u32  CRC-32C (Castagnoli) of bytes [21, end)
//!     21     2  attributes            i16  bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4,
//!                                          4 zstd), bit 3 timestamp type (0 = create time),
//!                                          bit 4 transactional, bit 5 control, bit 6 delete horizon
//!     23     4  lastOffsetDelta       i32  last offset of the batch minus baseOffset
//!     27     8  baseTimestamp         i64  timestamp of the first record (ms)
//!     35     8  maxTimestamp          i64  largest timestamp in the batch (ms)
//!     43     8  producerId            i64  -1 (no idempotent producer)
//!     51     2  producerEpoch         i16  -1
//!     53     4  baseSequence          i32  -1
//!     57     4  recordsCount          i32  number of records that follow
//!     61     .  records               the records; if the codec is not 0, the records
//!                                     compressed as one frame (lz4 frame / zstd frame)
//! ```
//!
//! # Record layout (varint = Kafka zigzag varint, see `varint.rs`)
//!
//! ```text
//! length          varint   bytes of the record after this field
//! attributes      i8       0 (unused)
//! timestampDelta  varlong  timestamp - baseTimestamp
//! offsetDelta     varint   offset - baseOffset
//! keyLength       varint   -1 = null key
//! key             bytes
//! valueLength     varint   -1 = null value (tombstone)
//! value           bytes
//! headersCount    varint
//!   headerKeyLength   varint, headerKey UTF-8 bytes
//!   headerValueLength varint (-1 = null), headerValue bytes
//! ```
//!
//! Invariants checked by the decoder (bad data is an error, never a panic): magic is 2,
//! `batchLength` is within [49, MAX_BATCH_BYTES], the CRC matches, `lastOffsetDelta >= 0`,
//! record offset deltas strictly increase and stay within `lastOffsetDelta`, every record
//! consumes exactly its `length` bytes and the records fill the batch exactly.
//! Compaction may leave a batch with fewer records than `lastOffsetDelta + 1` (even zero):
//! the batch keeps its offset range so a segment's last offset survives cleaning.

use bytes::Bytes;

use crate::codec::{compress_into, decompress};
use crate::error::{DecodeError, LogError};
use crate::record::{Header, HeaderRef, NewRecord, Record};
use crate::varint::{get_varint, get_varlong, put_varint, put_varlong, varint_len, varlong_len};

/// Bytes of the batch header, up to and including `recordsCount`.
pub const HEADER_LEN: usize = 61;
/// Bytes before `batchLength`'s coverage starts: baseOffset + batchLength.
pub const LOG_OVERHEAD: usize = 12;
/// Largest batch we accept on read or write (Kafka's default max is 1 MiB; we allow more
/// for large transactions, but bound it so a corrupt length cannot make us allocate GBs).
pub const MAX_BATCH_BYTES: usize = 64 << 20;
/// Bound on a decompressed records section (a zip bomb is an error, not an OOM).
pub const MAX_DECOMPRESSED_BYTES: usize = 256 << 20;

const CRC_START: usize = 21;
const ATTR_CODEC_MASK: i16 = 0x07;
const ATTR_CONTROL: i16 = 0x20;

/// Per-batch compression codec (Kafka's attribute codec numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    #[default]
    None,
    /// LZ4 frame format (codec 3). Needs the `lz4` cargo feature.
    Lz4,
    /// Zstandard frame (codec 4). Needs the `zstd` cargo feature.
    Zstd,
}

impl Compression {
    pub fn codec(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    pub fn from_name(s: &str) -> Option<Compression> {
        match s {
            "none" | "uncompressed" => Some(Compression::None),
            "lz4" => Some(Compression::Lz4),
            "zstd" => Some(Compression::Zstd),
            _ => None,
        }
    }
}

/// The fixed header of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: u64,
    pub batch_length: u32,
    pub leader_epoch: i32,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: u32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub records_count: u32,
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(a)
}
fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

impl BatchHeader {
    /// Parses and sanity-checks the first [`HEADER_LEN`] bytes of `buf` (no CRC check).
    pub fn parse(buf: &[u8]) -> Result<BatchHeader, DecodeError> {
        if buf.len() < HEADER_LEN {
            return Err(DecodeError::Truncated {
                need: HEADER_LEN,
                have: buf.len(),
            });
        }
        let base_offset = be_i64(buf, 0);
        if base_offset < 0 {
            return Err(DecodeError::BadLength {
                what: "baseOffset",
                value: base_offset,
            });
        }
        let batch_length = be_i32(buf, 8);
        if batch_length < (HEADER_LEN - LOG_OVERHEAD) as i32
            || batch_length as usize > MAX_BATCH_BYTES
        {
            return Err(DecodeError::BadLength {
                what: "batchLength",
                value: batch_length as i64,
            });
        }
        let magic = buf[16];
        if magic != 2 {
            return Err(DecodeError::BadMagic {
                found: magic as u64,
            });
        }
        let last_offset_delta = be_i32(buf, 23);
        if last_offset_delta < 0 {
            return Err(DecodeError::BadLength {
                what: "lastOffsetDelta",
                value: last_offset_delta as i64,
            });
        }
        if (base_offset as u64)
            .checked_add(last_offset_delta as u64)
            .is_none()
            || base_offset.checked_add(last_offset_delta as i64).is_none()
        {
            return Err(DecodeError::Malformed("offset overflow"));
        }
        let records_count = be_i32(buf, 57);
        if records_count < 0 || records_count as i64 > last_offset_delta as i64 + 1 {
            return Err(DecodeError::BadLength {
                what: "recordsCount",
                value: records_count as i64,
            });
        }
        Ok(BatchHeader {
            base_offset: base_offset as u64,
            batch_length: batch_length as u32,
            leader_epoch: be_i32(buf, 12),
            crc: be_i32(buf, 17) as u32,
            attributes: be_i16(buf, 21),
            last_offset_delta: last_offset_delta as u32,
            base_timestamp: be_i64(buf, 27),
            max_timestamp: be_i64(buf, 35),
            records_count: records_count as u32,
        })
    }

    /// Total bytes of the batch on disk.
    pub fn total_len(&self) -> usize {
        LOG_OVERHEAD + self.batch_length as usize
    }

    pub fn last_offset(&self) -> u64 {
        self.base_offset + self.last_offset_delta as u64
    }

    /// Offset after this batch.
    pub fn next_offset(&self) -> u64 {
        self.last_offset() + 1
    }

    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    pub fn compression(&self) -> Result<Compression, DecodeError> {
        match (self.attributes & ATTR_CODEC_MASK) as u8 {
            0 => Ok(Compression::None),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            other => Err(DecodeError::UnsupportedCodec(other)),
        }
    }
}

/// Checks a whole batch (`buf` must be exactly one batch): header, length and CRC.
pub fn verify_batch(buf: &[u8]) -> Result<BatchHeader, DecodeError> {
    let h = BatchHeader::parse(buf)?;
    if buf.len() < h.total_len() {
        return Err(DecodeError::Truncated {
            need: h.total_len(),
            have: buf.len(),
        });
    }
    let computed = crc32c::crc32c(&buf[CRC_START..h.total_len()]);
    if computed != h.crc {
        return Err(DecodeError::CrcMismatch {
            stored: h.crc,
            computed,
        });
    }
    Ok(h)
}

/// Summary of an encoded batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodedBatch {
    pub len: usize,
    pub base_offset: u64,
    pub last_offset: u64,
    pub max_timestamp: i64,
    /// Offset of the (last) record with the largest timestamp, for the time index.
    pub offset_of_max_timestamp: u64,
}

fn record_body_len(r: &NewRecord<'_>, ts_delta: i64, offset_delta: i32) -> usize {
    let mut n = 1 + varlong_len(ts_delta) + varint_len(offset_delta);
    n += match r.key {
        Some(k) => varint_len(k.len() as i32) + k.len(),
        None => 1,
    };
    n += match r.value {
        Some(v) => varint_len(v.len() as i32) + v.len(),
        None => 1,
    };
    n += varint_len(r.headers.len() as i32);
    for h in r.headers {
        n += varint_len(h.key.len() as i32) + h.key.len();
        n += match h.value {
            Some(v) => varint_len(v.len() as i32) + v.len(),
            None => 1,
        };
    }
    n
}

fn put_bytes_opt(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        Some(b) => {
            put_varint(out, b.len() as i32);
            out.extend_from_slice(b);
        }
        None => put_varint(out, -1),
    }
}

fn encode_records_into(
    out: &mut Vec<u8>,
    records: &[NewRecord<'_>],
    deltas: Option<&[u32]>,
    base_ts: i64,
) {
    for (i, r) in records.iter().enumerate() {
        let od = deltas.map_or(i as u32, |d| d[i]) as i32;
        let tsd = r.timestamp.wrapping_sub(base_ts);
        put_varint(out, record_body_len(r, tsd, od) as i32);
        out.push(0);
        put_varlong(out, tsd);
        put_varint(out, od);
        put_bytes_opt(out, r.key);
        put_bytes_opt(out, r.value);
        put_varint(out, r.headers.len() as i32);
        for h in r.headers {
            put_varint(out, h.key.len() as i32);
            out.extend_from_slice(h.key.as_bytes());
            put_bytes_opt(out, h.value);
        }
    }
}

/// Encodes one batch at the end of `out` (which is not cleared, so several batches can be
/// built in one buffer). `deltas` gives each record's offset delta (strictly increasing,
/// used by compaction); `None` means 0, 1, 2, ... `last_offset_delta` defaults to the last
/// record's delta. `scratch` is a reusable buffer for compression.
///
/// The hot path (no compression) does not allocate once `out` has grown to size.
pub fn encode_batch(
    out: &mut Vec<u8>,
    base_offset: u64,
    records: &[NewRecord<'_>],
    deltas: Option<&[u32]>,
    last_offset_delta: Option<u32>,
    compression: Compression,
    scratch: &mut Vec<u8>,
) -> Result<EncodedBatch, LogError> {
    if let Some(d) = deltas {
        if d.len() != records.len() || d.windows(2).any(|w| w[0] >= w[1]) {
            return Err(LogError::InvalidArgument(
                "offset deltas must match the records and strictly increase".into(),
            ));
        }
    }
    for r in records {
        let too_big = |b: Option<&[u8]>| b.is_some_and(|b| b.len() > MAX_BATCH_BYTES);
        if too_big(r.key) || too_big(r.value) {
            return Err(LogError::InvalidArgument(format!(
                "record larger than the maximum batch size of {MAX_BATCH_BYTES} bytes"
            )));
        }
    }
    let last_delta = match (last_offset_delta, records.len()) {
        (Some(l), _) => l,
        (None, 0) => return Err(LogError::InvalidArgument("empty batch".into())),
        (None, n) => deltas.map_or(n as u32 - 1, |d| d[n - 1]),
    };
    if deltas
        .and_then(|d| d.last())
        .is_some_and(|&d| d > last_delta)
        || (deltas.is_none() && records.len() as u64 > last_delta as u64 + 1)
    {
        return Err(LogError::InvalidArgument(
            "lastOffsetDelta below the last record".into(),
        ));
    }
    let base_ts = records.first().map_or(-1, |r| r.timestamp);
    let mut max_ts = i64::MIN;
    let mut off_of_max = base_offset;
    for (i, r) in records.iter().enumerate() {
        if r.timestamp >= max_ts {
            max_ts = r.timestamp;
            off_of_max = base_offset + deltas.map_or(i as u64, |d| d[i] as u64);
        }
    }
    if records.is_empty() {
        max_ts = -1;
        off_of_max = base_offset + last_delta as u64;
    }

    let start = out.len();
    out.resize(start + HEADER_LEN, 0);
    match compression {
        Compression::None => encode_records_into(out, records, deltas, base_ts),
        c => {
            scratch.clear();
            encode_records_into(scratch, records, deltas, base_ts);
            compress_into(c, scratch, out)?;
        }
    }
    let total = out.len() - start;
    if total > MAX_BATCH_BYTES + LOG_OVERHEAD {
        out.truncate(start);
        return Err(LogError::InvalidArgument(format!(
            "batch of {total} bytes exceeds the maximum of {MAX_BATCH_BYTES}; append fewer records per batch"
        )));
    }
    let h = &mut out[start..start + HEADER_LEN];
    h[0..8].copy_from_slice(&(base_offset as i64).to_be_bytes());
    h[8..12].copy_from_slice(&((total - LOG_OVERHEAD) as i32).to_be_bytes());
    h[12..16].copy_from_slice(&0i32.to_be_bytes());
    h[16] = 2;
    h[21..23].copy_from_slice(&compression.codec().to_be_bytes());
    h[23..27].copy_from_slice(&(last_delta as i32).to_be_bytes());
    h[27..35].copy_from_slice(&base_ts.to_be_bytes());
    h[35..43].copy_from_slice(&max_ts.to_be_bytes());
    h[43..51].copy_from_slice(&(-1i64).to_be_bytes());
    h[51..53].copy_from_slice(&(-1i16).to_be_bytes());
    h[53..57].copy_from_slice(&(-1i32).to_be_bytes());
    h[57..61].copy_from_slice(&(records.len() as i32).to_be_bytes());
    let crc = crc32c::crc32c(&out[start + CRC_START..]);
    out[start + 17..start + 21].copy_from_slice(&crc.to_be_bytes());
    Ok(EncodedBatch {
        len: total,
        base_offset,
        last_offset: base_offset + last_delta as u64,
        max_timestamp: max_ts,
        offset_of_max_timestamp: off_of_max,
    })
}

/// A record as stored, borrowed from the (decompressed) records section of a batch.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    pub offset_delta: u32,
    pub timestamp_delta: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    header_count: u32,
    headers_raw: &'a [u8],
}

impl<'a> RecordRef<'a> {
    /// Iterates the headers (already validated by the record iterator).
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, Option<&'a [u8]>)> + 'a {
        let raw = self.headers_raw;
        let mut pos = 0usize;
        (0..self.header_count).filter_map(move |_| {
            let (k, v) = read_header(raw, &mut pos).ok()?;
            Some((k, v))
        })
    }

    pub fn header_count(&self) -> u32 {
        self.header_count
    }
}

fn read_bytes_opt<'a>(buf: &'a [u8], pos: &mut usize) -> Result<Option<&'a [u8]>, DecodeError> {
    let len = get_varint(buf, pos)?;
    if len == -1 {
        return Ok(None);
    }
    if len < 0 {
        return Err(DecodeError::BadLength {
            what: "bytes",
            value: len as i64,
        });
    }
    let end = pos
        .checked_add(len as usize)
        .ok_or(DecodeError::Malformed("length overflow"))?;
    if end > buf.len() {
        return Err(DecodeError::Truncated {
            need: end,
            have: buf.len(),
        });
    }
    let s = &buf[*pos..end];
    *pos = end;
    Ok(Some(s))
}

fn read_header<'a>(
    buf: &'a [u8],
    pos: &mut usize,
) -> Result<(&'a str, Option<&'a [u8]>), DecodeError> {
    let key = read_bytes_opt(buf, pos)?.ok_or(DecodeError::Malformed("null header key"))?;
    let key =
        std::str::from_utf8(key).map_err(|_| DecodeError::Malformed("header key not UTF-8"))?;
    let value = read_bytes_opt(buf, pos)?;
    Ok((key, value))
}

/// Iterates the records of a decompressed records section, validating each.
pub struct RecordIter<'a> {
    buf: &'a [u8],
    pos: usize,
    remaining: u32,
    last_offset_delta: u32,
    prev_delta: Option<u32>,
}

impl<'a> RecordIter<'a> {
    pub fn new(records: &'a [u8], header: &BatchHeader) -> Self {
        RecordIter {
            buf: records,
            pos: 0,
            remaining: header.records_count,
            last_offset_delta: header.last_offset_delta,
            prev_delta: None,
        }
    }

    /// Byte position within the records section (for slicing zero-copy buffers).
    pub fn position(&self) -> usize {
        self.pos
    }

    fn next_record(&mut self) -> Result<RecordRef<'a>, DecodeError> {
        let buf = self.buf;
        let len = get_varint(buf, &mut self.pos)?;
        if len < 0 {
            return Err(DecodeError::BadLength {
                what: "record length",
                value: len as i64,
            });
        }
        let end = self
            .pos
            .checked_add(len as usize)
            .ok_or(DecodeError::Malformed("length overflow"))?;
        if end > buf.len() {
            return Err(DecodeError::Truncated {
                need: end,
                have: buf.len(),
            });
        }
        let rec = &buf[..end];
        let mut p = self.pos;
        if rec.len() <= p {
            return Err(DecodeError::Malformed("empty record"));
        }
        p += 1; // attributes
        let timestamp_delta = get_varlong(rec, &mut p)?;
        let od = get_varint(rec, &mut p)?;
        if od < 0 || od as u32 > self.last_offset_delta {
            return Err(DecodeError::Malformed("offset delta out of batch range"));
        }
        let od = od as u32;
        if self.prev_delta.is_some_and(|prev| od <= prev) {
            return Err(DecodeError::Malformed("offset deltas not increasing"));
        }
        self.prev_delta = Some(od);
        let key = read_bytes_opt(rec, &mut p)?;
        let value = read_bytes_opt(rec, &mut p)?;
        let hc = get_varint(rec, &mut p)?;
        if hc < 0 {
            return Err(DecodeError::BadLength {
                what: "header count",
                value: hc as i64,
            });
        }
        let hstart = p;
        for _ in 0..hc {
            read_header(rec, &mut p)?;
        }
        if p != end {
            return Err(DecodeError::Malformed(
                "record length does not match its fields",
            ));
        }
        self.pos = end;
        Ok(RecordRef {
            offset_delta: od,
            timestamp_delta,
            key,
            value,
            header_count: hc as u32,
            headers_raw: &rec[hstart..end],
        })
    }
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<RecordRef<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            if self.pos != self.buf.len() {
                self.pos = self.buf.len();
                return Some(Err(DecodeError::Malformed("bytes after the last record")));
            }
            return None;
        }
        self.remaining -= 1;
        match self.next_record() {
            Ok(r) => Some(Ok(r)),
            Err(e) => {
                self.remaining = 0;
                self.pos = self.buf.len();
                Some(Err(e))
            }
        }
    }
}

/// Returns the records section of a verified batch, decompressed if needed. Borrowed when
/// uncompressed, so the common path copies nothing.
pub fn records_section<'a>(
    batch: &'a [u8],
    header: &BatchHeader,
) -> Result<std::borrow::Cow<'a, [u8]>, DecodeError> {
    let body = &batch[HEADER_LEN..header.total_len()];
    match header.compression()? {
        Compression::None => Ok(std::borrow::Cow::Borrowed(body)),
        c => Ok(std::borrow::Cow::Owned(decompress(c, body)?)),
    }
}

/// Decodes the records of one verified batch (held in `batch`, exactly one batch) into
/// `out`, skipping records with offsets below `min_offset`. Keys, values and header values
/// are zero-copy slices of `batch` (or of the decompressed buffer). Control batches yield
/// nothing. Returns the bytes of record payload pushed.
pub fn decode_into(
    batch: &Bytes,
    header: &BatchHeader,
    min_offset: u64,
    out: &mut Vec<Record>,
) -> Result<usize, DecodeError> {
    if header.is_control() || header.records_count == 0 {
        return Ok(0);
    }
    let section: Bytes = match header.compression()? {
        Compression::None => batch.slice(HEADER_LEN..header.total_len()),
        c => Bytes::from(decompress(c, &batch[HEADER_LEN..header.total_len()])?),
    };
    let mut pushed = 0;
    let mut it = RecordIter::new(&section, header);
    for r in &mut it {
        let r = r?;
        let offset = header.base_offset + r.offset_delta as u64;
        if offset < min_offset {
            continue;
        }
        let headers = if r.header_count == 0 {
            Vec::new()
        } else {
            r.headers()
                .map(|(k, v)| Header {
                    key: k.to_owned(),
                    value: v.map(|v| section.slice_ref(v)),
                })
                .collect()
        };
        let rec = Record {
            offset,
            timestamp: header.base_timestamp.wrapping_add(r.timestamp_delta),
            key: r.key.map(|k| section.slice_ref(k)),
            value: r.value.map(|v| section.slice_ref(v)),
            headers,
        };
        pushed += rec.size_hint();
        out.push(rec);
    }
    Ok(pushed)
}

/// Calls `f` with [`NewRecord`] views of owned records (and their offset deltas from
/// `base`): how the cleaner re-encodes survivors without copying their bytes twice.
pub fn with_new_records<R>(
    kept: &[&Record],
    base: u64,
    f: impl FnOnce(&[NewRecord<'_>], &[u32]) -> R,
) -> R {
    let headers: Vec<Vec<HeaderRef<'_>>> = kept
        .iter()
        .map(|r| {
            r.headers
                .iter()
                .map(|h| HeaderRef {
                    key: &h.key,
                    value: h.value.as_deref(),
                })
                .collect()
        })
        .collect();
    let recs: Vec<NewRecord<'_>> = kept
        .iter()
        .zip(&headers)
        .map(|(r, h)| NewRecord {
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            headers: h,
            timestamp: r.timestamp,
        })
        .collect();
    let deltas: Vec<u32> = kept.iter().map(|r| (r.offset - base) as u32).collect();
    f(&recs, &deltas)
}

/// Fully validates one batch: header, CRC, and every record. Used by recovery of the
/// durable tail, `Log::verify`, and the fuzz target.
pub fn validate_batch(buf: &[u8]) -> Result<BatchHeader, DecodeError> {
    let h = verify_batch(buf)?;
    if !h.is_control() {
        let section = records_section(buf, &h)?;
        for r in RecordIter::new(&section, &h) {
            r?;
        }
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let h = [HeaderRef {
            key: "h1",
            value: Some(b"v"),
        }];
        let recs = [
            NewRecord::new(Some(b"k1"), Some(b"value-1"), 1000),
            NewRecord {
                key: None,
                value: None,
                headers: &h,
                timestamp: 999,
            },
            NewRecord::new(Some(b""), Some(b"x"), 2000),
        ];
        let mut out = Vec::new();
        encode_batch(
            &mut out,
            42,
            &recs,
            None,
            None,
            Compression::None,
            &mut Vec::new(),
        )
        .unwrap();
        out
    }

    #[test]
    fn encode_decode_round_trip() {
        let buf = sample();
        let h = validate_batch(&buf).unwrap();
        assert_eq!(h.base_offset, 42);
        assert_eq!(h.last_offset(), 44);
        assert_eq!(h.max_timestamp, 2000);
        assert_eq!(h.base_timestamp, 1000);
        assert_eq!(h.records_count, 3);
        let b = Bytes::from(buf);
        let mut out = Vec::new();
        decode_into(&b, &h, 43, &mut out).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].offset, 43);
        assert_eq!(out[0].timestamp, 999);
        assert_eq!(out[0].key, None);
        assert_eq!(out[0].headers[0].key, "h1");
        assert_eq!(out[1].key.as_deref(), Some(&b""[..]));
    }

    #[test]
    fn kafka_layout_exact_bytes() {
        // One record, key "k", value "v", timestamp 5, base offset 0: check header fields
        // at Kafka's positions and the record bytes as Kafka's DefaultRecord writes them.
        let mut out = Vec::new();
        encode_batch(
            &mut out,
            0,
            &[NewRecord::new(Some(b"k"), Some(b"v"), 5)],
            None,
            None,
            Compression::None,
            &mut Vec::new(),
        )
        .unwrap();
        // record: attrs 0, tsDelta 0, offDelta 0, keyLen 1 (zigzag 2), 'k', valLen 2, 'v', 0 headers
        let rec = [0u8, 0, 0, 2, b'k', 2, b'v', 0];
        assert_eq!(out.len(), HEADER_LEN + 1 + rec.len());
        assert_eq!(out[HEADER_LEN], (rec.len() as u8) << 1);
        assert_eq!(&out[HEADER_LEN + 1..], &rec);
        assert_eq!(&out[8..12], &((out.len() - 12) as i32).to_be_bytes());
        assert_eq!(out[16], 2);
        assert_eq!(&out[43..51], &(-1i64).to_be_bytes());
    }

    #[test]
    fn crc_and_truncation_detected() {
        let mut buf = sample();
        let n = buf.len();
        buf[n - 1] ^= 0xff;
        assert!(matches!(
            verify_batch(&buf),
            Err(DecodeError::CrcMismatch { .. })
        ));
        let buf = sample();
        assert!(matches!(
            verify_batch(&buf[..n - 3]),
            Err(DecodeError::Truncated { .. })
        ));
    }

    #[cfg(all(feature = "zstd", feature = "lz4"))]
    #[test]
    fn compressed_round_trip() {
        for c in [Compression::Lz4, Compression::Zstd] {
            let v = vec![7u8; 5000];
            let recs: Vec<_> = (0..10)
                .map(|i| NewRecord::new(None, Some(&v[..]), i))
                .collect();
            let mut out = Vec::new();
            encode_batch(&mut out, 0, &recs, None, None, c, &mut Vec::new()).unwrap();
            assert!(out.len() < 5000, "{c:?} did not compress");
            let h = validate_batch(&out).unwrap();
            let mut dec = Vec::new();
            decode_into(&Bytes::from(out), &h, 0, &mut dec).unwrap();
            assert_eq!(dec.len(), 10);
            assert_eq!(dec[9].value.as_deref(), Some(&v[..]));
        }
    }
}
