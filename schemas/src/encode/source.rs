//! The envelope's provenance blocks, in every format: `source` (where in the database a
//! change came from) and `transaction`.
//!
//! What the `source` block holds that does not depend on the event (connector version
//! and name, database, schema and table) is written once, when the encoder is built, into
//! [`SourcePieces`]; per event only the timestamps, the snapshot marker and the position
//! are written, and the JSON block of a Postgres change is memoized (`memo.rs`).
//!
//! Invariants: fields come in the order of [`super::record_schema::source_schema`] for the
//! configured connector; a block is only written for an event whose position is of that
//! connector's kind (checked first, so a mismatch writes nothing of the block).

use crate::encode::config::{ConnectorKind, SourceInfo};
use crate::encode::writer::{field, FormatWriter};
use crate::encode::{memo, EncodeError, Encoder};
use crate::event::{ChangeEvent, TransactionInfo};
use crate::position::SourcePosition;

/// The constant parts of one encoder's `source` block, in its format.
pub(crate) struct SourcePieces {
    /// `version`, `connector`, `name`, and the key of `ts_ms`.
    head: Vec<u8>,
    /// `db`.
    db: Vec<u8>,
    /// Postgres: `schema` and `table`; MySQL: the optional `table`.
    table: Vec<u8>,
}

impl SourcePieces {
    pub(crate) fn new<W: FormatWriter>(
        w: &W,
        src: &SourceInfo,
        db: &str,
        schema: &str,
        table: &str,
    ) -> SourcePieces {
        let mut head = Vec::new();
        w.field(&mut head, field!(first "version"));
        w.string(&mut head, &src.version);
        w.field(&mut head, field!("connector"));
        w.string(&mut head, src.connector.name());
        w.field(&mut head, field!("name"));
        w.string(&mut head, &src.topic_prefix);
        w.field(&mut head, field!("ts_ms"));
        let mut db_piece = Vec::new();
        w.field(&mut db_piece, field!("db"));
        w.string(&mut db_piece, db);
        let mut table_piece = Vec::new();
        match src.connector {
            ConnectorKind::Postgres => {
                w.field(&mut table_piece, field!("schema"));
                w.string(&mut table_piece, schema);
                w.field(&mut table_piece, field!("table"));
                w.string(&mut table_piece, table);
            }
            ConnectorKind::MySql | ConnectorKind::MariaDb => {
                w.field(&mut table_piece, field!("table"));
                w.branch(&mut table_piece, 1);
                w.string(&mut table_piece, table);
            }
        }
        SourcePieces {
            head,
            db: db_piece,
            table: table_piece,
        }
    }
}

impl Encoder {
    /// The `source` block of `ev`, from the memo when the format is worth it.
    pub(crate) fn write_source<W: FormatWriter>(
        &self,
        w: &W,
        ev: &ChangeEvent,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        self.check_position(ev)?;
        match &ev.position {
            SourcePosition::Postgres(p) if W::MEMOIZE => {
                let key = memo::SourceKey {
                    encoder: self.id,
                    ts_ms: ev.source_ts_ms,
                    snapshot: ev.snapshot,
                    pos: p.clone(),
                };
                memo::source(&key, out, |o| {
                    write_source_block(w, &self.source, ev, o);
                    Ok::<(), EncodeError>(())
                })
            }
            _ => {
                write_source_block(w, &self.source, ev, out);
                Ok(())
            }
        }
    }

    /// The `source` block of `ev`, always written afresh: logical decoding messages are
    /// rare, and memoizing theirs would evict the block of the table changes around them.
    pub(crate) fn write_source_unmemoized<W: FormatWriter>(
        &self,
        w: &W,
        ev: &ChangeEvent,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        self.check_position(ev)?;
        write_source_block(w, &self.source, ev, out);
        Ok(())
    }

    fn check_position(&self, ev: &ChangeEvent) -> Result<(), EncodeError> {
        let pg = self.config.source.connector == ConnectorKind::Postgres;
        match (&ev.position, pg) {
            (SourcePosition::Postgres(_), true) | (SourcePosition::Mysql(_), false) => Ok(()),
            (p, _) => Err(EncodeError::PositionMismatch {
                table: self.label().to_string(),
                expected: self.config.source.connector.name(),
                got: match p {
                    SourcePosition::Postgres(_) => "Postgres",
                    SourcePosition::Mysql(_) => "MySQL",
                },
            }),
        }
    }
}

/// The block itself; `ev`'s position is of the pieces' connector.
fn write_source_block<W: FormatWriter>(
    w: &W,
    pieces: &SourcePieces,
    ev: &ChangeEvent,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(&pieces.head);
    w.long(out, ev.source_ts_ms);
    w.field(out, field!("snapshot"));
    // An optional enum with default "false", so its union puts the string first.
    w.branch(out, 0);
    w.symbol(out, ev.snapshot.as_str());
    out.extend_from_slice(&pieces.db);
    w.field(out, field!("sequence"));
    match &ev.position {
        SourcePosition::Postgres(p) => {
            w.branch(out, 1);
            w.pg_sequence(out, p.commit_lsn.0, p.lsn.0);
        }
        SourcePosition::Mysql(_) => w.null(out),
    }
    w.field(out, field!("ts_us"));
    w.opt_long(out, Some(ev.source_ts_ms.saturating_mul(1_000)));
    w.field(out, field!("ts_ns"));
    w.opt_long(out, Some(ev.source_ts_ms.saturating_mul(1_000_000)));
    out.extend_from_slice(&pieces.table);
    match &ev.position {
        SourcePosition::Postgres(p) => {
            w.field(out, field!("txId"));
            w.opt_long(out, p.tx_id.map(i64::from));
            w.field(out, field!("lsn"));
            w.opt_long(out, lsn_i64(p.lsn.0));
            w.field(out, field!("xmin"));
            w.opt_long(out, p.xmin.map(|x| x as i64));
            // The transaction's replication origin: not carried by ChangeEvent.
            w.field(out, field!("origin"));
            w.null(out);
            w.field(out, field!("origin_lsn"));
            w.null(out);
        }
        SourcePosition::Mysql(m) => {
            w.field(out, field!("server_id"));
            w.long(out, m.server_id as i64);
            w.field(out, field!("gtid"));
            w.opt_string(out, m.gtid.as_deref());
            w.field(out, field!("file"));
            w.string(out, &m.file);
            w.field(out, field!("pos"));
            w.long(out, m.pos as i64);
            w.field(out, field!("row"));
            w.long(out, m.row as i64);
            w.field(out, field!("thread"));
            w.opt_long(out, m.thread.map(|t| t as i64));
            // The statement is not captured.
            w.field(out, field!("query"));
            w.null(out);
        }
    }
    w.end_struct(out);
}

/// LSNs are u64; Debezium carries them in an int64 (they never reach 2^63 in practice).
fn lsn_i64(lsn: u64) -> Option<i64> {
    i64::try_from(lsn).ok()
}

/// The optional `transaction` block.
pub(crate) fn write_transaction<W: FormatWriter>(
    w: &W,
    out: &mut Vec<u8>,
    tx: Option<&TransactionInfo>,
) {
    let Some(t) = tx else {
        return w.null(out);
    };
    w.branch(out, 1);
    w.field(out, field!(first "id"));
    w.string(out, &t.id);
    w.field(out, field!("total_order"));
    w.long(out, t.total_order.min(i64::MAX as u64) as i64);
    w.field(out, field!("data_collection_order"));
    w.long(out, t.data_collection_order.min(i64::MAX as u64) as i64);
    w.end_struct(out);
}
