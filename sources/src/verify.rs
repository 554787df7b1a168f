//! The source side of `cdc verify`: one table of the configured source read in key order,
//! chunk by chunk, each pass in one consistent read of the database, with the values the
//! snapshot would put in its records (each source's reader reuses its snapshot's row
//! reading and decoding: `postgres/verify.rs`, `mysql/verify.rs`).
//!
//! Invariants: a pass ([`TableReader::begin`] … chunks until an empty one) sees each row of
//! the table once, as of one point of the database, and returns its [`ReadMark`]: every
//! commit the pass sees is at or before it, so a view whose durable position reached the
//! mark has had every change the pass saw. Memory is one chunk.

use std::sync::Arc;

use cdc_schemas::{Checkpoint, Lsn, Row, SourcePosition, TableId, TableSchema};

use crate::config::{DbSettings, SourceSpec};
use crate::SourceError;

/// Where the database was when a pass's consistent read started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadMark {
    /// `pg_current_wal_lsn()`.
    Postgres(Lsn),
    /// The binlog file and offset.
    Mysql { file: String, pos: u64 },
}

impl ReadMark {
    /// Whether a connector whose durable checkpoint is `cp` has every change committed
    /// before this mark.
    pub fn reached_by(&self, cp: &Checkpoint) -> bool {
        match (self, cp.position()) {
            (ReadMark::Postgres(l), Some(SourcePosition::Postgres(p))) => {
                p.commit_lsn.max(p.lsn) >= *l
            }
            (ReadMark::Mysql { file, pos }, Some(SourcePosition::Mysql(p))) => {
                // Binlog files of one server share their base name and number upward
                // with a fixed width, so their names order as the files do.
                (p.file.len(), p.file.as_str(), p.pos) >= (file.len(), file.as_str(), *pos)
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for ReadMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadMark::Postgres(l) => write!(f, "LSN {l}"),
            ReadMark::Mysql { file, pos } => write!(f, "{file}:{pos}"),
        }
    }
}

enum Inner {
    Postgres(crate::postgres::verify::PgVerify),
    Mysql(crate::mysql::verify::MyVerify),
}

/// One table of the configured source, read for verification.
pub struct TableReader {
    inner: Inner,
}

impl TableReader {
    /// Connects and describes `table`. A table without a key (its records are keyless)
    /// or one that does not exist is a definite error.
    pub async fn open(spec: &SourceSpec, table: &TableId) -> Result<TableReader, SourceError> {
        let inner = match &spec.source.db {
            DbSettings::Postgres(pg) => {
                let cfg = crate::postgres::PgSourceConfig::from_spec(spec, pg)?;
                Inner::Postgres(
                    crate::postgres::verify::PgVerify::open(&cfg.endpoint, table).await?,
                )
            }
            DbSettings::Mysql(my) => {
                let cfg = crate::mysql::MySqlSourceConfig::from_spec(spec, my)?;
                Inner::Mysql(crate::mysql::verify::MyVerify::open(&cfg, table).await?)
            }
        };
        Ok(TableReader { inner })
    }

    /// The table's schema as the snapshot describes it (before `message_key_columns`).
    pub fn schema(&self) -> Arc<TableSchema> {
        match &self.inner {
            Inner::Postgres(r) => r.schema(),
            Inner::Mysql(r) => r.schema(),
        }
    }

    /// Whether [`TableReader::lookup`] works for this table's key types.
    pub fn can_lookup(&self) -> bool {
        match &self.inner {
            Inner::Postgres(r) => r.can_lookup(),
            Inner::Mysql(r) => r.can_lookup(),
        }
    }

    /// Starts a pass: a new consistent read from the first key.
    pub async fn begin(&mut self) -> Result<ReadMark, SourceError> {
        match &mut self.inner {
            Inner::Postgres(r) => r.begin().await.map(ReadMark::Postgres),
            Inner::Mysql(r) => r
                .begin()
                .await
                .map(|(file, pos)| ReadMark::Mysql { file, pos }),
        }
    }

    /// The next at most `max_rows` rows in key order; empty at the end of the pass.
    pub async fn next_chunk(&mut self, max_rows: usize) -> Result<Vec<Row>, SourceError> {
        match &mut self.inner {
            Inner::Postgres(r) => r.next_chunk(max_rows).await,
            Inner::Mysql(r) => r.next_chunk(max_rows).await,
        }
    }

    /// The rows of the current pass whose record key is one of `keys` (the key's JSON
    /// values in key order). Only when [`TableReader::can_lookup`].
    pub async fn lookup(
        &mut self,
        keys: &[Vec<serde_json::Value>],
    ) -> Result<Vec<Row>, SourceError> {
        match &mut self.inner {
            Inner::Postgres(r) => r.lookup(keys).await,
            Inner::Mysql(r) => r.lookup(keys).await,
        }
    }

    /// Ends the current pass's read.
    pub async fn end(&mut self) -> Result<(), SourceError> {
        match &mut self.inner {
            Inner::Postgres(r) => r.end().await,
            Inner::Mysql(r) => r.end().await,
        }
    }
}
