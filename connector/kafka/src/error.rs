//! What can go wrong writing to Kafka, and whether waiting can fix it.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

#[derive(Debug, thiserror::Error)]
pub enum KafkaLogError {
    /// A broker did not answer in time, a connection dropped, a leader moved, a
    /// transaction was aborted: nothing was committed, and a retry from the position in
    /// Kafka resends it.
    #[error("Kafka {what} failed: {source}; retrying (nothing past the position stored in Kafka is acknowledged to the source)")]
    Transient {
        what: &'static str,
        #[source]
        source: KafkaError,
    },
    /// Another producer with this connector's `transactional.id` took over.
    #[error("Kafka fenced this producer ({source}): another `cdc` process with transactional.id {transactional_id:?} is running; stop one of them (each connector needs its own `name`, or its own `[log] transactional_id`)")]
    Fenced {
        transactional_id: String,
        #[source]
        source: KafkaError,
    },
    /// Credentials or permissions refused.
    #[error("Kafka refused {what}: {source}; check the security settings in [log.kafka] (security.protocol, sasl.mechanism, sasl.username, sasl.password) and the principal's ACLs (Write and Describe on the topics, Write on the transactional id, Create on the cluster for new topics)")]
    Refused {
        what: &'static str,
        #[source]
        source: KafkaError,
    },
    /// The topic exists with another partition count than `[log] partitions`.
    #[error("Kafka topic {topic:?} has {actual} partitions but [log] partitions = {configured}: keys would land on other partitions than the records already in it, and per-key order would break; set [log] partitions = {actual}, or write to a new topic (a [[routing]] rule or another connector name)")]
    PartitionMismatch {
        topic: String,
        actual: u32,
        configured: u32,
    },
    /// The broker does not support what the settings ask (transactions, a topic config).
    #[error("Kafka {what}: {detail}")]
    Unsupported { what: &'static str, detail: String },
    /// A setting librdkafka rejects.
    #[error("[log.kafka] is not a valid librdkafka configuration: {0}")]
    Config(KafkaError),
    /// The position stored in `<name>.offsets` cannot be read.
    #[error("the source position in Kafka topic {topic:?} is not readable: {detail}; it was written by another program, or by a newer `cdc`")]
    BadOffset { topic: String, detail: String },
    /// Anything else librdkafka calls fatal.
    #[error("Kafka {what} failed for good: {source}")]
    Fatal {
        what: &'static str,
        #[source]
        source: KafkaError,
    },
}

impl KafkaLogError {
    /// Whether the same call can succeed later (with a fresh producer).
    pub fn is_transient(&self) -> bool {
        matches!(self, KafkaLogError::Transient { .. })
    }

    /// Classifies a librdkafka error of `what`.
    pub(crate) fn from_kafka(what: &'static str, e: KafkaError, transactional_id: &str) -> Self {
        let code = e.rdkafka_error_code();
        match code {
            Some(
                RDKafkaErrorCode::Fenced
                | RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch,
            ) => KafkaLogError::Fenced {
                transactional_id: transactional_id.to_string(),
                source: e,
            },
            Some(
                RDKafkaErrorCode::Authentication
                | RDKafkaErrorCode::SaslAuthenticationFailed
                | RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::ClusterAuthorizationFailed
                | RDKafkaErrorCode::TransactionalIdAuthorizationFailed
                | RDKafkaErrorCode::GroupAuthorizationFailed,
            ) => KafkaLogError::Refused { what, source: e },
            _ if is_fatal(&e) => KafkaLogError::Fatal { what, source: e },
            _ => KafkaLogError::Transient { what, source: e },
        }
    }
}

/// librdkafka's own verdict on a transactional error; other errors are not fatal.
fn is_fatal(e: &KafkaError) -> bool {
    match e {
        KafkaError::Transaction(t) => t.is_fatal(),
        _ => false,
    }
}
