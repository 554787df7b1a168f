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
//! Invariant: records come out in the order they must be appended to the log.

use crate::encode::{EncodeError, Encoder};
use crate::event::{ChangeEvent, Op};

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

impl Encoder {
    /// The records Debezium would emit for `ev`, with `processed_at_ns` as the envelopes'
    /// processing time.
    pub fn records(
        &self,
        ev: &ChangeEvent,
        processed_at_ns: i64,
    ) -> Result<Vec<Record>, EncodeError> {
        let key = |this: &Self| -> Result<Option<Vec<u8>>, EncodeError> {
            let mut k = Vec::new();
            Ok(this.encode_key(ev, &mut k)?.then_some(k))
        };
        match ev.op {
            Op::Update if ev.changes_key() => self.key_change(ev, processed_at_ns),
            Op::Delete => {
                let key = key(self)?;
                let mut value = Vec::new();
                self.encode_value_at(ev, processed_at_ns, &mut value)?;
                let mut out = vec![Record {
                    kind: RecordKind::Change(Op::Delete),
                    key: key.clone(),
                    value: Some(value),
                    headers: Vec::new(),
                }];
                // A tombstone only means something to compaction when there is a key.
                if self.config().tombstones_on_delete && key.is_some() {
                    out.push(Record {
                        kind: RecordKind::Tombstone,
                        key,
                        value: None,
                        headers: Vec::new(),
                    });
                }
                Ok(out)
            }
            op => {
                let key = key(self)?;
                let mut value = Vec::new();
                self.encode_value_at(ev, processed_at_ns, &mut value)?;
                Ok(vec![Record {
                    kind: RecordKind::Change(op),
                    key,
                    value: Some(value),
                    headers: Vec::new(),
                }])
            }
        }
    }

    fn key_change(&self, ev: &ChangeEvent, now: i64) -> Result<Vec<Record>, EncodeError> {
        // changes_key() guarantees both rows are present.
        let (Some(before), Some(after)) = (ev.before.as_ref(), ev.after.as_ref()) else {
            return Ok(Vec::new());
        };
        let mut old_key = Vec::new();
        self.encode_key_row(before, &mut old_key)?;
        let mut new_key = Vec::new();
        self.encode_key_row(after, &mut new_key)?;
        let mut delete = Vec::new();
        self.encode_envelope(Op::Delete, Some(before), None, ev, now, &mut delete)?;
        let mut create = Vec::new();
        self.encode_envelope(Op::Create, None, Some(after), ev, now, &mut create)?;
        let mut out = vec![Record {
            kind: RecordKind::Change(Op::Delete),
            key: Some(old_key.clone()),
            value: Some(delete),
            headers: vec![(HEADER_NEW_KEY, new_key.clone())],
        }];
        if self.config().tombstones_on_delete {
            out.push(Record {
                kind: RecordKind::Tombstone,
                key: Some(old_key.clone()),
                value: None,
                headers: Vec::new(),
            });
        }
        out.push(Record {
            kind: RecordKind::Change(Op::Create),
            key: Some(new_key),
            value: Some(create),
            headers: vec![(HEADER_OLD_KEY, old_key)],
        });
        Ok(out)
    }
}
