//! Sinks: consumers of the log that keep a target up to date (Kafka, search indexes,
//! caches). Each sink has a consumer-group position per partition of the log.
//!
//! The contract (see DESIGN.md): a sink reports per batch whether it was delivered; its
//! cursor moves only over delivered records, in order. Where the target can store the
//! position in the same write as the effect it does so; otherwise effects are idempotent
//! (document id = key, version = source position) so a replay changes nothing.

use std::future::Future;

/// One record read from the log, as handed to a sink.
#[derive(Debug, Clone)]
pub struct SinkRecord {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    pub timestamp_ms: i64,
    pub key: Option<Vec<u8>>,
    /// `None` is a tombstone.
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
}

/// How far a batch got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Every record of the batch took effect.
    All,
    /// The first `n` records took effect; the rest must be retried.
    Prefix(usize),
}

/// A failure of a sink, classified for the supervisor.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("{what} (will retry): {detail}")]
    Transient { what: String, detail: String },
    #[error("{what}: {detail}. Fix: {fix}")]
    Definite {
        what: String,
        detail: String,
        fix: String,
    },
}

/// A target kept up to date from the log.
pub trait Sink: Send {
    /// Applies a batch of records (in log order for each partition).
    fn deliver(
        &mut self,
        records: &[SinkRecord],
    ) -> impl Future<Output = Result<Delivery, SinkError>> + Send;
}
