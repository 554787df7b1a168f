//! Change events: one committed change, as a source reports it.
//!
//! Invariants, enforced by the constructors:
//! - `Create` and `Read` have `after` and no `before`; `Delete` has `before` and no
//!   `after`; `Update` has `after`, and `before` when the source sent an old row (replica
//!   identity / row image); `Truncate` has neither; `Message` has a [`LogicalMessage`]
//!   and no table.
//! - every row has one value per column of `table`.

use std::sync::Arc;

use crate::position::SourcePosition;
use crate::table::TableSchema;
use crate::value::{Row, Value};

/// The kind of change, with Debezium's one-letter codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Create,
    Update,
    Delete,
    /// A row read by a snapshot.
    Read,
    Truncate,
    /// A logical decoding message (Postgres `pg_logical_emit_message`).
    Message,
}

impl Op {
    /// Debezium's `op` field.
    pub fn code(self) -> &'static str {
        match self {
            Op::Create => "c",
            Op::Update => "u",
            Op::Delete => "d",
            Op::Read => "r",
            Op::Truncate => "t",
            Op::Message => "m",
        }
    }
}

/// Debezium's `source.snapshot` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SnapshotMarker {
    /// A streamed change.
    #[default]
    False,
    True,
    First,
    FirstInDataCollection,
    LastInDataCollection,
    Last,
}

impl SnapshotMarker {
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotMarker::False => "false",
            SnapshotMarker::True => "true",
            SnapshotMarker::First => "first",
            SnapshotMarker::FirstInDataCollection => "first_in_data_collection",
            SnapshotMarker::LastInDataCollection => "last_in_data_collection",
            SnapshotMarker::Last => "last",
        }
    }
}

/// Debezium's `transaction` block.
///
/// An update that changes the key is written as two change records (delete, then create)
/// and, as with Debezium, counts as two events: sources advance both orders by two for
/// it; the event carries the delete's orders and the encoder gives the create half the
/// next ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionInfo {
    /// Postgres: `txid:lsn`; MySQL: the GTID or `file:pos`. Shared by the transaction's
    /// events (made once per transaction, not per event).
    pub id: Arc<str>,
    /// 1-based position of the event among all events of the transaction.
    pub total_order: u64,
    /// 1-based position among the transaction's events for the same table.
    pub data_collection_order: u64,
}

/// A logical decoding message (the outbox pattern's transport).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogicalMessage {
    pub prefix: String,
    pub content: Vec<u8>,
    pub transactional: bool,
}

/// One committed change.
#[derive(Clone, Debug, PartialEq)]
pub struct ChangeEvent {
    pub op: Op,
    /// The table's schema as of this change. `None` only for [`Op::Message`].
    pub table: Option<Arc<TableSchema>>,
    pub before: Option<Row>,
    pub after: Option<Row>,
    pub message: Option<LogicalMessage>,
    pub position: SourcePosition,
    /// When the source committed the change (ms since the epoch); for snapshot reads,
    /// when the row was read.
    pub source_ts_ms: i64,
    pub tx: Option<TransactionInfo>,
    pub snapshot: SnapshotMarker,
}

/// A row that does not fit its table.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("table {table}: row has {got} values but the table has {expected} columns")]
pub struct RowShapeError {
    pub table: String,
    pub expected: usize,
    pub got: usize,
}

fn check(table: &TableSchema, row: &Row) -> Result<(), RowShapeError> {
    if row.len() == table.columns.len() {
        Ok(())
    } else {
        Err(RowShapeError {
            table: table.id.to_string(),
            expected: table.columns.len(),
            got: row.len(),
        })
    }
}

impl ChangeEvent {
    fn base(
        op: Op,
        table: Option<Arc<TableSchema>>,
        position: SourcePosition,
        source_ts_ms: i64,
    ) -> Self {
        ChangeEvent {
            op,
            table,
            before: None,
            after: None,
            message: None,
            position,
            source_ts_ms,
            tx: None,
            snapshot: SnapshotMarker::False,
        }
    }

    pub fn create(
        table: Arc<TableSchema>,
        after: Row,
        position: SourcePosition,
        ts_ms: i64,
    ) -> Result<Self, RowShapeError> {
        check(&table, &after)?;
        let mut e = Self::base(Op::Create, Some(table), position, ts_ms);
        e.after = Some(after);
        Ok(e)
    }

    pub fn read(
        table: Arc<TableSchema>,
        after: Row,
        position: SourcePosition,
        ts_ms: i64,
    ) -> Result<Self, RowShapeError> {
        let mut e = Self::create(table, after, position, ts_ms)?;
        e.op = Op::Read;
        e.snapshot = SnapshotMarker::True;
        Ok(e)
    }

    pub fn update(
        table: Arc<TableSchema>,
        before: Option<Row>,
        after: Row,
        position: SourcePosition,
        ts_ms: i64,
    ) -> Result<Self, RowShapeError> {
        check(&table, &after)?;
        if let Some(b) = &before {
            check(&table, b)?;
        }
        let mut e = Self::base(Op::Update, Some(table), position, ts_ms);
        e.before = before;
        e.after = Some(after);
        Ok(e)
    }

    pub fn delete(
        table: Arc<TableSchema>,
        before: Row,
        position: SourcePosition,
        ts_ms: i64,
    ) -> Result<Self, RowShapeError> {
        check(&table, &before)?;
        let mut e = Self::base(Op::Delete, Some(table), position, ts_ms);
        e.before = Some(before);
        Ok(e)
    }

    pub fn truncate(table: Arc<TableSchema>, position: SourcePosition, ts_ms: i64) -> Self {
        Self::base(Op::Truncate, Some(table), position, ts_ms)
    }

    pub fn message(message: LogicalMessage, position: SourcePosition, ts_ms: i64) -> Self {
        let mut e = Self::base(Op::Message, None, position, ts_ms);
        e.message = Some(message);
        e
    }

    /// The row the record key is taken from: `after` for creates, reads and updates,
    /// `before` for deletes.
    pub fn key_row(&self) -> Option<&Row> {
        match self.op {
            Op::Delete => self.before.as_ref(),
            _ => self.after.as_ref(),
        }
    }

    /// The key column values, in key order. `None` when the table has no key or the event
    /// has no row.
    pub fn key_values(&self) -> Option<impl Iterator<Item = &Value>> {
        let table = self.table.as_ref()?;
        if !table.has_key() {
            return None;
        }
        let row = self.key_row()?;
        Some(table.key.iter().map(move |&i| &row.0[i]))
    }

    /// Approximately how much memory the event holds (its own size plus the heap blocks of
    /// its rows, strings and message, each with a malloc header), for bounding queues by
    /// memory rather than by count. Walks the values: O(columns).
    pub fn approx_size(&self) -> usize {
        const BLOCK: usize = 16;
        fn heap(v: &Value) -> usize {
            match v {
                Value::Text(s) | Value::Json(s) => s.capacity() + BLOCK,
                Value::Bytes(b) | Value::Bits { bytes: b, .. } => b.capacity() + BLOCK,
                Value::Decimal(crate::decimal::Decimal::Finite { unscaled, .. }) => {
                    (unscaled.bits() as usize).div_ceil(64) * 8 + BLOCK
                }
                Value::Array(a) => {
                    a.capacity() * std::mem::size_of::<Value>()
                        + BLOCK
                        + a.iter().map(heap).sum::<usize>()
                }
                Value::Raw(r) => {
                    std::mem::size_of::<crate::value::RawValue>()
                        + r.text.capacity()
                        + 2 * BLOCK
                        + heap(&r.typed)
                }
                _ => 0,
            }
        }
        let row = |r: &Option<Row>| {
            r.as_ref().map_or(0, |r| {
                r.0.capacity() * std::mem::size_of::<Value>()
                    + BLOCK
                    + r.0.iter().map(heap).sum::<usize>()
            })
        };
        // (The transaction id is shared with the other events of its transaction.)
        std::mem::size_of::<Self>()
            + row(&self.before)
            + row(&self.after)
            + self.message.as_ref().map_or(0, |m| {
                m.prefix.capacity() + m.content.capacity() + 2 * BLOCK
            })
    }

    /// True when an update changed the key: Debezium then emits a delete of the old key
    /// and a create of the new one.
    pub fn changes_key(&self) -> bool {
        let (Some(table), Some(before), Some(after)) = (&self.table, &self.before, &self.after)
        else {
            return false;
        };
        self.op == Op::Update
            && table
                .key
                .iter()
                .any(|&i| !before.0[i].is_unchanged() && before.0[i] != after.0[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::position::{Lsn, PgPosition};
    use crate::table::{Column, ColumnType, TableId};

    fn table() -> Arc<TableSchema> {
        Arc::new(
            TableSchema::new(
                TableId::new("public", "t"),
                vec![
                    Column::new("id", ColumnType::Int32, "int4").not_null(),
                    Column::new("v", ColumnType::Text { max_len: None }, "text"),
                ],
                &["id"],
            )
            .unwrap(),
        )
    }

    fn pos() -> SourcePosition {
        SourcePosition::Postgres(PgPosition {
            commit_lsn: Lsn(2),
            lsn: Lsn(1),
            ..Default::default()
        })
    }

    fn row(id: i32, v: &str) -> Row {
        Row::new(vec![Value::Int32(id), Value::Text(v.into())])
    }

    #[test]
    fn constructors_check_shape() {
        assert!(ChangeEvent::create(table(), Row::new(vec![Value::Int32(1)]), pos(), 0).is_err());
        let e = ChangeEvent::create(table(), row(1, "a"), pos(), 0).unwrap();
        assert_eq!(e.op.code(), "c");
        assert_eq!(
            e.key_values().unwrap().collect::<Vec<_>>(),
            vec![&Value::Int32(1)]
        );
    }

    #[test]
    fn approx_size_counts_heap_values() {
        let small = ChangeEvent::create(table(), row(1, ""), pos(), 0).unwrap();
        let big = ChangeEvent::create(table(), row(1, &"x".repeat(10_000)), pos(), 0).unwrap();
        assert!(small.approx_size() >= std::mem::size_of::<ChangeEvent>());
        assert!(big.approx_size() >= small.approx_size() + 10_000);
    }

    #[test]
    fn delete_keys_from_before_and_key_change_detected() {
        let d = ChangeEvent::delete(table(), row(3, "x"), pos(), 0).unwrap();
        assert_eq!(d.key_values().unwrap().next(), Some(&Value::Int32(3)));
        let u = ChangeEvent::update(table(), Some(row(1, "a")), row(2, "a"), pos(), 0).unwrap();
        assert!(u.changes_key());
        let u = ChangeEvent::update(table(), Some(row(1, "a")), row(1, "b"), pos(), 0).unwrap();
        assert!(!u.changes_key());
        let m = ChangeEvent::message(
            LogicalMessage {
                prefix: "outbox".into(),
                content: b"{}".to_vec(),
                transactional: true,
            },
            pos(),
            0,
        );
        assert!(m.key_values().is_none());
    }
}
