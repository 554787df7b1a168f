//! The connector's configuration: one TOML file, every key overridable from the
//! environment, validated before anything connects.
//!
//! Environment overrides: `CDC_` + the key path in upper case with `__` between levels,
//! e.g. `CDC_SOURCE__PASSWORD` sets `source.password`, `CDC_LOG__PARTITIONS` sets
//! `log.partitions`, `CDC_NAME` sets `name`. A value is read as a TOML literal when it is
//! one of the right type (`12`, `true`, `["a", "b"]`), and as a plain string otherwise.
//! Variables starting with `CDC_` that have no `__` (other than `CDC_NAME`) are not
//! configuration and are ignored (`CDC_CONFIG`, `CDC_LOG_FORMAT`, ...).
//!
//! Invariants after [`Config::load`]: every key was known, every value had the right type,
//! required keys were present, and [`Config::validate`] passed. Secrets (`source.password`,
//! the password inside `source.url`) print as `***` in `Debug` output and never reach logs.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use cdc_sources::config::{SnapshotConfig, SourceConfig, SourceSpec};
use cdc_sources::Secret;
use serde::Deserialize;

/// The whole configuration.
#[derive(Debug)]
pub struct Config {
    /// The connector's name: topic prefix, default slot and publication names, MySQL
    /// `server_id` seed.
    pub name: String,
    /// `[source]`: its keys belong to the sources crate (common ones, and the chosen
    /// database's own), which reads and validates them.
    pub source: SourceConfig,
    pub log: LogConfig,
    pub admin: AdminConfig,
    pub registry: RegistryConfig,
    pub format: FormatConfig,
    pub snapshot: SnapshotConfig,
}

/// The file as serde reads it: `[source]` stays a table for [`SourceConfig::from_table`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    name: String,
    source: toml::Table,
    #[serde(default)]
    log: LogConfig,
    #[serde(default)]
    admin: AdminConfig,
    /// `[registry]`: the schema registry (no `url`: the embedded one, in the log).
    #[serde(default)]
    registry: RegistryConfig,
    /// `[format]`: record encoding (see `crate::pipeline`).
    #[serde(default)]
    format: FormatConfig,
    /// `[snapshot]`: the initial snapshot.
    #[serde(default)]
    snapshot: SnapshotConfig,
}

/// `[format]`: how records are encoded and what a schema change does.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FormatConfig {
    /// "json" (payload only), "json-schemas" (`{"schema":…,"payload":…}`) or "avro".
    #[serde(default = "default_format_value")]
    pub value: String,
    /// Debezium `decimal.handling.mode`: "precise" | "double" | "string".
    #[serde(default = "default_precise")]
    pub decimal_handling_mode: String,
    /// Debezium `time.precision.mode`: "adaptive" | "adaptive_time_microseconds" | "connect".
    #[serde(default = "default_adaptive")]
    pub time_precision_mode: String,
    /// Debezium `binary.handling.mode`: "bytes" | "base64" | "base64-url-safe" | "hex".
    #[serde(default = "default_bytes")]
    pub binary_handling_mode: String,
    /// Debezium `interval.handling.mode`: "numeric" | "string".
    #[serde(default = "default_numeric")]
    pub interval_handling_mode: String,
    /// Debezium `tombstones.on.delete`.
    #[serde(default = "default_true")]
    pub tombstones_on_delete: bool,
    /// What an incompatible schema change does: "stop" (default; a definite error naming
    /// the table) or "force" (register under compatibility NONE for that subject, loudly).
    #[serde(default = "default_schema_change")]
    pub schema_change: String,
}

fn default_format_value() -> String {
    "json".into()
}
fn default_precise() -> String {
    "precise".into()
}
fn default_adaptive() -> String {
    "adaptive".into()
}
fn default_bytes() -> String {
    "bytes".into()
}
fn default_numeric() -> String {
    "numeric".into()
}
fn default_true() -> bool {
    true
}
fn default_schema_change() -> String {
    "stop".into()
}

impl Default for FormatConfig {
    fn default() -> Self {
        FormatConfig {
            value: default_format_value(),
            decimal_handling_mode: default_precise(),
            time_precision_mode: default_adaptive(),
            binary_handling_mode: default_bytes(),
            interval_handling_mode: default_numeric(),
            tombstones_on_delete: true,
            schema_change: default_schema_change(),
        }
    }
}

/// `[log]`: the embedded log.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    #[serde(default = "default_log_dir")]
    pub dir: PathBuf,
    /// Partitions of each table's topic.
    #[serde(default = "default_partitions")]
    pub partitions: u32,
    /// Flush (make durable, without moving the source checkpoint) once appended data has
    /// waited this long; a timer thread of the log enforces it. Unset: only the pipeline's
    /// explicit flushes (before each source acknowledgement).
    #[serde(default)]
    pub flush_interval_ms: Option<u64>,
    /// Flush once this many bytes were appended since the last flush. Unset: no bound.
    #[serde(default)]
    pub flush_bytes: Option<u64>,
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

    /// The log's open options (flush policy, disk budget).
    pub fn log_options(&self) -> cdc_log::LogOptions {
        let flush_policy = if self.flush_interval_ms.is_none() && self.flush_bytes.is_none() {
            cdc_log::FlushPolicy::Manual
        } else {
            cdc_log::FlushPolicy::Threshold {
                bytes: self.flush_bytes,
                interval: self.flush_interval_ms.map(std::time::Duration::from_millis),
            }
        };
        cdc_log::LogOptions {
            flush_policy,
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
            flush_interval_ms: None,
            flush_bytes: None,
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

/// `[registry]`: which schema registry the pipeline registers schemas with.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// A Confluent-compatible registry (`https://host:8081`); absent = the embedded one.
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<Secret>,
    #[serde(default)]
    pub bearer_token: Option<Secret>,
    /// Extra CA certificates (PEM) to trust for the remote registry's TLS.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Per-request timeout for the remote registry (ms); default 10000.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Default compatibility level of the embedded registry (subjects without their own
    /// and no `PUT /config`); default BACKWARD.
    #[serde(default)]
    pub compatibility: Option<String>,
}

impl RegistryConfig {
    /// The embedded registry's default level.
    pub fn compatibility_level(&self) -> cdc_schemas::compat::CompatibilityLevel {
        self.compatibility
            .as_deref()
            .and_then(|s| s.parse().ok())
            .unwrap_or_default()
    }

    /// Options for `cdc_registry::remote::RemoteRegistry`, when `url` is set.
    pub fn remote_options(&self) -> Option<cdc_registry::remote::RemoteOptions> {
        let url = self.url.as_ref()?;
        let mut o = cdc_registry::remote::RemoteOptions::new(url.clone());
        o.username = self.username.clone();
        o.password = self.password.as_ref().map(|p| p.expose().to_string());
        o.bearer_token = self.bearer_token.as_ref().map(|t| t.expose().to_string());
        o.ca_file = self.ca_file.clone();
        if let Some(ms) = self.timeout_ms {
            o.timeout = std::time::Duration::from_millis(ms);
        }
        Some(o)
    }

    fn validate(&self) -> Result<(), (String, String)> {
        if let Some(l) = &self.compatibility {
            if let Err(e) = l.parse::<cdc_schemas::compat::CompatibilityLevel>() {
                return Err(("registry.compatibility".into(), e.to_string()));
            }
        }
        if let Some(u) = &self.url {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                return Err((
                    "registry.url".into(),
                    format!("{u:?}: use an http:// or https:// URL"),
                ));
            }
        }
        if self.timeout_ms == Some(0) {
            return Err(("registry.timeout_ms".into(), "must be > 0".into()));
        }
        if self.password.is_some() && self.username.is_none() {
            return Err((
                "registry.password".into(),
                "set registry.username too (basic auth)".into(),
            ));
        }
        if self.bearer_token.is_some() && self.username.is_some() {
            return Err((
                "registry.bearer_token".into(),
                "use either bearer_token or username/password, not both".into(),
            ));
        }
        Ok(())
    }
}

/// `[admin]`: health, readiness, metrics and the schema registry API.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8083))
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: default_listen(),
        }
    }
}

/// What is wrong with a configuration. Each variant names where the bad value came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("{origin}: key `{key}`: {message}")]
    Invalid {
        origin: String,
        key: String,
        message: String,
    },
}

/// The environment variable prefix.
pub const ENV_PREFIX: &str = "CDC_";

impl Config {
    /// Reads `path`, applies the process environment's overrides, validates.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_parts(path, &text, std::env::vars())
    }

    /// Parses `text` (read from `path`), overlays the `CDC_*` variables of `env`, validates.
    pub fn from_parts(
        path: &Path,
        text: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut table: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| ConfigError::Syntax {
                    path: path.to_path_buf(),
                    message: e.to_string().trim_end().replace('\n', " "),
                })?;
        let file_origin = format!("config file {}", path.display());
        // Key path -> (env var name, raw value, whether currently inserted as a string).
        let mut from_env: BTreeMap<String, (String, String, bool)> = BTreeMap::new();
        for (var, raw) in env {
            let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            if !rest.contains("__") && rest != "NAME" {
                continue;
            }
            let key = rest.to_ascii_lowercase().replace("__", ".");
            let (value, as_string) = literal_or_string(&raw);
            set_path(&mut table, &key, value).map_err(|message| ConfigError::Invalid {
                origin: format!("environment variable {var}"),
                key: key.clone(),
                message,
            })?;
            from_env.insert(key, (var, raw, as_string));
        }
        // A value like "123" from the environment is first tried as a number; if the key
        // wants a string, retry it as a string. Bounded: each key flips at most once.
        loop {
            match deserialize(table.clone()) {
                Ok(config) => {
                    config
                        .validate()
                        .map_err(|(key, message)| ConfigError::Invalid {
                            origin: origin_of(&key, &from_env, &file_origin),
                            key,
                            message,
                        })?;
                    return Ok(config);
                }
                Err((key, message)) => {
                    if let Some((_, raw, as_string)) = from_env.get_mut(&key) {
                        if !*as_string {
                            *as_string = true;
                            let raw = raw.clone();
                            set_path(&mut table, &key, toml::Value::String(raw))
                                .expect("path existed");
                            continue;
                        }
                    }
                    return Err(ConfigError::Invalid {
                        origin: origin_of(&key, &from_env, &file_origin),
                        key,
                        message,
                    });
                }
            }
        }
    }

    /// Checks what types alone cannot. Returns the offending key and what is wrong.
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.name.is_empty()
            || self.name.len() > 100
            || !self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err((
                "name".into(),
                format!(
                    "{:?} is not a usable connector name: use 1 to 100 characters of a-z, A-Z, 0-9, '_' and '-' (it becomes the topic prefix and the slot name)",
                    self.name
                ),
            ));
        }
        if !(1..=10_000).contains(&self.log.partitions) {
            return Err((
                "log.partitions".into(),
                format!("{} is out of range: use 1 to 10000", self.log.partitions),
            ));
        }
        if self.log.dir.as_os_str().is_empty() {
            return Err(("log.dir".into(), "must not be empty".into()));
        }
        self.log.topic_config()?;
        self.snapshot.validate()?;
        self.validate_pipeline()?;
        self.registry.validate()?;
        for (key, v) in [
            ("log.flush_interval_ms", self.log.flush_interval_ms),
            ("log.flush_bytes", self.log.flush_bytes),
            ("log.disk_budget_bytes", self.log.disk_budget_bytes),
        ] {
            if v == Some(0) {
                return Err((
                    key.into(),
                    "0 is not allowed: leave the key out to disable it".into(),
                ));
            }
        }
        Ok(())
    }

    /// The `[format]` keys.
    fn validate_pipeline(&self) -> Result<(), (String, String)> {
        let one_of = |key: &str, v: &str, allowed: &[&str]| {
            if allowed.contains(&v) {
                Ok(())
            } else {
                Err((
                    key.to_string(),
                    format!("{v:?}: use one of {}", allowed.join(", ")),
                ))
            }
        };
        let f = &self.format;
        one_of("format.value", &f.value, &["json", "json-schemas", "avro"])?;
        one_of(
            "format.decimal_handling_mode",
            &f.decimal_handling_mode,
            &["precise", "double", "string"],
        )?;
        one_of(
            "format.time_precision_mode",
            &f.time_precision_mode,
            &["adaptive", "adaptive_time_microseconds", "connect"],
        )?;
        one_of(
            "format.binary_handling_mode",
            &f.binary_handling_mode,
            &["bytes", "base64", "base64-url-safe", "hex"],
        )?;
        one_of(
            "format.interval_handling_mode",
            &f.interval_handling_mode,
            &["numeric", "string"],
        )?;
        one_of("format.schema_change", &f.schema_change, &["stop", "force"])?;
        Ok(())
    }

    /// What the source factory builds a source from.
    pub fn source_spec(&self) -> SourceSpec {
        SourceSpec {
            name: self.name.clone(),
            source: self.source.clone(),
            snapshot: self.snapshot.clone(),
            data_dir: self.log.dir.clone(),
        }
    }
}

fn origin_of(
    key: &str,
    from_env: &BTreeMap<String, (String, String, bool)>,
    file_origin: &str,
) -> String {
    // The error may be reported at a parent (missing field) or a child (array element).
    from_env
        .iter()
        .find(|(k, _)| {
            key == k.as_str()
                || key.starts_with(&format!("{k}."))
                || key.starts_with(&format!("{k}["))
        })
        .map(|(_, (var, _, _))| format!("environment variable {var}"))
        .unwrap_or_else(|| file_origin.to_string())
}

fn literal_or_string(raw: &str) -> (toml::Value, bool) {
    match format!("v = {raw}").parse::<toml::Table>() {
        Ok(mut t) => match t.remove("v") {
            Some(toml::Value::String(s)) => (toml::Value::String(s), true),
            Some(v) => (v, false),
            None => (toml::Value::String(raw.to_string()), true),
        },
        Err(_) => (toml::Value::String(raw.to_string()), true),
    }
}

fn set_path(table: &mut toml::Table, key: &str, value: toml::Value) -> Result<(), String> {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().expect("split yields one part");
    let mut cur = table;
    for (i, p) in parts.iter().enumerate() {
        let entry = cur
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = match entry {
            toml::Value::Table(t) => t,
            _ => {
                return Err(format!(
                    "`{}` is not a table, so it has no key `{}`",
                    parts[..=i].join("."),
                    last
                ))
            }
        };
    }
    cur.insert(last.to_string(), value);
    Ok(())
}

/// Deserializes; on error returns the full key path and a message.
fn deserialize(table: toml::Table) -> Result<Config, (String, String)> {
    let raw = deserialize_raw(table)?;
    let source = SourceConfig::from_table(&raw.source, &raw.name)?;
    Ok(Config {
        name: raw.name,
        source,
        log: raw.log,
        admin: raw.admin,
        registry: raw.registry,
        format: raw.format,
        snapshot: raw.snapshot,
    })
}

fn deserialize_raw(table: toml::Table) -> Result<RawConfig, (String, String)> {
    let de = toml::Value::Table(table);
    serde_path_to_error::deserialize::<_, RawConfig>(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let inner = inner.trim_end().replace('\n', " ");
        let path = if path == "." { String::new() } else { path };
        let join = |k: &str| {
            if path.is_empty() {
                k.to_string()
            } else {
                format!("{path}.{k}")
            }
        };
        if let Some(field) = backticked(&inner, "missing field `") {
            (join(&field), "is required but missing".to_string())
        } else if let Some(field) = backticked(&inner, "unknown field `") {
            // The path already ends at the unknown key; toml appends " in `table`".
            let expected = inner
                .split_once(", expected")
                .map(|(_, e)| e.split(" in `").next().unwrap_or(e))
                .map(|e| format!(" (known keys:{e})"))
                .unwrap_or_default();
            let key = if path.ends_with(field.as_str()) {
                path.clone()
            } else {
                join(&field)
            };
            (key, format!("unknown key{expected}"))
        } else {
            (path, inner)
        }
    })
}

fn backticked(s: &str, prefix: &str) -> Option<String> {
    let start = s.find(prefix)? + prefix.len();
    let end = s[start..].find('`')?;
    Some(s[start..start + end].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "inventory"
[source]
type = "postgres"
url = "postgres://cdc:secret@127.0.0.1:5432/app?sslmode=prefer"
tables = ["public.orders", "public.customers"]
[log]
dir = "/var/lib/cdc"
partitions = 6
[admin]
listen = "127.0.0.1:8083"
"#;

    fn load(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_parts(
            Path::new("cdc.toml"),
            text,
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())),
        )
    }

    #[test]
    fn the_documented_example_loads() {
        let c = load(GOOD, &[]).unwrap();
        assert_eq!(c.name, "inventory");
        assert_eq!(c.source.kind(), cdc_sources::SourceKind::Postgres);
        assert_eq!(c.log.partitions, 6);
        assert_eq!(c.source.common.tables.len(), 2);
        let cdc_sources::config::DbSettings::Postgres(pg) = &c.source.db else {
            panic!("a postgres source")
        };
        assert_eq!(pg.slot(), "cdc_inventory");
        assert_eq!(c.admin.listen.port(), 8083);
    }

    #[test]
    fn registry_section() {
        let c = load(GOOD, &[]).unwrap();
        assert!(c.registry.url.is_none() && c.registry.remote_options().is_none());
        assert_eq!(
            c.registry.compatibility_level(),
            cdc_schemas::compat::CompatibilityLevel::Backward
        );
        let text = format!(
            "{GOOD}[registry]\nurl = \"https://sr.example:8081\"\nusername = \"cdc\"\npassword = \"hunter2\"\nca_file = \"/etc/cdc/ca.pem\"\ntimeout_ms = 2500\ncompatibility = \"full_transitive\"\n"
        );
        let c = load(&text, &[("CDC_REGISTRY__PASSWORD", "from-env")]).unwrap();
        assert_eq!(
            c.registry.compatibility_level(),
            cdc_schemas::compat::CompatibilityLevel::FullTransitive
        );
        let o = c.registry.remote_options().unwrap();
        assert_eq!(o.url, "https://sr.example:8081");
        assert_eq!(o.password.as_deref(), Some("from-env"));
        assert_eq!(o.timeout, std::time::Duration::from_millis(2500));
        let dbg = format!("{:?} {:?}", c.registry, o);
        assert!(
            !dbg.contains("from-env") && !dbg.contains("hunter2"),
            "{dbg}"
        );
        let e = load(
            &format!("{GOOD}[registry]\ncompatibility = \"SIDEWAYS\"\n"),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("registry.compatibility"), "{e}");
        let e = load(&format!("{GOOD}[registry]\nurl = \"sr:8081\"\n"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("registry.url"), "{e}");
    }

    #[test]
    fn unknown_key_names_key_and_file() {
        let e = load(
            &GOOD.replace("partitions = 6", "partitions = 6\nsegment_size = 5"),
            &[],
        )
        .unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("config file cdc.toml")
                && m.contains("`log.segment_size`")
                && m.contains("unknown key"),
            "{m}"
        );
        let e = load(&format!("bogus = 1\n{GOOD}"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`bogus`"), "{e}");
    }

    #[test]
    fn wrong_type_names_key() {
        let e = load(&GOOD.replace("partitions = 6", "partitions = \"six\""), &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`log.partitions`") && e.contains("invalid type"),
            "{e}"
        );
        let e = load(
            &GOOD.replace("type = \"postgres\"", "type = \"oracle\""),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("`source.type`") && e.contains("oracle"), "{e}");
    }

    #[test]
    fn missing_value_names_key() {
        let e = load(&GOOD.replace("url = ", "#url = "), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`source.url`") && e.contains("required"), "{e}");
        let e = load("[source]\ntype='postgres'\nurl='postgres://u@h/d'", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`name`") && e.contains("required"), "{e}");
    }

    #[test]
    fn env_overrides_win_and_are_typed() {
        let c = load(
            GOOD,
            &[
                ("CDC_LOG__PARTITIONS", "12"),
                ("CDC_SOURCE__PASSWORD", "12345"),
                ("CDC_NAME", "other"),
                ("CDC_SOURCE__TABLES", r#"["public.x"]"#),
                ("CDC_CONFIG", "/ignored.toml"),
                ("CDC_TEST_PG", "16"),
                ("UNRELATED__VAR", "1"),
            ],
        )
        .unwrap();
        assert_eq!(c.log.partitions, 12);
        assert_eq!(
            c.source.common.password.unwrap().expose(),
            "12345",
            "numeric-looking secret stays a string"
        );
        assert_eq!(c.name, "other");
        assert_eq!(c.source.common.tables, vec!["public.x"]);
    }

    #[test]
    fn env_errors_name_the_variable() {
        let e = load(GOOD, &[("CDC_LOG__PARTITIONS", "many")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("environment variable CDC_LOG__PARTITIONS")
                && e.contains("`log.partitions`"),
            "{e}"
        );
        let e = load(GOOD, &[("CDC_LOG__PARTITIONS", "0")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("CDC_LOG__PARTITIONS") && e.contains("out of range"),
            "{e}"
        );
        let e = load(GOOD, &[("CDC_SOURCE__NOPE", "1")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("CDC_SOURCE__NOPE") && e.contains("unknown key"),
            "{e}"
        );
        let e = load(GOOD, &[("CDC_NAME__X", "1")]).unwrap_err().to_string();
        assert!(
            e.contains("CDC_NAME__X") && e.contains("not a table"),
            "{e}"
        );
    }

    #[test]
    fn secrets_never_in_debug() {
        let c = load(GOOD, &[("CDC_SOURCE__PASSWORD", "hunter2")]).unwrap();
        let d = format!("{c:?}");
        assert!(!d.contains("hunter2") && !d.contains("secret"), "{d}");
        assert!(d.contains("cdc:***@127.0.0.1"), "{d}");
    }

    #[test]
    fn validation() {
        let e = load(&GOOD.replace("\"inventory\"", "\"bad name!\""), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`name`"), "{e}");
        let e = load(
            &GOOD.replace("type = \"postgres\"", "type = \"mysql\""),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("`source.url`") && e.contains("does not match"),
            "{e}"
        );
        assert!(!e.contains("secret"), "{e}");
        let e = load(&GOOD.replace("\"public.orders\"", "\"orders\""), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`source.tables[0]`"), "{e}");
        let e = load("name = 'x'\n[source\n", &[]).unwrap_err().to_string();
        assert!(
            e.contains("not valid TOML") && e.contains("cdc.toml"),
            "{e}"
        );
    }

    #[test]
    fn log_section_keys_are_validated() {
        let c = load(
            &GOOD.replace(
                "partitions = 6",
                "partitions = 6\nsegment_bytes = 65536\nretention_ms = -1\ncleanup_policy = \"compact,delete\"\ncompression = \"zstd\"\nflush_interval_ms = 200\ndisk_budget_bytes = 1000000\ncleaner_dedupe_bytes = 2097152",
            ),
            &[],
        )
        .unwrap();
        let t = c.log.topic_config().unwrap();
        assert_eq!(t.segment_bytes, 65536);
        assert_eq!(t.retention_ms, None);
        assert_eq!(t.cleanup_policy, cdc_log::CleanupPolicy::COMPACT_DELETE);
        assert_eq!(t.compression, cdc_log::Compression::Zstd);
        assert_eq!(
            load(GOOD, &[])
                .unwrap()
                .log
                .topic_config()
                .unwrap()
                .compression,
            cdc_log::Compression::Lz4,
            "the default codec is lz4 (README, BENCHMARKS.md)"
        );
        assert_eq!(c.log.log_options().cleaner_dedupe_bytes, 2 << 20);
        assert_eq!(
            load(GOOD, &[])
                .unwrap()
                .log
                .log_options()
                .maintenance_interval,
            Some(std::time::Duration::from_secs(60)),
            "cdc run must run retention and compaction"
        );
        assert!(matches!(
            c.log.log_options().flush_policy,
            cdc_log::FlushPolicy::Threshold {
                bytes: None,
                interval: Some(_)
            }
        ));
        for (line, key) in [
            ("cleanup_policy = \"purge\"", "log.cleanup_policy"),
            ("compression = \"gzip\"", "log.compression"),
            ("segment_bytes = 10", "log.segment_bytes"),
            ("retention_ms = -5", "log.retention_ms"),
            ("retention_bytes = 0", "log.retention_bytes"),
            ("flush_bytes = 0", "log.flush_bytes"),
            ("cleaner_dedupe_bytes = 1000", "log.cleaner_dedupe_bytes"),
            ("maintenance_interval_ms = 5", "log.maintenance_interval_ms"),
        ] {
            let e = load(
                &GOOD.replace("partitions = 6", &format!("partitions = 6\n{line}")),
                &[],
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains(&format!("`{key}`")), "{line}: {e}");
        }
        let e = load(GOOD, &[("CDC_LOG__COMPRESSION", "brotli")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("CDC_LOG__COMPRESSION") && e.contains("`log.compression`"),
            "{e}"
        );
    }
}
