//! [`KafkaHistory`]: a topic that keeps every record it is given, for the MySQL schema
//! history when the log is Kafka (`<name>.schema-history`, one partition,
//! `cleanup.policy=delete` with `retention.ms=-1` and `retention.bytes=-1`: never
//! compacted, never deleted by age or size, as Debezium's own history topic).
//!
//! Its producer is not the pipeline's: an append is durable on its own (idempotent,
//! `acks=all`, waited for), outside any transaction of records, as the embedded history
//! has its own log. [`KafkaHistory::load`] reads the partition from its start to its
//! end and keeps the records keyed by this connector's name, in order; a reader of the
//! history tolerates a record written twice (an append retried after a failure that
//! did write it).

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminOptions, ResourceSpecifier};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::append::{AppendRecord, KafkaAppender};
use crate::error::KafkaLogError;
use crate::settings::{KafkaSettings, TopicSpec};
use crate::topics::Admin;

/// The schema history topic of connector `name`.
pub fn history_topic(name: &str) -> String {
    format!("{name}.schema-history")
}

/// One connector's history in its topic.
pub struct KafkaHistory {
    writer: KafkaAppender,
    settings: KafkaSettings,
    topic: String,
    key: Vec<u8>,
}

impl KafkaHistory {
    /// Connects, creating the topic if missing; an existing one that may delete records
    /// (compaction, a retention bound) is a definite error. Blocking.
    pub fn connect(settings: &KafkaSettings, name: &str) -> Result<KafkaHistory, KafkaLogError> {
        let topic = history_topic(name);
        let writer = KafkaAppender::connect(
            settings,
            &topic,
            &TopicSpec {
                partitions: 1,
                configs: vec![
                    ("cleanup.policy".into(), "delete".into()),
                    ("retention.ms".into(), "-1".into()),
                    ("retention.bytes".into(), "-1".into()),
                ],
            },
            "schema history append",
        )?;
        Admin::new(settings)?.check_keeps_everything(&topic)?;
        Ok(KafkaHistory {
            writer,
            settings: settings.clone(),
            topic,
            key: name.as_bytes().to_vec(),
        })
    }

    /// The topic's name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Appends `record`; returns once every in-sync replica has it. Blocking.
    pub fn append(&self, record: &[u8]) -> Result<(), KafkaLogError> {
        self.writer.append(&[AppendRecord {
            partition: Some(0),
            key: Some(&self.key),
            value: Some(record),
            headers: &[],
        }])
    }

    /// Every record of this connector, oldest first. Blocking.
    pub fn load(&self) -> Result<Vec<Vec<u8>>, KafkaLogError> {
        let tid = &self.settings.transactional_id;
        let consumer: BaseConsumer<crate::offsets::QuietEof> = self
            .settings
            .reader(&format!("{tid}.history-reader"))
            .create_with_context(crate::offsets::QuietEof)
            .map_err(KafkaLogError::Config)?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, 0, Offset::Beginning)
            .map_err(|e| KafkaLogError::from_kafka("schema history read", e, tid))?;
        consumer
            .assign(&tpl)
            .map_err(|e| KafkaLogError::from_kafka("schema history read", e, tid))?;
        let mut out = Vec::new();
        let mut deadline = Instant::now() + self.settings.timeout;
        loop {
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    deadline = Instant::now() + self.settings.timeout;
                    if m.key() != Some(&self.key[..]) {
                        continue;
                    }
                    match m.payload() {
                        Some(v) => out.push(v.to_vec()),
                        None => {
                            return Err(KafkaLogError::BadOffset {
                                topic: self.topic.clone(),
                                detail: format!("offset {} has no value", m.offset()),
                            })
                        }
                    }
                }
                Some(Err(KafkaError::PartitionEOF(_))) => return Ok(out),
                Some(Err(e)) => {
                    return Err(KafkaLogError::from_kafka("schema history read", e, tid))
                }
                None if Instant::now() >= deadline => {
                    return Err(KafkaLogError::Transient {
                        what: "schema history read",
                        source: KafkaError::MessageConsumption(
                            rdkafka::error::RDKafkaErrorCode::OperationTimedOut,
                        ),
                    })
                }
                None => {}
            }
        }
    }
}

impl Admin {
    /// Refuses a topic whose configs may delete records. Blocking.
    pub(crate) fn check_keeps_everything(&self, topic: &str) -> Result<(), KafkaLogError> {
        let opts = AdminOptions::new().request_timeout(Some(self.settings.timeout));
        let r = futures_executor::block_on(
            self.admin
                .describe_configs([&ResourceSpecifier::Topic(topic)], &opts),
        )
        .map_err(|e| {
            KafkaLogError::from_kafka(
                "describing the schema history topic",
                e,
                &self.settings.transactional_id,
            )
        })?;
        for res in r.into_iter().flatten() {
            let get = |k: &str| res.get(k).and_then(|e| e.value.clone());
            let policy = get("cleanup.policy").unwrap_or_default();
            let ms = get("retention.ms").unwrap_or_else(|| "-1".into());
            let bytes = get("retention.bytes").unwrap_or_else(|| "-1".into());
            if policy.contains("compact") || ms != "-1" || bytes != "-1" {
                return Err(KafkaLogError::Unsupported {
                    what: "schema history topic",
                    detail: format!("{topic:?} may delete records (cleanup.policy={policy}, retention.ms={ms}, retention.bytes={bytes}); the MySQL schema history must keep every record: set cleanup.policy=delete, retention.ms=-1 and retention.bytes=-1 on it"),
                });
            }
        }
        Ok(())
    }
}
