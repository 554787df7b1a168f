//! The settings a [`crate::KafkaLog`] is built from (mapped from `[log]` by the
//! connector), and the librdkafka configuration they make.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::config::ClientConfig;

/// How to reach the cluster and how to write to it.
#[derive(Clone, Debug)]
pub struct KafkaSettings {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// Exactly once: each durable group is one Kafka transaction with its position. Off:
    /// the idempotent producer, at least once.
    pub transactions: bool,
    /// `transactional.id`: one per connector; a second process with the same id fences
    /// the first.
    pub transactional_id: String,
    /// Replication factor of the topics this connector creates.
    pub replication_factor: i32,
    /// librdkafka properties (security, SASL, TLS, batching, compression), applied last:
    /// they override the defaults set here, except the ones exactly-once depends on
    /// ([`KafkaSettings::PINNED`]).
    pub properties: BTreeMap<String, String>,
    /// Bound on one admin request, a metadata fetch, a transaction's commit.
    pub timeout: Duration,
}

impl KafkaSettings {
    /// Properties the guarantees depend on: the producer must be idempotent, wait for
    /// every in-sync replica and never be told otherwise by `[log.kafka]`.
    pub const PINNED: &'static [&'static str] = &[
        "enable.idempotence",
        "acks",
        "transactional.id",
        "bootstrap.servers",
        "isolation.level",
        "enable.auto.commit",
    ];

    /// The properties every client of this cluster gets (address, security, user's).
    pub(crate) fn base(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers);
        // librdkafka logs through its own logger; errors reach us as results.
        c.set("log_level", "3");
        for (k, v) in &self.properties {
            if !Self::PINNED.contains(&k.as_str()) && !is_producer_only(k) {
                c.set(k, v);
            }
        }
        c
    }

    /// The producer's configuration.
    pub(crate) fn producer(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers);
        c.set("log_level", "3");
        // What Kafka's Java client picks for a keyed record, for records whose partition
        // the pipeline did not set (it sets them all).
        c.set("partitioner", "murmur2_random");
        c.set("compression.type", "lz4");
        c.set("linger.ms", "5");
        if !self.transactions {
            // With transactions librdkafka bounds it by `transaction.timeout.ms`.
            c.set("message.timeout.ms", "300000");
        }
        c.set("allow.auto.create.topics", "false");
        for (k, v) in &self.properties {
            if !Self::PINNED.contains(&k.as_str()) {
                c.set(k, v);
            }
        }
        c.set("enable.idempotence", "true");
        c.set("acks", "all");
        if self.transactions {
            c.set("transactional.id", &self.transactional_id);
            c.set(
                "transaction.timeout.ms",
                self.properties
                    .get("transaction.timeout.ms")
                    .map(String::as_str)
                    .unwrap_or("60000"),
            );
        }
        c
    }

    /// An admin client's configuration (topic creation, metadata).
    pub(crate) fn admin(&self) -> ClientConfig {
        let mut c = self.base();
        c.set("allow.auto.create.topics", "false");
        c
    }

    /// A consumer reading committed records only (the position read back on start).
    pub(crate) fn reader(&self, group: &str) -> ClientConfig {
        let mut c = self.base();
        c.set("group.id", group);
        c.set("enable.auto.commit", "false");
        c.set("enable.partition.eof", "true");
        c.set("isolation.level", "read_committed");
        c.set("allow.auto.create.topics", "false");
        c
    }
}

/// Producer properties a consumer or admin client would warn about.
fn is_producer_only(key: &str) -> bool {
    matches!(
        key,
        "linger.ms"
            | "queue.buffering.max.ms"
            | "queue.buffering.max.messages"
            | "queue.buffering.max.kbytes"
            | "batch.num.messages"
            | "batch.size"
            | "compression.type"
            | "compression.codec"
            | "compression.level"
            | "message.timeout.ms"
            | "delivery.timeout.ms"
            | "request.required.acks"
            | "retries"
            | "message.send.max.retries"
            | "retry.backoff.ms"
            | "partitioner"
            | "transaction.timeout.ms"
            | "enable.gapless.guarantee"
            | "sticky.partitioning.linger.ms"
    )
}

/// A topic as this connector creates it.
#[derive(Clone, Debug)]
pub struct TopicSpec {
    pub partitions: u32,
    /// Kafka topic configs (`cleanup.policy`, `retention.ms`, …), set at creation only: an
    /// existing topic keeps its own.
    pub configs: Vec<(String, String)>,
}
