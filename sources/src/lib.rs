//! Change sources: the [`Source`] trait and, in later modules, the Postgres (pgoutput) and
//! MySQL/MariaDB (row binlog) implementations.
//!
//! The contract between a source and the pipeline (see DESIGN.md, "The data path"):
//! - a source emits [`ChangeBatch`]es in commit order over a bounded channel; one batch per
//!   transaction, large transactions in several chunks of which only the last carries the
//!   commit position;
//! - the pipeline publishes the newest *durable* position on a watch channel; the source
//!   acknowledges to the database (Postgres confirmed flush LSN, stored MySQL position) only
//!   positions it has read there, never one it merely emitted;
//! - on shutdown the source stops reading, lets the pipeline drain, sends the last durable
//!   position to the database, and returns.

pub mod dburl;
pub mod filter;
pub mod mysql;
pub mod postgres;
pub mod secret;
pub mod tls;

pub use secret::Secret;

use std::future::Future;

use cdc_schemas::{ChangeEvent, SourcePosition};
use tokio::sync::{mpsc, watch};

/// The changes of one transaction, or one chunk of a large transaction.
#[derive(Debug, Default)]
pub struct ChangeBatch {
    pub events: Vec<ChangeEvent>,
    /// Set on the last chunk of a transaction (and on snapshot checkpoints): once every
    /// record of this batch and of the batches before it is durable, this position may be
    /// acknowledged to the source database.
    pub commit: Option<SourcePosition>,
    /// The sum of the events' [`ChangeEvent::approx_size`], when the source computed it as
    /// it made them (their memory is in cache then); 0 = not computed, the queue does.
    pub approx_bytes: u64,
}

/// What a running source is given by the pipeline.
pub struct SourceContext {
    /// Bounded: a full channel is backpressure, and the source must keep answering the
    /// server's keepalives while it waits.
    pub batches: mpsc::Sender<ChangeBatch>,
    /// The newest position whose records are durable in the log.
    pub durable: watch::Receiver<Option<SourcePosition>>,
    /// Where to resume: the checkpoint stored with the last durable records, if any.
    pub resume_from: Option<SourcePosition>,
    /// Becomes `true` when the connector shuts down.
    pub shutdown: watch::Receiver<bool>,
}

/// A failure of a source, classified for the supervisor.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// May succeed on retry (connection reset, server restarting, failover).
    #[error("{what} (will retry): {detail}")]
    Transient { what: String, detail: String },
    /// Will not go away by retrying; the operator must act as `fix` says.
    #[error("{what}: {detail}. Fix: {fix}")]
    Definite {
        what: String,
        detail: String,
        fix: String,
    },
}

impl SourceError {
    pub fn is_transient(&self) -> bool {
        matches!(self, SourceError::Transient { .. })
    }
}

/// A change source.
pub trait Source: Send {
    /// Runs until shutdown or a definite error. Transient errors may be handled inside
    /// (reconnect with backoff) or returned for the supervisor to restart the source.
    fn run(self, ctx: SourceContext) -> impl Future<Output = Result<(), SourceError>> + Send;
}
