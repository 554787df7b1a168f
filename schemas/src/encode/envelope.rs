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
//! Avro), so a consumer decodes them with the key deserializer it already has.
//!
//! Two forms: [`Encoder::records_into`] appends to a reusable [`RecordBuf`] (one byte
//! buffer plus ranges: no allocation per record once the buffer is warm — the pipeline's
//! hot path); [`Encoder::records`] returns owned [`Record`]s built from it.
//!
//! Invariant: records come out in the order they must be appended to the log.

use std::ops::Range;

use crate::encode::{EncodeError, Encoder};
use crate::event::{ChangeEvent, Op, TransactionInfo};

/// Debezium's header on the delete half of a key change: the row's new key.
pub const HEADER_NEW_KEY: &str = "__debezium.newkey";
/// Debezium's header on the create half of a key change: the row's old key.
pub const HEADER_OLD_KEY: &str = "__debezium.oldkey";

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
    pub headers: Vec<(&'static str, Vec<u8>)>,
}

/// One record inside a [`RecordBuf`]: ranges of its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordSpan {
    pub kind: RecordKind,
    pub key: Option<Range<usize>>,
    /// `None` for a tombstone.
    pub value: Option<Range<usize>>,
    /// At most one header (the other key of a key change).
    pub header: Option<(&'static str, Range<usize>)>,
}

/// Records encoded back to back into one byte buffer. Clear and reuse it: its capacity
/// is kept, so steady-state encoding allocates nothing per record.
#[derive(Clone, Debug, Default)]
pub struct RecordBuf {
    pub bytes: Vec<u8>,
    pub spans: Vec<RecordSpan>,
}

impl RecordBuf {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
        self.spans.clear();
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

    pub fn header(&self, i: usize) -> Option<(&'static str, &[u8])> {
        self.spans[i]
            .header
            .as_ref()
            .map(|(k, r)| (*k, &self.bytes[r.clone()]))
    }

    /// Record `i` as an owned [`Record`].
    pub fn to_record(&self, i: usize) -> Record {
        Record {
            kind: self.spans[i].kind,
            key: self.key(i).map(<[u8]>::to_vec),
            value: self.value(i).map(<[u8]>::to_vec),
            headers: self
                .header(i)
                .map(|(k, v)| vec![(k, v.to_vec())])
                .unwrap_or_default(),
        }
    }

    fn truncate(&mut self, bytes: usize, spans: usize) {
        self.bytes.truncate(bytes);
        self.spans.truncate(spans);
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
        let r = self.records_into_inner(ev, processed_at_ns, buf);
        if r.is_err() {
            buf.truncate(bytes0, spans0);
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
        let k0 = buf.bytes.len();
        let has_key = self.encode_key(ev, &mut buf.bytes)?;
        let key = has_key.then_some(k0..buf.bytes.len());
        let v0 = buf.bytes.len();
        self.encode_value_at(ev, now, &mut buf.bytes)?;
        let value = Some(v0..buf.bytes.len());
        buf.spans.push(RecordSpan {
            kind: RecordKind::Change(ev.op),
            key: key.clone(),
            value,
            header: None,
        });
        // A tombstone only means something to compaction when there is a key.
        if ev.op == Op::Delete && self.config().tombstones_on_delete && key.is_some() {
            buf.spans.push(RecordSpan {
                kind: RecordKind::Tombstone,
                key,
                value: None,
                header: None,
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
        let b = &mut buf.bytes;
        let s = b.len();
        self.encode_key_row(before, b)?;
        let old_key = s..b.len();
        let s = b.len();
        self.encode_key_row(after, b)?;
        let new_key = s..b.len();
        let s = b.len();
        self.encode_envelope(Op::Delete, Some(before), None, ev, now, b)?;
        let delete = s..b.len();
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
        let s = b.len();
        self.encode_envelope(Op::Create, None, Some(after), create_ev, now, b)?;
        let create = s..b.len();
        buf.spans.push(RecordSpan {
            kind: RecordKind::Change(Op::Delete),
            key: Some(old_key.clone()),
            value: Some(delete),
            header: Some((HEADER_NEW_KEY, new_key.clone())),
        });
        if self.config().tombstones_on_delete {
            buf.spans.push(RecordSpan {
                kind: RecordKind::Tombstone,
                key: Some(old_key.clone()),
                value: None,
                header: None,
            });
        }
        buf.spans.push(RecordSpan {
            kind: RecordKind::Change(Op::Create),
            key: Some(new_key),
            value: Some(create),
            header: Some((HEADER_OLD_KEY, old_key)),
        });
        Ok(())
    }
}
