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
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use cdc_sources::secret::redact_url;
use cdc_sources::Secret;
use serde::Deserialize;

/// The whole configuration.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The connector's name: topic prefix, default slot and publication names, MySQL
    /// `server_id` seed.
    pub name: String,
    pub source: SourceConfig,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub admin: AdminConfig,
}

/// Which database kind the source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Postgres,
    /// MySQL and MariaDB.
    #[serde(alias = "mariadb")]
    Mysql,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Postgres => "postgres",
            SourceKind::Mysql => "mysql",
        }
    }
}

/// `[source]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    #[serde(rename = "type")]
    pub kind: SourceKind,
    /// `postgres://user:pass@host:port/db?sslmode=…` or `mysql://user:pass@host:port/db`.
    pub url: SecretUrl,
    /// Overrides the URL's password (so the URL can live in the file and the password in
    /// the environment: `CDC_SOURCE__PASSWORD`).
    #[serde(default)]
    pub password: Option<Secret>,
    /// Tables to capture, `schema.table` (MySQL: `database.table`); `*` and `?` match any
    /// run of characters / one character. Empty: every table the user can see, except
    /// the system schemas.
    #[serde(default)]
    pub tables: Vec<String>,
    /// Tables to leave out, same patterns; wins over `tables`.
    #[serde(default)]
    pub exclude_tables: Vec<String>,
    /// Postgres replication slot name. Default: `cdc_<name>`.
    #[serde(default)]
    pub slot: Option<String>,
    /// Postgres publication name. Default: `cdc_<name>`.
    #[serde(default)]
    pub publication: Option<String>,
    /// MySQL replica `server_id`. Default: derived from `name` (stable, in 1_000_000..2^31).
    #[serde(default)]
    pub server_id: Option<u32>,
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
        }
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

/// A connection URL that may hold a password: `Debug` and `Display` mask it.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct SecretUrl(String);

impl SecretUrl {
    pub fn new(s: impl Into<String>) -> Self {
        SecretUrl(s.into())
    }

    /// The URL with its password, for the driver only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", redact_url(&self.0))
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(&self.0))
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
        let scheme_ok = match self.source.kind {
            SourceKind::Postgres => {
                self.source.url.0.starts_with("postgres://")
                    || self.source.url.0.starts_with("postgresql://")
            }
            SourceKind::Mysql => {
                self.source.url.0.starts_with("mysql://")
                    || self.source.url.0.starts_with("mariadb://")
            }
        };
        if !scheme_ok {
            return Err((
                "source.url".into(),
                format!(
                    "{} does not match source.type = {:?}: write postgres://… for postgres, mysql://… for mysql",
                    self.source.url,
                    self.source.kind.as_str()
                ),
            ));
        }
        for (key, list) in [
            ("source.tables", &self.source.tables),
            ("source.exclude_tables", &self.source.exclude_tables),
        ] {
            for (i, t) in list.iter().enumerate() {
                if t.matches('.').count() != 1 || t.starts_with('.') || t.ends_with('.') {
                    return Err((
                        format!("{key}[{i}]"),
                        format!("{t:?} is not a table pattern: write schema.table (MySQL: database.table); * and ? are wildcards"),
                    ));
                }
            }
        }
        for (key, v) in [
            ("source.slot", &self.source.slot),
            ("source.publication", &self.source.publication),
        ] {
            if let Some(v) = v {
                if v.is_empty()
                    || v.len() > 63
                    || !v
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                {
                    return Err((
                        key.into(),
                        format!("{v:?}: Postgres allows 1 to 63 characters of a-z, 0-9 and '_'"),
                    ));
                }
            }
        }
        if self.source.server_id == Some(0) {
            return Err(("source.server_id".into(), "0 is not a valid replica server_id: use 1 to 4294967295, different from every server's".into()));
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
        Ok(())
    }

    /// The replication slot name (Postgres).
    pub fn slot_name(&self) -> String {
        self.source
            .slot
            .clone()
            .unwrap_or_else(|| sanitize_pg_name(&format!("cdc_{}", self.name)))
    }

    /// The publication name (Postgres).
    pub fn publication_name(&self) -> String {
        self.source
            .publication
            .clone()
            .unwrap_or_else(|| sanitize_pg_name(&format!("cdc_{}", self.name)))
    }

    /// The replica `server_id` (MySQL): configured, or a stable hash of the name.
    pub fn server_id(&self) -> u32 {
        self.source.server_id.unwrap_or_else(|| {
            // FNV-1a: stable across releases and platforms, unlike std's hasher.
            let mut h: u32 = 0x811c_9dc5;
            for b in self.name.bytes() {
                h = (h ^ b as u32).wrapping_mul(0x0100_0193);
            }
            1_000_000 + h % (i32::MAX as u32 - 1_000_000)
        })
    }
}

fn sanitize_pg_name(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    out.truncate(63);
    out
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
    let de = toml::Value::Table(table);
    serde_path_to_error::deserialize::<_, Config>(de).map_err(|e| {
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
        assert_eq!(c.source.kind, SourceKind::Postgres);
        assert_eq!(c.log.partitions, 6);
        assert_eq!(c.source.tables.len(), 2);
        assert_eq!(c.slot_name(), "cdc_inventory");
        assert_eq!(c.admin.listen.port(), 8083);
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
            c.source.password.unwrap().expose(),
            "12345",
            "numeric-looking secret stays a string"
        );
        assert_eq!(c.name, "other");
        assert_eq!(c.source.tables, vec!["public.x"]);
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
    fn server_id_is_stable_and_in_range() {
        let c = load(GOOD, &[]).unwrap();
        let id = c.server_id();
        assert!((1_000_000..i32::MAX as u32).contains(&id));
        assert_eq!(id, load(GOOD, &[]).unwrap().server_id());
    }
}
