//! Reading a Kafka log for `cdc log` on a Kafka configuration: the topics, a topic's
//! partitions with their watermarks, and a topic's committed records (`read_committed`),
//! each partition from a start to its end, one partition after the other.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use crate::error::KafkaLogError;
use crate::offsets::QuietEof;
use crate::settings::KafkaSettings;

/// Where a partition is read from.
#[derive(Debug, Clone, Copy)]
pub enum ReadFrom {
    Earliest,
    Offset(u64),
    /// The first record with a timestamp at or after this (ms since the epoch).
    Timestamp(i64),
}

/// A partition's log start (low watermark) and high watermark.
#[derive(Debug, Clone, Copy)]
pub struct Watermarks {
    pub partition: u32,
    pub low: i64,
    pub high: i64,
}

/// One record read (borrowed for the callback).
pub struct ReadRecord<'a> {
    pub partition: u32,
    pub offset: u64,
    pub timestamp: Option<i64>,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<(&'a str, Option<&'a [u8]>)>,
}

/// The record view of a consumed message (borrowed from it).
pub(crate) fn record_of<'a>(m: &'a rdkafka::message::BorrowedMessage<'a>) -> ReadRecord<'a> {
    ReadRecord {
        partition: m.partition() as u32,
        offset: m.offset() as u64,
        timestamp: m.timestamp().to_millis(),
        key: m.key(),
        value: m.payload(),
        headers: m
            .headers()
            .map(|h| h.iter().map(|h| (h.key, h.value)).collect())
            .unwrap_or_default(),
    }
}

/// The offset of partition `p`'s first record at or after `ts` (ms since the epoch);
/// `None` when there is none that late. Blocking.
pub(crate) fn offset_for_time<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    p: u32,
    ts: i64,
    timeout: Duration,
) -> Result<Option<i64>, KafkaLogError> {
    let err = |e| KafkaLogError::from_kafka("offsets for times", e, "");
    let mut q = TopicPartitionList::new();
    q.add_partition_offset(topic, p as i32, Offset::Offset(ts))
        .map_err(err)?;
    let r = consumer.offsets_for_times(q, timeout).map_err(err)?;
    Ok(match r.elements().first().map(|e| e.offset()) {
        Some(Offset::Offset(o)) => Some(o),
        _ => None,
    })
}

/// A read-only view of the cluster.
pub struct KafkaReader {
    consumer: BaseConsumer<QuietEof>,
    timeout: Duration,
}

impl KafkaReader {
    pub fn connect(settings: &KafkaSettings) -> Result<KafkaReader, KafkaLogError> {
        let consumer = settings
            .reader(&format!("{}.cdc-log", settings.transactional_id))
            .create_with_context(QuietEof)
            .map_err(KafkaLogError::Config)?;
        Ok(KafkaReader {
            consumer,
            timeout: settings.timeout,
        })
    }

    fn err(what: &'static str, e: KafkaError) -> KafkaLogError {
        KafkaLogError::from_kafka(what, e, "")
    }

    /// Every topic but Kafka's internal ones, with its partition count, by name.
    pub fn topics(&self) -> Result<Vec<(String, u32)>, KafkaLogError> {
        let md = self
            .consumer
            .fetch_metadata(None, self.timeout)
            .map_err(|e| Self::err("metadata request", e))?;
        let mut out: Vec<(String, u32)> = md
            .topics()
            .iter()
            .filter(|t| !t.name().starts_with("__") && t.error().is_none())
            .map(|t| (t.name().to_string(), t.partitions().len() as u32))
            .collect();
        out.sort();
        Ok(out)
    }

    /// Per partition of `topic`, its watermarks; `None` if the cluster does not know the
    /// topic.
    pub fn describe(&self, topic: &str) -> Result<Option<Vec<Watermarks>>, KafkaLogError> {
        let Some(n) = self
            .topics()?
            .into_iter()
            .find(|(t, _)| t == topic)
            .map(|(_, n)| n)
        else {
            return Ok(None);
        };
        let mut out = Vec::new();
        for p in 0..n {
            let (low, high) = self
                .consumer
                .fetch_watermarks(topic, p as i32, self.timeout)
                .map_err(|e| Self::err("watermarks request", e))?;
            out.push(Watermarks {
                partition: p,
                low,
                high,
            });
        }
        Ok(Some(out))
    }

    /// Where partition `p` of `topic` is read from for `from`; `None`: no record at or
    /// after that time.
    fn start_offset(
        &self,
        topic: &str,
        p: u32,
        from: ReadFrom,
    ) -> Result<Option<Offset>, KafkaLogError> {
        Ok(Some(match from {
            ReadFrom::Earliest => Offset::Beginning,
            ReadFrom::Offset(o) => Offset::Offset(o as i64),
            ReadFrom::Timestamp(ts) => {
                match offset_for_time(&self.consumer, topic, p, ts, self.timeout)? {
                    Some(o) => Offset::Offset(o),
                    None => return Ok(None),
                }
            }
        }))
    }

    /// Calls `f` for each committed record of `topic`'s `partitions` from `from` to the
    /// partition's end (each partition in offset order, one after the other), at most
    /// `max` records; stops early when `f` returns false.
    pub fn read(
        &self,
        topic: &str,
        partitions: &[u32],
        from: ReadFrom,
        max: u64,
        mut f: impl FnMut(&ReadRecord<'_>) -> bool,
    ) -> Result<(), KafkaLogError> {
        let mut left = max;
        for &p in partitions {
            if left == 0 {
                return Ok(());
            }
            // No record that late: nothing to read here.
            let Some(offset) = self.start_offset(topic, p, from)? else {
                continue;
            };
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(topic, p as i32, offset)
                .map_err(|e| Self::err("assign", e))?;
            self.consumer
                .assign(&tpl)
                .map_err(|e| Self::err("assign", e))?;
            let mut deadline = Instant::now() + self.timeout;
            loop {
                match self.consumer.poll(Duration::from_millis(100)) {
                    Some(Ok(m)) => {
                        deadline = Instant::now() + self.timeout;
                        let rec = record_of(&m);
                        left -= 1;
                        if !f(&rec) || left == 0 {
                            return Ok(());
                        }
                    }
                    Some(Err(KafkaError::PartitionEOF(_))) => break,
                    Some(Err(e)) => return Err(Self::err("fetch", e)),
                    None if Instant::now() >= deadline => {
                        return Err(KafkaLogError::Transient {
                            what: "fetch",
                            source: KafkaError::MessageConsumption(
                                rdkafka::error::RDKafkaErrorCode::OperationTimedOut,
                            ),
                        })
                    }
                    None => {}
                }
            }
        }
        Ok(())
    }

    /// Calls `f` for each committed record of `topic`'s `partitions` from `from`, and then
    /// for each new one as it is committed, until `f` returns false or `max` records.
    /// The partitions are read together: records of one partition come in offset order,
    /// records of different ones in no set order. Blocking; never returns on its own.
    pub fn follow(
        &self,
        topic: &str,
        partitions: &[u32],
        from: ReadFrom,
        max: u64,
        mut f: impl FnMut(&ReadRecord<'_>) -> bool,
    ) -> Result<(), KafkaLogError> {
        let mut tpl = TopicPartitionList::new();
        for &p in partitions {
            // No record that late yet: from the end, for the ones to come.
            let offset = self.start_offset(topic, p, from)?.unwrap_or(Offset::End);
            tpl.add_partition_offset(topic, p as i32, offset)
                .map_err(|e| Self::err("assign", e))?;
        }
        self.consumer
            .assign(&tpl)
            .map_err(|e| Self::err("assign", e))?;
        let mut left = max;
        while left > 0 {
            match self.consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => {
                    let rec = record_of(&m);
                    left -= 1;
                    if !f(&rec) {
                        return Ok(());
                    }
                }
                // The end for now: wait for more.
                Some(Err(KafkaError::PartitionEOF(_))) | None => {}
                Some(Err(e)) => return Err(Self::err("fetch", e)),
            }
        }
        Ok(())
    }
}
