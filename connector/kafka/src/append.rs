//! [`KafkaAppender`]: a topic written by its own idempotent producer, outside any
//! transaction, each append waited for (`acks=all`): the MySQL schema history and a
//! sink's dead-letter topic. An append that failed may still have written some of its
//! records; the caller retries it, and its readers tolerate a record written twice.

use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use crate::error::KafkaLogError;
use crate::log::Reports;
use crate::settings::{KafkaSettings, TopicSpec};
use crate::topics::Admin;

/// One record to append (borrowed: librdkafka copies it).
pub struct AppendRecord<'a> {
    pub partition: Option<i32>,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [(&'a str, Option<&'a [u8]>)],
}

/// A topic and the producer that appends to it.
pub struct KafkaAppender {
    producer: BaseProducer<Reports>,
    topic: String,
    timeout: Duration,
    what: &'static str,
}

impl KafkaAppender {
    /// Connects, creating `topic` with `spec` if missing; `what` names the topic in
    /// errors. Blocking.
    pub fn connect(
        settings: &KafkaSettings,
        topic: &str,
        spec: &TopicSpec,
        what: &'static str,
    ) -> Result<KafkaAppender, KafkaLogError> {
        let mut settings = settings.clone();
        // Its own producer, never transactional.
        settings.transactions = false;
        Admin::new(&settings)?.ensure_topic(topic, spec)?;
        let producer: BaseProducer<Reports> = settings
            .producer()
            .create_with_context(Reports::default())
            .map_err(KafkaLogError::Config)?;
        Ok(KafkaAppender {
            producer,
            topic: topic.to_string(),
            timeout: settings.timeout,
            what,
        })
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Appends `records` in order; returns once every in-sync replica has each. Blocking.
    pub fn append(&self, records: &[AppendRecord<'_>]) -> Result<(), KafkaLogError> {
        let what = self.what;
        for r in records {
            let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.topic);
            if let Some(p) = r.partition {
                rec = rec.partition(p);
            }
            if let Some(k) = r.key {
                rec = rec.key(k);
            }
            if let Some(v) = r.value {
                rec = rec.payload(v);
            }
            if !r.headers.is_empty() {
                let mut h = OwnedHeaders::new_with_capacity(r.headers.len());
                for &(key, value) in r.headers {
                    h = h.insert(Header { key, value });
                }
                rec = rec.headers(h);
            }
            self.producer
                .send(rec)
                .map_err(|(e, _)| KafkaLogError::from_kafka(what, e, ""))?;
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            self.producer.poll(Duration::ZERO);
            if self.producer.in_flight_count() == 0 {
                break;
            }
            if Instant::now() >= deadline {
                return Err(KafkaLogError::Transient {
                    what,
                    source: KafkaError::Flush(rdkafka::error::RDKafkaErrorCode::OperationTimedOut),
                });
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        match self.producer.context().take() {
            Some(e) => Err(KafkaLogError::from_kafka(what, e, "")),
            None => Ok(()),
        }
    }
}
