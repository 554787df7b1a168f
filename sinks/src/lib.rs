//! Sinks: consumers of the log that keep a target up to date (a cache, a search index,
//! any Kafka consumer's view). Each sink is a consumer group of the log; one file set per
//! sink (`sinks/src/<target>/`: config, check, deliver, metrics), written by analogy with
//! the first.
//!
//! # The contract
//!
//! - **Reading.** A sink reads the log through a [`LogConsumer`]: the embedded log and
//!   Kafka both implement it (the connector provides them). Records come in offset order
//!   per partition; records of different partitions are in no order relative to each
//!   other, which is safe because all changes of one key are in one partition.
//! - **Delivering.** [`Sink::deliver`] applies a batch and says how far it took effect
//!   *durably in the target* ([`Delivery`]): all of it, or a prefix. "Durable" is the
//!   target's own word: acknowledged by Redis' `EXEC` (with its persistence), by a search
//!   engine's bulk response, and so on.
//! - **Committing.** Only then does the group's offset move, over the delivered prefix,
//!   per partition ([`driver::run`]). A crash replays from the committed offsets, so a
//!   sink sees some records again: where the target can store the offset in the same write
//!   as the effect it does; otherwise effects are idempotent (document id = record key,
//!   version = source position) so a replay changes nothing.
//! - **Errors.** [`SinkError::Transient`] is retried with backoff by the driver, without
//!   losing its place; [`SinkError::Definite`] stops the sink and tells the operator what
//!   to do. Neither moves the offset past an undelivered record.
//! - **Shutdown.** The driver stops polling, finishes (or abandons) the batch in hand,
//!   commits what was delivered, and returns.

pub mod driver;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cdc_schemas::failure::Failure;

/// One record read from the log, as handed to a sink. Cheap to clone (shared buffers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkRecord {
    pub topic: Arc<str>,
    pub partition: u32,
    pub offset: u64,
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    /// `None` is a tombstone.
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// How far a batch got, durably in the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Every record of the batch took effect.
    All,
    /// The first `n` records took effect; the rest must be delivered again.
    Prefix(usize),
}

/// A failure of a sink or of its reading of the log: [`Failure`]'s transient / definite
/// split, with the underlying error kept as its `source()`.
pub type SinkError = Failure;

/// A target kept up to date from the log.
pub trait Sink: Send {
    /// Applies a batch (in log order for each partition) and returns how far it is durable
    /// in the target. `Delivery::Prefix(0)` with no error means "nothing yet, try again"
    /// (the driver backs off).
    fn deliver(
        &mut self,
        records: &[SinkRecord],
    ) -> impl Future<Output = Result<Delivery, SinkError>> + Send;
}

/// A partition of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: Arc<str>,
    pub partition: u32,
}

/// The log as a consumer group reads it: the embedded log and Kafka both implement this.
pub trait LogConsumer: Send {
    /// Records after the group's position, waiting up to `wait` when there are none;
    /// about `max_bytes` at most (at least one record when any is available). Advances
    /// the read position, not the committed one.
    fn poll(
        &mut self,
        max_bytes: usize,
        wait: Duration,
    ) -> impl Future<Output = Result<Vec<SinkRecord>, SinkError>> + Send;

    /// Makes `offsets` (per partition, the next offset to read) the group's committed
    /// position, durably: a restarted consumer starts there.
    fn commit(
        &mut self,
        offsets: &[(TopicPartition, u64)],
    ) -> impl Future<Output = Result<(), SinkError>> + Send;
}
