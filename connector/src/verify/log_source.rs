//! The log `cdc verify` reads: the embedded log (a read-only open, beside a running
//! `cdc run`) or the Kafka cluster of a `[log] type = "kafka"` configuration (committed
//! records only, the connector's position from `<name>.offsets` read without a producer,
//! a sink group's offsets without joining it). One interface for the rebuilt table
//! ([`super::log_view`]) and the busy-table re-check: a topic's high watermarks, a
//! partition's records in batches up to one, the durable source position, a group's
//! committed offset. Every call blocks (run it in `block_in_place`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use cdc_kafka::{GroupOffsets, KafkaReader, KafkaSettings, ReadFrom};
use cdc_log::{Log, Reader, StartAt};
use cdc_schemas::Checkpoint;

use super::VerifyError;
use crate::config::{Config, LogKind};

/// One record of a partition.
pub struct Rec {
    pub offset: u64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
}

/// Records per batch read from Kafka (each batch is one fetch session).
const KAFKA_BATCH: u64 = 20_000;

pub enum VerifyLog {
    Embedded(Log),
    Kafka(Box<KafkaSide>),
}

pub struct KafkaSide {
    reader: KafkaReader,
    settings: KafkaSettings,
    name: String,
    groups: Mutex<HashMap<String, GroupOffsets>>,
}

/// Where a partition's reading is.
pub enum PartitionReader {
    Embedded(Reader),
    Kafka {
        topic: String,
        partition: u32,
        next: u64,
        done: bool,
    },
}

fn failed(what: &str, e: impl std::fmt::Display) -> VerifyError {
    VerifyError::Failed(format!("{what}: {e}"))
}

impl VerifyLog {
    pub fn open(config: &Config) -> Result<VerifyLog, VerifyError> {
        match config.log.kind {
            LogKind::Embedded => Log::open_read_only(&config.log.dir)
                .map(VerifyLog::Embedded)
                .map_err(|e| {
                    failed(
                        &format!(
                            "cannot open the log at {} to read",
                            config.log.dir.display()
                        ),
                        e,
                    )
                }),
            LogKind::Kafka => {
                let settings = config.log.kafka_settings(&config.name);
                let reader = KafkaReader::connect(&settings)
                    .map_err(|e| failed("cannot reach the Kafka log", e))?;
                Ok(VerifyLog::Kafka(Box::new(KafkaSide {
                    reader,
                    settings,
                    name: config.name.clone(),
                    groups: Mutex::new(HashMap::new()),
                })))
            }
        }
    }

    /// The high watermarks of `topic`'s partitions now (empty: no such topic).
    pub fn high_watermarks(&self, topic: &str) -> Result<Vec<u64>, VerifyError> {
        match self {
            VerifyLog::Embedded(log) => {
                log.refresh().map_err(|e| failed("reading the log", e))?;
                Ok(match log.topic(topic) {
                    Ok(t) => (0..t.partitions())
                        .map(|p| t.high_watermark(p).unwrap_or(0))
                        .collect(),
                    Err(_) => Vec::new(),
                })
            }
            VerifyLog::Kafka(k) => Ok(k
                .reader
                .describe(topic)
                .map_err(|e| failed("reading the Kafka log", e))?
                .unwrap_or_default()
                .iter()
                .map(|w| w.high.max(0) as u64)
                .collect()),
        }
    }

    /// A reader of `topic`'s partition `p` from its start.
    pub fn reader(&self, topic: &str, p: u32) -> Result<PartitionReader, VerifyError> {
        match self {
            VerifyLog::Embedded(log) => log
                .reader(topic, p, StartAt::Earliest)
                .map(PartitionReader::Embedded)
                .map_err(|e| failed("reading the log", e)),
            VerifyLog::Kafka(_) => Ok(PartitionReader::Kafka {
                topic: topic.to_string(),
                partition: p,
                next: 0,
                done: false,
            }),
        }
    }

    /// The next records of `r` below `hwm`; empty at the end.
    pub fn next_batch(&self, r: &mut PartitionReader, hwm: u64) -> Result<Vec<Rec>, VerifyError> {
        match (self, r) {
            (VerifyLog::Embedded(_), PartitionReader::Embedded(reader)) => {
                if reader.position() >= hwm {
                    return Ok(Vec::new());
                }
                let records = reader
                    .poll(1 << 20)
                    .map_err(|e| failed("reading the log", e))?;
                Ok(records
                    .into_iter()
                    .filter(|r| r.offset < hwm)
                    .map(|r| Rec {
                        offset: r.offset,
                        timestamp: r.timestamp,
                        key: r.key,
                        value: r.value,
                    })
                    .collect())
            }
            (
                VerifyLog::Kafka(k),
                PartitionReader::Kafka {
                    topic,
                    partition,
                    next,
                    done,
                },
            ) => {
                if *done || *next >= hwm {
                    return Ok(Vec::new());
                }
                let mut out = Vec::new();
                k.reader
                    .read(
                        topic,
                        &[*partition],
                        ReadFrom::Offset(*next),
                        KAFKA_BATCH,
                        |r| {
                            if r.offset >= hwm {
                                return false;
                            }
                            out.push(Rec {
                                offset: r.offset,
                                timestamp: r.timestamp.unwrap_or(0),
                                key: r.key.map(Bytes::copy_from_slice),
                                value: r.value.map(Bytes::copy_from_slice),
                            });
                            true
                        },
                    )
                    .map_err(|e| failed("reading the Kafka log", e))?;
                match out.last() {
                    Some(last) => *next = last.offset + 1,
                    // Only markers (or nothing) are left below the high watermark.
                    None => *done = true,
                }
                Ok(out)
            }
            _ => unreachable!("a reader of another log"),
        }
    }

    /// The connector's durable source position now, and the high watermarks of `topic`
    /// that hold the records it covers: on the embedded log both of one flush; on Kafka
    /// the watermarks are read after the position (its transaction held those records),
    /// so they may hold later records too.
    pub fn position(&self, topic: &str) -> (Option<Checkpoint>, Vec<u64>) {
        let (bytes, hwms) = match self {
            VerifyLog::Embedded(log) => {
                let _ = log.refresh();
                let hwms = match log.topic(topic) {
                    Ok(t) => (0..t.partitions())
                        .map(|p| t.high_watermark(p).unwrap_or(0))
                        .collect(),
                    Err(_) => Vec::new(),
                };
                (log.checkpoint(), hwms)
            }
            VerifyLog::Kafka(k) => {
                let cp = cdc_kafka::committed_checkpoint(&k.settings, &k.name)
                    .ok()
                    .flatten();
                (cp, self.high_watermarks(topic).unwrap_or_default())
            }
        };
        (bytes.and_then(|b| Checkpoint::from_bytes(&b).ok()), hwms)
    }

    /// Waits up to `d` for the log to change (the embedded log's notifications; Kafka is
    /// asked again after a short sleep).
    pub fn wait_for_change(&self, d: Duration) {
        match self {
            VerifyLog::Embedded(log) => {
                let _ = log.wait_for_change(d);
            }
            VerifyLog::Kafka(_) => std::thread::sleep(d.min(Duration::from_millis(300))),
        }
    }

    /// Group `group`'s committed offsets of `topic`'s first `partitions` partitions.
    pub fn committed(&self, group: &str, topic: &str, partitions: u32) -> Vec<Option<u64>> {
        match self {
            VerifyLog::Embedded(log) => {
                let _ = log.refresh();
                (0..partitions)
                    .map(|p| log.committed(group, topic, p))
                    .collect()
            }
            VerifyLog::Kafka(k) => {
                let mut groups = k.groups.lock().unwrap_or_else(|p| p.into_inner());
                if !groups.contains_key(group) {
                    match GroupOffsets::connect(&k.settings, group) {
                        Ok(g) => {
                            groups.insert(group.to_string(), g);
                        }
                        Err(_) => return vec![None; partitions as usize],
                    }
                }
                match groups[group].describe(topic, partitions) {
                    Ok(parts) => parts
                        .iter()
                        .map(|p| p.committed.map(|c| c.max(0) as u64))
                        .collect(),
                    Err(_) => vec![None; partitions as usize],
                }
            }
        }
    }
}
