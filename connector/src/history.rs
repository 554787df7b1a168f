//! The schema history over the embedded log: [`LogHistoryStore`], the
//! [`SchemaHistoryStore`] `cdc run` hands to the source (`SourceContext::history`); with
//! `[log] type = "kafka"`, [`KafkaHistoryStore`] (a Kafka topic) instead.
//!
//! Layout, modelled on the embedded registry's `_schemas` (see
//! `connector/registry/src/embedded/persist.rs` and `pipeline/registry.rs`):
//!
//! - Its own log directory, `<log.dir>/history` ([`history_dir`]), opened once per
//!   process, not the data log: an append is made durable with `Log::flush(None)`, which
//!   flushes *every* partition of its log. In the data log that would make a transaction
//!   the pipeline has only partly appended durable under the previous checkpoint (the
//!   pipeline's flush rule forbids it); in its own log it flushes only history records and
//!   writes that log's ledger, never the data log's checkpoint.
//! - One topic, [`TOPIC`] (`_schema_history`), one partition, each record keyed by the
//!   connector's name (`name` in the config), so a history directory that ever served
//!   another connector name cannot mix them up: [`SchemaHistoryStore::load`] returns only
//!   this name's records, in append (offset) order.
//! - Topic config `cleanup.policy=none`, `retention.ms=-1`, `retention.bytes=-1`: the log's
//!   retention, its compaction and its disk-budget relief all skip a topic whose policy
//!   has neither `delete` nor `compact` (`connector/log/src/retention.rs`,
//!   `compaction.rs`), so no record is ever deleted, whatever the budget, the groups or
//!   the maintenance runs. An existing topic with another policy or a retention bound is
//!   refused (definite): it could lose records.
//!
//! Invariants: [`LogHistoryStore::append`] returns `Ok` only after the flush that made
//! the record durable (fsync of the segment, then the history log's ledger). A failed
//! append may leave its record in the log unflushed, to become durable with the next
//! append: the history's reader tolerates duplicates (see `cdc_sources::mysql::history`).
//! The history's disk use is not counted in the data log's disk budget (it is small: a
//! schema state per snapshot and one record per DDL).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cdc_log::{
    CleanupPolicy, Compression, Log, LogError, LogOptions, NewRecord, StartAt, Topic, TopicConfig,
};
use cdc_sources::history::{HistoryError, SchemaHistoryStore};

/// The history topic's name.
pub const TOPIC: &str = "_schema_history";

/// Where `cdc run` keeps the schema history for a data log at `log_dir`.
pub fn history_dir(log_dir: &Path) -> PathBuf {
    log_dir.join("history")
}

/// The history topic's configuration: nothing is ever deleted.
pub fn topic_config() -> TopicConfig {
    TopicConfig {
        partitions: 1,
        segment_bytes: 16 << 20,
        retention_ms: None,
        retention_bytes: None,
        segment_ms: None,
        cleanup_policy: CleanupPolicy::NONE,
        compression: Compression::Zstd,
        ..TopicConfig::default()
    }
}

fn history_error(what: &str, e: LogError) -> HistoryError {
    let transient = e.is_transient();
    classified(
        what,
        e,
        transient,
        "see the log error above; the history log is the directory `history` under [log] dir",
    )
}

/// `e` while doing `what`, transient or definite (with `fix`), kept as the cause.
fn classified(
    what: &str,
    e: impl std::error::Error + Send + Sync + 'static,
    transient: bool,
    fix: &str,
) -> HistoryError {
    let detail = format!("{what}: {e}");
    if transient {
        HistoryError::transient(detail).caused_by(e)
    } else {
        HistoryError::definite(detail, fix).caused_by(e)
    }
}

/// The schema history of one connector in an embedded log (see the module docs).
pub struct LogHistoryStore {
    log: Log,
    topic: Topic,
    key: Vec<u8>,
    /// Serialises append + flush, so that an append's `Ok` is about its own record.
    append_lock: Mutex<()>,
}

impl LogHistoryStore {
    /// Opens (creating it if missing) the history log at `dir` for connector `name`.
    pub fn open_dir(dir: &Path, name: &str) -> Result<LogHistoryStore, HistoryError> {
        let log = Log::open(dir, LogOptions::default()).map_err(|e| {
            history_error(
                &format!("opening the schema history log at {}", dir.display()),
                e,
            )
        })?;
        LogHistoryStore::open(log, name)
    }

    /// The history of connector `name` in `log` (creating the topic if missing). `log`
    /// must hold nothing else that is appended and not flushed (its flushes cover every
    /// partition): give the history its own log, as [`LogHistoryStore::open_dir`] does.
    pub fn open(log: Log, name: &str) -> Result<LogHistoryStore, HistoryError> {
        let topic = log
            .topic_or_create(TOPIC, topic_config())
            .map_err(|e| history_error("creating the schema history topic", e))?;
        let c = topic.config();
        if c.cleanup_policy != CleanupPolicy::NONE
            || c.retention_ms.is_some()
            || c.retention_bytes.is_some()
        {
            return Err(HistoryError::definite(
                format!(
                    "the topic {TOPIC} in {} may delete records (its topic.conf has a cleanup policy or retention other than none); the schema history must keep every record",
                    log.dir().display()
                ),
                "set cleanup.policy=none, retention.ms=-1 and retention.bytes=-1 in its topic.conf (recompute the checksum line), or move the directory away to start a new history (the source then snapshots)",
            ));
        }
        Ok(LogHistoryStore {
            log,
            topic,
            key: name.as_bytes().to_vec(),
            append_lock: Mutex::new(()),
        })
    }

    /// The log the history is stored in.
    pub fn log(&self) -> &Log {
        &self.log
    }
}

impl SchemaHistoryStore for LogHistoryStore {
    fn load(&self) -> Result<Vec<Vec<u8>>, HistoryError> {
        let read = |e| history_error("reading the schema history", e);
        let mut reader = self.log.reader(TOPIC, 0, StartAt::Earliest).map_err(read)?;
        let mut out = Vec::new();
        loop {
            let batch = reader.poll(4 << 20).map_err(read)?;
            if batch.is_empty() {
                break;
            }
            for r in batch {
                if r.key.as_deref() != Some(self.key.as_slice()) {
                    continue;
                }
                let Some(v) = r.value else {
                    return Err(HistoryError::definite(
                        format!("{TOPIC} offset {} has no value", r.offset),
                        "the history was written by another tool; move the history directory away to start a new one (the source then snapshots)",
                    ));
                };
                out.push(v.to_vec());
            }
        }
        Ok(out)
    }

    fn append(&self, record: &[u8]) -> Result<(), HistoryError> {
        let _one = self.append_lock.lock().unwrap_or_else(|p| p.into_inner());
        let r = NewRecord::new(Some(&self.key), Some(record), cdc_log::now_ms());
        self.topic
            .append(0, &[r])
            .map_err(|e| history_error("appending to the schema history", e))?;
        // Its own log: this flushes only history records and keeps that log's (empty)
        // checkpoint.
        self.log
            .flush(None)
            .map_err(|e| history_error("flushing the schema history", e))?;
        Ok(())
    }
}

/// The schema history in Kafka (`[log] type = "kafka"`): `<name>.schema-history`
/// ([`cdc_kafka::KafkaHistory`]), connected on first use, so that a broker not reachable
/// yet is a transient error of the source's attempt (retried with it), not of start-up.
pub struct KafkaHistoryStore {
    settings: cdc_kafka::KafkaSettings,
    name: String,
    history: Mutex<Option<cdc_kafka::KafkaHistory>>,
}

impl KafkaHistoryStore {
    pub fn new(settings: cdc_kafka::KafkaSettings, name: &str) -> KafkaHistoryStore {
        KafkaHistoryStore {
            settings,
            name: name.to_string(),
            history: Mutex::new(None),
        }
    }

    fn with<T>(
        &self,
        what: &str,
        f: impl FnOnce(&cdc_kafka::KafkaHistory) -> Result<T, cdc_kafka::KafkaLogError>,
    ) -> Result<T, HistoryError> {
        let mut h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        if h.is_none() {
            *h = Some(
                cdc_kafka::KafkaHistory::connect(&self.settings, &self.name).map_err(|e| {
                    kafka_history_error("connecting to the schema history topic", e)
                })?,
            );
        }
        let r = f(h.as_ref().expect("connected"));
        if r.is_err() {
            // A fresh producer for the next try.
            *h = None;
        }
        r.map_err(|e| kafka_history_error(what, e))
    }
}

fn kafka_history_error(what: &str, e: cdc_kafka::KafkaLogError) -> HistoryError {
    let transient = e.is_transient();
    classified(
        what,
        e,
        transient,
        "see the Kafka error above; the history is the topic <name>.schema-history",
    )
}

impl SchemaHistoryStore for KafkaHistoryStore {
    fn load(&self) -> Result<Vec<Vec<u8>>, HistoryError> {
        self.with("reading the schema history from Kafka", |h| h.load())
    }

    fn append(&self, record: &[u8]) -> Result<(), HistoryError> {
        self.with("appending to the schema history in Kafka", |h| {
            h.append(record)
        })
    }
}

#[cfg(test)]
mod tests;
