//! Where the pipeline's records go: the embedded log ([`Out::Log`]) or Kafka
//! ([`Out::Kafka`], `[log] type = "kafka"`), behind the few operations the pipeline needs
//! (a topic, an append, a durable step with the source position, the position back).
//!
//! Both place a keyed record on Kafka's murmur2 partition (computed here, the same
//! function for both), keyless records round robin per topic handle, and both make the
//! records and the position covering them durable in one step: the embedded log's flush
//! with its ledger, Kafka's transaction with `<name>.offsets` ([`cdc_kafka::KafkaLog`]).
//! For Kafka the encode workers do not seal batches: librdkafka builds (and compresses)
//! its own, so a piece carries its encoded records and their partitions
//! ([`super::encode::Unsealed`]).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use cdc_kafka::{KafkaLog, TopicSpec};
use cdc_log::{CleanupPolicy, Log, Topic, TopicConfig};

/// The log the pipeline writes.
#[derive(Clone)]
pub enum Out {
    Log(Log),
    Kafka(Arc<KafkaLog>),
}

impl From<Log> for Out {
    fn from(log: Log) -> Self {
        Out::Log(log)
    }
}

impl Out {
    /// The embedded log. Only its errors make the pipeline wait for disk, so only its
    /// paths ask.
    pub fn log(&self) -> &Log {
        match self {
            Out::Log(l) => l,
            Out::Kafka(_) => unreachable!("only the embedded log waits for disk"),
        }
    }

    /// Makes every record appended so far durable with `checkpoint`, in one step.
    /// Blocking.
    pub fn flush(&self, checkpoint: &[u8]) -> Result<(), super::PipelineError> {
        match self {
            Out::Log(l) => l.flush(Some(checkpoint)).map(|_| ()).map_err(Into::into),
            Out::Kafka(k) => k.commit(checkpoint).map_err(Into::into),
        }
    }

    /// What the disk budget has left (the embedded log's; Kafka has none here).
    pub fn budget_room(&self) -> Option<u64> {
        match self {
            Out::Log(l) => l.budget_room(),
            Out::Kafka(_) => None,
        }
    }
}

/// A topic of either log.
#[derive(Clone)]
pub enum OutTopic {
    Log(Topic),
    Kafka(Arc<KafkaTopic>),
}

/// A Kafka topic as the pipeline writes it: its partition count, checked (or set) when
/// it was first used by this producer.
pub struct KafkaTopic {
    pub name: String,
    pub partitions: u32,
    /// Round robin of keyless records.
    next: AtomicU32,
}

impl KafkaTopic {
    pub fn new(name: &str, partitions: u32) -> Self {
        KafkaTopic {
            name: name.to_string(),
            partitions,
            next: AtomicU32::new(0),
        }
    }
}

impl OutTopic {
    pub fn name(&self) -> &str {
        match self {
            OutTopic::Log(t) => t.name(),
            OutTopic::Kafka(t) => &t.name,
        }
    }

    pub fn partitions(&self) -> u32 {
        match self {
            OutTopic::Log(t) => t.partitions(),
            OutTopic::Kafka(t) => t.partitions,
        }
    }

    /// The partition of a record with `key`: Kafka's partitioner for a key, round robin
    /// without one.
    pub fn partition_for(&self, key: Option<&[u8]>) -> u32 {
        match self {
            OutTopic::Log(t) => t.partition_for(key),
            OutTopic::Kafka(t) => match key {
                Some(k) => cdc_log::partition_for_key(k, t.partitions),
                None => t.next.fetch_add(1, Ordering::Relaxed) % t.partitions.max(1),
            },
        }
    }
}

/// The Kafka topic configs of a topic the embedded log would create with `c`: the same
/// names and meanings (the embedded log's settings are Kafka's). Set at creation only.
pub fn kafka_topic_spec(c: &TopicConfig) -> TopicSpec {
    let policy = if c.cleanup_policy == CleanupPolicy::COMPACT {
        "compact"
    } else if c.cleanup_policy == CleanupPolicy::COMPACT_DELETE {
        "compact,delete"
    } else {
        "delete"
    };
    let mut configs = vec![
        ("cleanup.policy".to_string(), policy.to_string()),
        (
            "retention.ms".to_string(),
            c.retention_ms.map_or(-1, |v| v).to_string(),
        ),
        (
            "retention.bytes".to_string(),
            c.retention_bytes.map_or(-1, |v| v as i64).to_string(),
        ),
        ("segment.bytes".to_string(), c.segment_bytes.to_string()),
    ];
    if let Some(ms) = c.segment_ms {
        configs.push(("segment.ms".to_string(), ms.to_string()));
    }
    if policy != "delete" {
        configs.push((
            "delete.retention.ms".to_string(),
            c.delete_retention_ms.to_string(),
        ));
    }
    TopicSpec {
        partitions: c.partitions,
        configs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_specs_carry_the_logs_settings_under_kafkas_names() {
        let c = TopicConfig {
            partitions: 3,
            cleanup_policy: CleanupPolicy::COMPACT,
            retention_ms: None,
            ..TopicConfig::default()
        };
        let s = kafka_topic_spec(&c);
        assert_eq!(s.partitions, 3);
        let get = |k: &str| {
            s.configs
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("cleanup.policy"), Some("compact"));
        assert_eq!(get("retention.ms"), Some("-1"));
        assert_eq!(
            get("delete.retention.ms"),
            Some(&*c.delete_retention_ms.to_string())
        );
        let d = kafka_topic_spec(&TopicConfig::default());
        assert!(d.configs.iter().all(|(k, _)| k != "delete.retention.ms"));
    }

    #[test]
    fn kafka_topics_place_keys_as_the_embedded_log_does() {
        let t = OutTopic::Kafka(Arc::new(KafkaTopic::new("t", 6)));
        for k in [&b"a"[..], b"{\"id\":1}", b"", b"0123456789"] {
            assert_eq!(t.partition_for(Some(k)), cdc_log::partition_for_key(k, 6));
        }
        let seen: Vec<u32> = (0..7).map(|_| t.partition_for(None)).collect();
        assert_eq!(seen, vec![0, 1, 2, 3, 4, 5, 0]);
    }
}
