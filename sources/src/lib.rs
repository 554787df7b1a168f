//! Change sources: the [`Source`] contract, the one factory that builds a source from the
//! configuration ([`build`], [`check`]), and the sources themselves, one folder each with
//! the same file set (`config`, `check`, `setup`, `snapshot`, `stream`, `decode`,
//! `metrics`; extras such as the wire protocol beside them): [`postgres`] (pgoutput) and
//! [`mysql`] (row binlog, MySQL and MariaDB).
//!
//! # The contract between a source and the pipeline
//!
//! - **Ordering.** A source emits [`ChangeBatch`]es over a bounded channel in commit order:
//!   every change of a transaction before any change of a transaction that committed after
//!   it, and the changes of one transaction in the order the database applied them. Two
//!   changes of one row therefore reach the log in commit order.
//! - **Batching.** One batch per transaction; a transaction larger than
//!   `source.max_batch_events` goes in several chunks, and only its last chunk carries a
//!   commit [`Checkpoint`]. A batch with `commit: None` is never the end of a transaction.
//!   A batch may hold no events and only a checkpoint (a transaction whose changes were
//!   all filtered out, a heartbeat, the end of a snapshot): the source must emit those
//!   too, or the database's position only moves with the next captured change.
//! - **Positions.** A checkpoint is where the source resumes once everything before it is
//!   durable. The pipeline makes each transaction's records and its checkpoint durable in
//!   one step, and only then moves the [`Durable`] handle forward. A source acknowledges to
//!   its database (Postgres confirmed flush LSN, MySQL stored position) only what that
//!   handle says, never a position it merely emitted.
//! - **Resume.** `resume_from` is the last durable checkpoint. Changes at or before it
//!   that the database sends again are skipped by the source, so each committed change is
//!   in the log once.
//! - **Snapshot hand-off.** A source that starts a snapshot first emits a batch marked
//!   [`SnapshotMark::Begin`] naming every table the snapshot reads; over a log that already
//!   has a checkpoint that batch carries [`Checkpoint::SnapshotIncomplete`] (so a crash
//!   during the snapshot is recognised on restart). Then the snapshot's rows (`op = r`)
//!   without checkpoints, then a batch marked [`SnapshotMark::End`] carrying the position
//!   streaming starts from: every change committed after the snapshot's consistent point,
//!   and none before it, follows in the stream.
//! - **Re-snapshot.** The marks are what lets the pipeline make the log's state equal the
//!   tables after a snapshot taken over an existing log (a lost slot, a purged binlog):
//!   every key live in the log before `Begin`, of a topic the snapshot's tables go to, and
//!   not read by the snapshot gets a delete record and a tombstone before `End`'s position
//!   is durable. A source only marks; it never looks at the log.
//! - **Shutdown.** When `shutdown` turns true the source stops reading, waits (bounded) for
//!   the pipeline to drain what it sent, acknowledges the last durable position, and
//!   returns `Ok(())`. A closed batch channel means the pipeline stopped: return.
//! - **Errors.** [`SourceError::Transient`] ends the attempt; the supervisor discards what
//!   is not durable and starts the source again from the checkpoint, with backoff.
//!   [`SourceError::Definite`] stops the connector and tells the operator what to do.
//!   Valid data in the database is never a definite error.

pub mod budget;
pub mod check;
pub mod config;
pub mod dburl;
pub mod durable;
pub use cdc_schemas::filter;
pub mod history;
pub mod keys;
pub mod mysql;
pub mod postgres;
pub mod progress;
pub mod secret;
pub mod status;
pub mod tls;
pub mod verify;

pub use budget::DiskBudget;
pub use check::CheckReport;
pub use config::{SourceConfig, SourceKind, SourceSpec};
pub use durable::{Durable, DurablePublisher};
pub use progress::SnapshotProgress;
pub use secret::Secret;

use std::future::Future;
use std::sync::Arc;

use cdc_schemas::encode::ConnectorKind;
use cdc_schemas::failure::Failure;
use cdc_schemas::metrics::Metrics;
use cdc_schemas::{ChangeEvent, Checkpoint, TableId};
use tokio::sync::{mpsc, watch};

/// The changes of one transaction, or one chunk of a large transaction.
#[derive(Debug, Default)]
pub struct ChangeBatch {
    pub events: Vec<ChangeEvent>,
    /// Set on the last chunk of a transaction (and on snapshot checkpoints): once every
    /// record of this batch and of the batches before it is durable, this checkpoint is
    /// stored with them and its position may be acknowledged to the source database.
    pub commit: Option<Checkpoint>,
    /// The sum of the events' [`ChangeEvent::approx_size`], when the source computed it as
    /// it made them (their memory is in cache then); 0 = not computed, the queue does.
    pub approx_bytes: u64,
    /// Set on the batch before a snapshot's first row and on the batch after its last (see
    /// the crate docs, "Snapshot hand-off").
    pub snapshot: Option<SnapshotMark>,
}

/// Where a snapshot starts and ends in the stream of batches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotMark {
    /// A snapshot of these tables starts after this batch: the rows it reads follow, then
    /// [`SnapshotMark::End`].
    Begin { tables: Vec<TableId> },
    /// The snapshot read every row of its tables; this batch (no events) carries the
    /// position streaming starts from.
    End,
}

/// What a running source is given by the pipeline.
pub struct SourceContext {
    /// Bounded: a full channel is backpressure, and the source must keep answering the
    /// server's keepalives while it waits.
    pub batches: mpsc::Sender<ChangeBatch>,
    /// How far the log is durable; the only thing a source may acknowledge.
    pub durable: Durable,
    /// Where to resume: the checkpoint stored with the last durable records, if any.
    pub resume_from: Option<Checkpoint>,
    /// The furthest checkpoint an earlier attempt of this process made durable (and so
    /// may have confirmed to the server), if any. `resume_from` behind it means the log
    /// lost commits it had acknowledged: a source whose server keeps our position (a
    /// Postgres slot) must not simply resume, as the server will not send those changes
    /// again.
    pub acknowledged: Option<Checkpoint>,
    /// Becomes `true` when the connector shuts down.
    pub shutdown: watch::Receiver<bool>,
    /// Where the source registers its own figures (exported on the admin `/metrics`).
    pub metrics: Metrics,
    /// Where a snapshot counts its progress (rendered by the pipeline).
    pub progress: Arc<SnapshotProgress>,
    /// The disk budget shared with the log: what the source keeps on disk itself (spill
    /// files) is counted here, and it waits for room before writing more.
    pub disk_budget: DiskBudget,
    /// The durable schema history (see [`history`]), when the destination keeps one (the
    /// embedded log does, for sources that need it); `None` otherwise.
    pub history: Option<Arc<dyn history::SchemaHistoryStore>>,
}

impl SourceContext {
    /// The end of a source run: drops the batch sender (the pipeline sees the end) and
    /// waits, bounded, while the durable position still moves, so that what was sent has
    /// a chance to become durable. 30 s after a clean end; after an error only 2 s: a
    /// pipeline waiting for disk drains nothing until it learns that the source ended
    /// (the supervisor tells it once the source returns), and what is not durable now is
    /// read again by the next attempt from the log's checkpoint. Returns the handle, for
    /// the final position.
    pub async fn drain(self, failed: bool) -> Durable {
        let SourceContext {
            batches,
            mut durable,
            ..
        } = self;
        drop(batches);
        let drain = std::time::Duration::from_secs(if failed { 2 } else { 30 });
        let deadline = tokio::time::Instant::now() + drain;
        while tokio::time::timeout_at(deadline, durable.changed())
            .await
            .map(|r| r.is_ok())
            .unwrap_or(false)
        {}
        durable
    }
}

/// A failure of a source, classified for the supervisor: [`Failure`]'s transient /
/// definite split, with the underlying error kept as its `source()`.
pub type SourceError = Failure;

/// A change source.
pub trait Source: Send {
    /// Runs until shutdown or a definite error. Transient errors may be handled inside
    /// (reconnect with backoff) or returned for the supervisor to restart the source.
    fn run(self, ctx: SourceContext) -> impl Future<Output = Result<(), SourceError>> + Send;
}

/// Any source the factory can build. Adding a source is one variant here and one arm in
/// [`build`] and [`check`].
pub enum AnySource {
    Postgres(postgres::PostgresSource),
    Mysql(mysql::MySqlSource),
}

impl AnySource {
    /// The connector kind records name in `source.connector`.
    pub fn connector_kind(&self) -> ConnectorKind {
        match self {
            AnySource::Postgres(_) => ConnectorKind::Postgres,
            AnySource::Mysql(s) if s.is_mariadb_url() => ConnectorKind::MariaDb,
            AnySource::Mysql(_) => ConnectorKind::MySql,
        }
    }

    /// The database records name in `source.db`.
    pub fn database(&self) -> &str {
        match self {
            AnySource::Postgres(s) => s.database(),
            AnySource::Mysql(s) => s.database(),
        }
    }
}

impl Source for AnySource {
    async fn run(self, ctx: SourceContext) -> Result<(), SourceError> {
        match self {
            AnySource::Postgres(s) => s.run(ctx).await,
            AnySource::Mysql(s) => s.run(ctx).await,
        }
    }
}

/// Builds the configured source. Nothing connects yet.
pub fn build(spec: &SourceSpec) -> Result<AnySource, SourceError> {
    match &spec.source.db {
        config::DbSettings::Postgres(pg) => Ok(AnySource::Postgres(postgres::PostgresSource::new(
            postgres::PgSourceConfig::from_spec(spec, pg)?,
        ))),
        config::DbSettings::Mysql(my) => Ok(AnySource::Mysql(mysql::MySqlSource::new(
            mysql::MySqlSourceConfig::from_spec(spec, my)?,
        ))),
    }
}

/// Runs every preflight check of the configured source (read-only).
pub async fn check(spec: &SourceSpec) -> CheckReport {
    match &spec.source.db {
        config::DbSettings::Postgres(pg) => postgres::check::check(spec, pg).await,
        config::DbSettings::Mysql(my) => mysql::check::check(spec, my).await,
    }
}
