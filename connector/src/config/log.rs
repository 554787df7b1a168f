//! `[log]`: the embedded log's directory, its topics' settings (partitions, segments,
//! retention, compaction, codec) and its maintenance, mapped to `cdc_log`'s
//! `TopicConfig` and `LogOptions`; or, with `type = "kafka"`, the cluster to write to
//! ([`LogConfig::kafka_settings`]: brokers, transactions, librdkafka properties from
//! `[log.kafka]`), whose topics are created with the same topic settings. Invariant: `topic_config()` succeeding is what makes
//! the section valid; it names the key of the first bad value.

use std::path::PathBuf;

use serde::Deserialize;

/// `[log]`: the embedded log.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// "embedded" (default) or "kafka".
    #[serde(default, rename = "type")]
    pub kind: LogKind,
    /// The embedded log's directory; with Kafka it still holds the embedded schema
    /// registry and the MySQL schema history.
    #[serde(default = "default_log_dir")]
    pub dir: PathBuf,
    /// Kafka: `bootstrap.servers`, e.g. "broker1:9092,broker2:9092".
    #[serde(default)]
    pub brokers: Option<String>,
    /// Kafka: each durable group of source transactions is one Kafka transaction with
    /// its source position (exactly once). `false`: the idempotent producer, at least
    /// once (for brokers without transactions).
    #[serde(default = "default_true")]
    pub transactions: bool,
    /// Kafka: the producer's `transactional.id`; default `cdc-<name>`.
    #[serde(default)]
    pub transactional_id: Option<String>,
    /// Kafka: replication factor of the topics the connector creates; -1 (default) = the
    /// broker's `default.replication.factor`.
    #[serde(default = "default_replication_factor")]
    pub replication_factor: i32,
    /// Kafka: bound on one request to the cluster (metadata, topic creation, a
    /// transaction's commit) before it counts as failed and is retried.
    #[serde(default = "default_kafka_timeout_ms")]
    pub kafka_timeout_ms: u64,
    /// `[log.kafka]`: librdkafka properties (security.protocol, sasl.mechanism,
    /// sasl.username, sasl.password, ssl.ca.location, linger.ms, …), passed as given;
    /// those exactly-once depends on are not overridable.
    #[serde(default)]
    pub kafka: std::collections::BTreeMap<String, String>,
    /// Partitions of each table's topic.
    #[serde(default = "default_partitions")]
    pub partitions: u32,
    /// Roll a partition's active segment past this size (Kafka `segment.bytes`).
    #[serde(default = "default_segment_bytes")]
    pub segment_bytes: u64,
    /// Roll the active segment once its first record is this old (Kafka `segment.ms`).
    #[serde(default = "default_segment_ms")]
    pub segment_ms: i64,
    /// Delete closed segments whose newest record is older than this; -1 = keep forever.
    #[serde(default = "default_retention_ms")]
    pub retention_ms: i64,
    /// Per partition: delete the oldest closed segments above this size; -1 = no limit.
    #[serde(default = "default_minus_one")]
    pub retention_bytes: i64,
    /// "delete" | "compact" | "compact,delete".
    #[serde(default = "default_cleanup_policy")]
    pub cleanup_policy: String,
    /// How long a tombstone survives compaction.
    #[serde(default = "default_delete_retention_ms")]
    pub delete_retention_ms: i64,
    /// Codec of the batches written: "none" | "lz4" | "zstd"; default "lz4" (chosen by the
    /// paired snapshot and stream runs in BENCHMARKS.md). Topics keep the codec they were
    /// created with.
    #[serde(default = "default_compression")]
    pub compression: String,
    /// Bound on the bytes of all segment files; appends wait for consumers / retention
    /// when it is reached. Unset: no budget.
    #[serde(default)]
    pub disk_budget_bytes: Option<u64>,
    /// Memory bound of the cleaner's key map (Kafka's `log.cleaner.dedupe.buffer.size`):
    /// about 32 bytes per key; a compaction run covers as many dirty segments as fit.
    #[serde(default = "default_cleaner_dedupe_bytes")]
    pub cleaner_dedupe_bytes: u64,
    /// How often the log's maintenance runs: `segment.ms` rolls, retention (time and
    /// size), compaction (Kafka's `log.retention.check.interval.ms`).
    #[serde(default = "default_maintenance_interval_ms")]
    pub maintenance_interval_ms: u64,
}

/// `[log] type`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogKind {
    #[default]
    Embedded,
    Kafka,
}

fn default_true() -> bool {
    true
}
fn default_replication_factor() -> i32 {
    -1
}
fn default_kafka_timeout_ms() -> u64 {
    30_000
}

fn default_maintenance_interval_ms() -> u64 {
    60_000
}
fn default_cleaner_dedupe_bytes() -> u64 {
    64 << 20
}
fn default_segment_bytes() -> u64 {
    1 << 30
}
fn default_segment_ms() -> i64 {
    7 * 24 * 3600 * 1000
}
fn default_retention_ms() -> i64 {
    7 * 24 * 3600 * 1000
}
fn default_minus_one() -> i64 {
    -1
}
fn default_cleanup_policy() -> String {
    "delete".into()
}
fn default_delete_retention_ms() -> i64 {
    24 * 3600 * 1000
}
fn default_compression() -> String {
    "lz4".into()
}

impl LogConfig {
    /// The topic config of table topics (valid after [`Config::validate`]).
    pub fn topic_config(&self) -> Result<cdc_log::TopicConfig, (String, String)> {
        let cleanup_policy = match self.cleanup_policy.replace(' ', "").as_str() {
            "delete" => cdc_log::CleanupPolicy::DELETE,
            "compact" => cdc_log::CleanupPolicy::COMPACT,
            "compact,delete" | "delete,compact" => cdc_log::CleanupPolicy::COMPACT_DELETE,
            other => {
                return Err((
                    "log.cleanup_policy".into(),
                    format!("{other:?}: use \"delete\", \"compact\" or \"compact,delete\""),
                ))
            }
        };
        let compression = cdc_log::Compression::from_name(&self.compression).ok_or_else(|| {
            (
                "log.compression".to_string(),
                format!("{:?}: use \"none\", \"lz4\" or \"zstd\"", self.compression),
            )
        })?;
        let never = |key: &str, v: i64| -> Result<Option<i64>, (String, String)> {
            match v {
                -1 => Ok(None),
                v if v >= 1 => Ok(Some(v)),
                v => Err((
                    format!("log.{key}"),
                    format!("{v}: use a positive number of milliseconds, or -1 for never"),
                )),
            }
        };
        if self.maintenance_interval_ms < 100 {
            return Err((
                "log.maintenance_interval_ms".into(),
                format!(
                    "{}: use at least 100 (ms); default 60000",
                    self.maintenance_interval_ms
                ),
            ));
        }
        if self.cleaner_dedupe_bytes < 1 << 20 {
            return Err((
                "log.cleaner_dedupe_bytes".into(),
                format!(
                    "{} is too small: use at least 1048576 (1 MiB); default 67108864 (64 MiB)",
                    self.cleaner_dedupe_bytes
                ),
            ));
        }
        if !(1024..=1 << 40).contains(&self.segment_bytes) {
            return Err((
                "log.segment_bytes".into(),
                format!(
                    "{} is out of range: use 1024 (1 KiB) to 1099511627776 (1 TiB)",
                    self.segment_bytes
                ),
            ));
        }
        if self.retention_bytes < -1 || self.retention_bytes == 0 {
            return Err((
                "log.retention_bytes".into(),
                format!(
                    "{}: use a positive number of bytes, or -1 for no limit",
                    self.retention_bytes
                ),
            ));
        }
        if self.delete_retention_ms < 0 {
            return Err((
                "log.delete_retention_ms".into(),
                format!("{}: must be >= 0", self.delete_retention_ms),
            ));
        }
        self.check_kafka()?;
        Ok(cdc_log::TopicConfig {
            partitions: self.partitions,
            segment_bytes: self.segment_bytes,
            retention_ms: never("retention_ms", self.retention_ms)?,
            retention_bytes: u64::try_from(self.retention_bytes).ok(),
            cleanup_policy,
            delete_retention_ms: self.delete_retention_ms,
            compression,
            segment_ms: never("segment_ms", self.segment_ms)?,
        })
    }

    /// Settings of one kind used with the other are a mistake worth naming.
    fn check_kafka(&self) -> Result<(), (String, String)> {
        match self.kind {
            LogKind::Kafka => {
                match self.brokers.as_deref().map(str::trim) {
                    None | Some("") => {
                        return Err((
                            "log.brokers".into(),
                            "is required with type = \"kafka\": the bootstrap servers, e.g. \"broker1:9092,broker2:9092\"".into(),
                        ))
                    }
                    Some(_) => {}
                }
                if self.disk_budget_bytes.is_some() {
                    return Err((
                        "log.disk_budget_bytes".into(),
                        "bounds the embedded log's disk; with type = \"kafka\" the cluster's retention does: remove it".into(),
                    ));
                }
                if self.replication_factor == 0 || self.replication_factor < -1 {
                    return Err((
                        "log.replication_factor".into(),
                        format!(
                            "{}: use 1 or more, or -1 for the broker's default",
                            self.replication_factor
                        ),
                    ));
                }
                if self.kafka_timeout_ms < 1000 {
                    return Err((
                        "log.kafka_timeout_ms".into(),
                        format!(
                            "{}: use at least 1000 (ms); default 30000",
                            self.kafka_timeout_ms
                        ),
                    ));
                }
                for k in self.kafka.keys() {
                    if cdc_kafka::KafkaSettings::PINNED.contains(&k.as_str()) {
                        return Err((
                            format!("log.kafka.\"{k}\""),
                            "is set by the connector (exactly once depends on it): remove it; brokers go in log.brokers, the transactional id in log.transactional_id, transactions on or off in log.transactions".into(),
                        ));
                    }
                }
            }
            LogKind::Embedded => {
                for (key, set) in [
                    ("log.brokers", self.brokers.is_some()),
                    ("log.transactional_id", self.transactional_id.is_some()),
                    ("log.kafka", !self.kafka.is_empty()),
                ] {
                    if set {
                        return Err((
                            key.into(),
                            "is a Kafka setting: add type = \"kafka\" to [log] to write to Kafka, or remove it".into(),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// The Kafka producer's settings for connector `name` (`type = "kafka"`, valid after
    /// [`LogConfig::topic_config`]).
    pub fn kafka_settings(&self, name: &str) -> cdc_kafka::KafkaSettings {
        let mut properties = self.kafka.clone();
        properties
            .entry("compression.type".into())
            .or_insert_with(|| self.compression.clone());
        cdc_kafka::KafkaSettings {
            brokers: self.brokers.clone().unwrap_or_default(),
            transactions: self.transactions,
            transactional_id: self
                .transactional_id
                .clone()
                .unwrap_or_else(|| format!("cdc-{name}")),
            replication_factor: self.replication_factor,
            properties,
            timeout: std::time::Duration::from_millis(self.kafka_timeout_ms),
        }
    }

    /// The log's open options (disk budget, cleaner, maintenance). The flush policy is
    /// Manual: `cdc run` flushes at transaction boundaries (group commit,
    /// `source.group_commit_bytes` / `group_commit_ms`), `cdc log produce` every
    /// `--flush-every` records.
    pub fn log_options(&self) -> cdc_log::LogOptions {
        cdc_log::LogOptions {
            flush_policy: cdc_log::FlushPolicy::Manual,
            disk_budget_bytes: self.disk_budget_bytes,
            cleaner_dedupe_bytes: usize::try_from(self.cleaner_dedupe_bytes).unwrap_or(usize::MAX),
            maintenance_interval: Some(std::time::Duration::from_millis(
                self.maintenance_interval_ms.max(1),
            )),
            ..cdc_log::LogOptions::default()
        }
    }
}

fn default_log_dir() -> PathBuf {
    PathBuf::from("/var/lib/cdc")
}

fn default_partitions() -> u32 {
    1
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            kind: LogKind::Embedded,
            dir: default_log_dir(),
            brokers: None,
            transactions: true,
            transactional_id: None,
            replication_factor: default_replication_factor(),
            kafka_timeout_ms: default_kafka_timeout_ms(),
            kafka: Default::default(),
            partitions: default_partitions(),
            segment_bytes: default_segment_bytes(),
            segment_ms: default_segment_ms(),
            retention_ms: default_retention_ms(),
            retention_bytes: default_minus_one(),
            cleanup_policy: default_cleanup_policy(),
            delete_retention_ms: default_delete_retention_ms(),
            compression: default_compression(),
            disk_budget_bytes: None,
            cleaner_dedupe_bytes: default_cleaner_dedupe_bytes(),
            maintenance_interval_ms: default_maintenance_interval_ms(),
        }
    }
}
