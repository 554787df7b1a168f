//! A Kafka log as a sink's [`LogConsumer`] and [`DeadLetters`]: the sink is a member of
//! its consumer group (`group`, default `cdc-sink-<sink>`), so several `cdc sink`
//! processes with the same `[[sink]]` share the partitions, each partition applied by
//! one of them at a time ([`cdc_kafka::KafkaGroup`] says how offsets and rebalances are
//! handled). Dead letters go to a topic of the same cluster (one partition, never
//! compacted), each waited for before the group's offset moves past it.
//!
//! librdkafka's calls block: they run in `block_in_place`, so the executor's other tasks
//! (the source of `cdc run`, other sinks) go on meanwhile.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cdc_kafka::{
    AppendRecord, GroupStart, KafkaAppender, KafkaGroup, KafkaLogError, KafkaSettings, TopicSpec,
};
use cdc_sinks::{DeadLetters, LogConsumer, SinkError, SinkRecord, SinkSpec, TopicPartition};

/// A record header: key and value (`None`: a null value).
type Header<'a> = (&'a str, Option<&'a [u8]>);

fn failure(what: String, e: KafkaLogError) -> SinkError {
    if e.is_transient() {
        SinkError::transient(what, e.to_string()).caused_by(e)
    } else {
        SinkError::definite(
            what,
            e.to_string(),
            "fix the Kafka settings of [log] (brokers, [log.kafka] security) or the principal's ACLs (Read on the topics and the group, Write and Create for the dead-letter topic), then start the sink again",
        )
        .caused_by(e)
    }
}

/// A sink's membership of its consumer group.
pub struct KafkaConsumer {
    group: KafkaGroup,
    name: String,
}

impl KafkaConsumer {
    /// Joins the sink's group on the topics it reads (blocking: call from
    /// `block_in_place` or a blocking thread).
    pub fn connect(settings: &KafkaSettings, spec: &SinkSpec) -> Result<KafkaConsumer, SinkError> {
        let start = if spec.starts_at_earliest() {
            GroupStart::Earliest
        } else {
            GroupStart::Latest
        };
        let chooser = spec.clone();
        let group = KafkaGroup::connect(settings, &spec.group(), start, move |t| {
            chooser.reads_topic(t)
        })
        .map_err(|e| failure(format!("joining Kafka group {}", spec.group()), e))?;
        Ok(KafkaConsumer {
            group,
            name: spec.name().to_string(),
        })
    }
}

impl LogConsumer for KafkaConsumer {
    async fn poll(
        &mut self,
        max_bytes: usize,
        wait: Duration,
    ) -> Result<Vec<SinkRecord>, SinkError> {
        let mut out = Vec::new();
        tokio::task::block_in_place(|| {
            self.group.poll(max_bytes, wait, |topic, r| {
                out.push(SinkRecord {
                    topic: topic.clone(),
                    partition: r.partition,
                    offset: r.offset,
                    timestamp_ms: r.timestamp.unwrap_or(0),
                    key: r.key.map(Bytes::copy_from_slice),
                    value: r.value.map(Bytes::copy_from_slice),
                    headers: r
                        .headers
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.map(Bytes::copy_from_slice)))
                        .collect(),
                })
            })
        })
        .map_err(|e| failure(format!("sink {}: reading Kafka", self.name), e))?;
        Ok(out)
    }

    async fn commit(&mut self, offsets: &[(TopicPartition, u64)]) -> Result<(), SinkError> {
        let offsets: Vec<(Arc<str>, u32, u64)> = offsets
            .iter()
            .map(|(tp, o)| (tp.topic.clone(), tp.partition, *o))
            .collect();
        tokio::task::block_in_place(|| self.group.commit(&offsets)).map_err(|e| {
            failure(
                format!("sink {}: committing its Kafka group's offsets", self.name),
                e,
            )
        })
    }

    fn lag(&self) -> u64 {
        self.group.lag()
    }
}

/// A sink's dead-letter topic in the Kafka cluster (created on first use).
pub struct KafkaDeadLetters {
    settings: KafkaSettings,
    topic: String,
    sink: String,
    writer: Option<KafkaAppender>,
}

impl KafkaDeadLetters {
    pub fn new(settings: &KafkaSettings, spec: &SinkSpec) -> Self {
        KafkaDeadLetters {
            settings: settings.clone(),
            topic: spec.dead_letter_topic(),
            sink: spec.name().to_string(),
            writer: None,
        }
    }

    fn append(&mut self, records: &[(SinkRecord, String)]) -> Result<(), KafkaLogError> {
        if self.writer.is_none() {
            self.writer = Some(KafkaAppender::connect(
                &self.settings,
                &self.topic,
                &TopicSpec {
                    partitions: 1,
                    // Dead letters wait for an operator: kept until deleted by hand.
                    configs: vec![
                        ("cleanup.policy".into(), "delete".into()),
                        ("retention.ms".into(), "-1".into()),
                    ],
                },
                "dead-letter append",
            )?);
        }
        let writer = self.writer.as_ref().expect("connected above");
        let texts: Vec<(String, String)> = records
            .iter()
            .map(|(r, _)| (r.partition.to_string(), r.offset.to_string()))
            .collect();
        let headers: Vec<Vec<Header<'_>>> = records
            .iter()
            .zip(&texts)
            .map(|((r, why), (p, o))| {
                crate::sink_run::dead_letter_headers(r, why, &self.sink, p, o)
            })
            .collect();
        let out: Vec<AppendRecord<'_>> = records
            .iter()
            .zip(&headers)
            .map(|((r, _), h)| AppendRecord {
                partition: Some(0),
                key: r.key.as_deref(),
                value: r.value.as_deref(),
                headers: h,
            })
            .collect();
        writer.append(&out)
    }
}

impl DeadLetters for KafkaDeadLetters {
    async fn send(&mut self, records: &[(SinkRecord, String)]) -> Result<(), SinkError> {
        let topic = self.topic.clone();
        tokio::task::block_in_place(|| self.append(records)).map_err(|e| {
            // Not lost: the driver retries, and the offset does not move past it meanwhile.
            SinkError::transient(
                format!("writing the dead-letter topic {topic} in Kafka"),
                e.to_string(),
            )
            .caused_by(e)
        })
    }
}
