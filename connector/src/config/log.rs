//! `[log]`: the embedded log's directory, its topics' settings (partitions, segments,
//! retention, compaction, codec) and its maintenance, mapped to `cdc_log`'s
//! `TopicConfig` and `LogOptions`. Invariant: `topic_config()` succeeding is what makes
//! the section valid; it names the key of the first bad value.

use std::path::PathBuf;

use serde::Deserialize;

/// `[log]`: the embedded log.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    #[serde(default = "default_log_dir")]
    pub dir: PathBuf,
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
            dir: default_log_dir(),
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
