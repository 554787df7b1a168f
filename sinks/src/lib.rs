//! Sinks: consumers of the log that keep a target up to date (a cache, a search index).
//! Each sink is a consumer group of the log; one file set per sink
//! (`sinks/src/<target>/`: config, deliver, and what else the target needs), written by
//! analogy with the first.
//!
//! # The contract
//!
//! - **Reading.** A sink's records come through a [`LogConsumer`]: the embedded log and
//!   Kafka both implement it (the connector provides them). Records come in offset order
//!   per partition; records of different partitions are in no order relative to each
//!   other, which is safe because all changes of one key are in one partition.
//! - **Decoding.** The driver ([`driver::run`]) decodes each record's Debezium envelope
//!   (JSON with or without schemas, or Avro in Confluent's wire format through the
//!   registry) into a [`Change`] ([`change`]), keeps the tables the sink is configured
//!   for, applies its column selection and renames ([`view`]), and hands the sink only
//!   changes. A record that cannot be decoded goes to the dead-letter topic.
//! - **Delivering.** [`Sink::deliver`] applies a batch and says how far it took effect
//!   *durably in the target* ([`Delivered`]): all of it or a prefix, and which of the
//!   delivered changes the target refused for good (those go to the dead-letter topic,
//!   with the error, and count as delivered). A sink may leave the end of a batch in
//!   flight (sent, its outcome not yet read): the driver then calls again soon, with
//!   those changes at the front, and only that call's `upto` makes them delivered.
//! - **Committing.** Only then does the group's offset move, over the delivered prefix,
//!   per partition. A crash replays from the committed offsets, so a sink sees some
//!   changes again: every sink applies a change conditionally on its [`Change::version`]
//!   (derived from the record's log position) where the target can, so a replay or a
//!   duplicate never overwrites a newer value; what a target without conditional writes
//!   guarantees is said in its module.
//! - **Errors.** [`SinkError::Transient`] is retried with backoff by the driver, without
//!   losing its place; [`SinkError::Definite`] stops the sink and tells the operator what
//!   to do. Neither moves the offset past an undelivered record.
//! - **Shutdown.** The driver stops polling, finishes (or abandons) the batch in hand,
//!   commits what was delivered, and returns.

pub mod avro;
pub mod change;
pub mod config;
pub mod driver;
pub mod elasticsearch;
pub mod factory;
pub mod metrics;
pub mod redis;
mod scan;
pub mod search;
pub mod typesense;
pub mod view;
pub mod view_read;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cdc_schemas::failure::Failure;

pub use change::{Change, Op};
pub use config::{CommonSinkConfig, SinkKind, SinkSpec};
pub use factory::{run, SinkContext};

/// One record read from the log, as handed to the driver. Cheap to clone (shared buffers).
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

/// How far a batch of changes got, durably in the target.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivered {
    /// The first `upto` changes of the batch took effect (or were refused, see
    /// `rejected`); the rest must be delivered again. `upto == 0` with no error means
    /// "nothing yet": the driver reads more records (a transactional sink waiting for the
    /// rest of a transaction) or backs off.
    pub upto: usize,
    /// Changes among the first `upto` that the target refused for good (a mapping error,
    /// a value it cannot store): index into the batch and the target's error. They go to
    /// the dead-letter topic and the sink goes on.
    pub rejected: Vec<(usize, String)>,
    /// Changes after the first `upto` that the sink has sent and whose outcome it has not
    /// read yet (a pipelining sink: the target applies them while the driver prepares the
    /// next batch). They are not durable: the driver passes them again, at the front of
    /// the next call, and that call reports them in its `upto` (or fails, and they are
    /// delivered again from scratch).
    pub in_flight: usize,
}

impl Delivered {
    /// Every one of `n` changes took effect.
    pub fn all(n: usize) -> Self {
        Delivered {
            upto: n,
            ..Delivered::default()
        }
    }
}

/// A failure of a sink or of its reading of the log: [`Failure`]'s transient / definite
/// split, with the underlying error kept as its `source()`.
pub type SinkError = Failure;

/// A target kept up to date from the log.
pub trait Sink: Send {
    /// Applies a batch of changes (in log order within each partition) and returns how far
    /// it is durable in the target.
    fn deliver(
        &mut self,
        changes: &[Change],
    ) -> impl Future<Output = Result<Delivered, SinkError>> + Send;

    /// Called when the driver can hold no more records and the sink delivered nothing of
    /// what it holds (a transaction bigger than the driver's bound): the next `deliver`
    /// must take at least one change (a transactional sink applies what it has of the
    /// transaction, not atomically, and says so).
    fn must_progress(&mut self) {}
}

/// A partition of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: Arc<str>,
    pub partition: u32,
}

/// The log as a consumer group reads it: the embedded log and Kafka both implement this.
pub trait LogConsumer: Send {
    /// Records after the group's read position, waiting up to `wait` when there are none;
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

    /// Records between the group's committed offsets and the high watermarks, summed over
    /// its partitions: the sink's lag in records.
    fn lag(&self) -> u64;
}

/// Where records that the target refused for good, or that could not be decoded, go: a
/// topic of the log (`<connector>.<sink>.dlq` by default), each record as it was read
/// with Kafka Connect's `__connect.errors.*` headers saying where it came from and why.
pub trait DeadLetters: Send {
    /// Appends `records` (each with its error) and returns once they are durable: only
    /// then may the group's offset move past them.
    fn send(
        &mut self,
        records: &[(SinkRecord, String)],
    ) -> impl Future<Output = Result<(), SinkError>> + Send;
}

/// The headers a dead-letter record carries besides the original record's own (Kafka
/// Connect's names, so tools that read Connect's dead-letter queues read ours).
pub mod dlq_headers {
    pub const TOPIC: &str = "__connect.errors.topic";
    pub const PARTITION: &str = "__connect.errors.partition";
    pub const OFFSET: &str = "__connect.errors.offset";
    pub const MESSAGE: &str = "__connect.errors.exception.message";
    pub const SINK: &str = "__connect.errors.connector.name";
}
