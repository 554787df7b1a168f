//! Kafka as the log: what `cdc run` needs to write its records to a Kafka cluster with the
//! embedded log's guarantees.
//!
//! - [`KafkaLog`]: one producer (librdkafka, idempotent, transactional unless turned off)
//!   that writes records to the partitions the pipeline chose (Kafka's murmur2
//!   partitioner, computed by the pipeline as for the embedded log) and, at each durable
//!   group, the source position to the compacted `<name>.offsets` topic in the same
//!   transaction ([`KafkaLog::commit`]). The position is given back to the database only
//!   after that commit returns, and read back from `<name>.offsets` on start
//!   ([`KafkaLog::checkpoint`]), so the position in Kafka never covers a record Kafka does
//!   not hold.
//! - Topics ([`KafkaLog::ensure_topic`]): created with the configured partitions,
//!   replication factor and topic configs; an existing topic with another partition count
//!   is a definite error (keys would move to other partitions).
//!
//! - Sinks reading Kafka ([`KafkaGroup`]): a member of a consumer group, committed
//!   records only, offsets committed by the caller for what its target holds.
//! - The MySQL schema history ([`KafkaHistory`]): `<name>.schema-history`, a topic that
//!   never deletes a record, written by its own non-transactional producer.
//!
//! Errors ([`KafkaLogError`]) say whether a retry can succeed: an unreachable broker or
//! an aborted transaction is transient (the pipeline restarts from the position in Kafka,
//! the source resends what was not committed); a fenced producer, a refused
//! authentication or a topic with the wrong partition count is definite.

mod append;
mod error;
mod group;
mod history;
mod log;
mod offsets;
mod read;
mod settings;
mod topics;

pub use append::{AppendRecord, KafkaAppender};
pub use error::KafkaLogError;
pub use group::{GroupOffsets, GroupPartition, GroupStart, KafkaGroup, ResetTo};
pub use history::{history_topic, KafkaHistory};
pub use log::{offsets_topic, KafkaLog, OutRecord};
pub use offsets::committed_checkpoint;
pub use read::{KafkaReader, ReadFrom, ReadRecord, Watermarks};
pub use settings::{KafkaSettings, TopicSpec};
