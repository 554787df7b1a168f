//! The connector's configuration: one TOML file, every key overridable from the
//! environment, validated before anything connects.
//!
//! Environment overrides: `CDC_` + the key path in upper case with `__` between levels,
//! e.g. `CDC_SOURCE__PASSWORD` sets `source.password`, `CDC_LOG__PARTITIONS` sets
//! `log.partitions`, `CDC_NAME` sets `name`, `CDC_ROUTING` the `[[routing]]` list (as a TOML
//! array of tables). A value is read as a TOML literal when it is one of the right type
//! (`12`, `true`, `["a", "b"]`), and as a plain string otherwise. Variables starting with
//! `CDC_` that have no `__` (other than `CDC_NAME`, `CDC_ROUTING`) are not configuration and
//! are ignored (`CDC_CONFIG`, `CDC_LOG_FORMAT`, ...). A removed key (`log.flush_bytes`, …)
//! is an error saying what replaced it.
//!
//! Invariants after [`Config::load`]: every key was known, every value had the right type,
//! required keys were present, and [`Config::validate`] passed. Secrets (`source.password`,
//! the password inside `source.url`) print as `***` in `Debug` output and never reach logs.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use cdc_schemas::encode::TopicRouter;
use cdc_sources::config::{SnapshotConfig, SourceConfig, SourceSpec};
use serde::Deserialize;

mod format;
mod log;
mod registry;

pub use format::{FormatConfig, RouteConfig};
pub use log::{LogConfig, LogKind};
pub use registry::{redact_userinfo, RegistryConfig};

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
    /// `[[routing]]`: topic routing rules, tried in order.
    pub routing: Vec<RouteConfig>,
    /// `[[sink]]`: sinks run inside `cdc run` (or alone, `cdc sink --sink NAME`); each
    /// section's keys belong to the sinks crate (common ones and the target's own).
    pub sinks: Vec<cdc_sinks::SinkSpec>,
    /// `shutdown_timeout_ms`: after SIGTERM / Ctrl-C, how long the connector may take to
    /// flush and store its final position before it exits anyway (nothing unacknowledged
    /// is lost: the next start reads it again). A second signal exits at once.
    pub shutdown_timeout: std::time::Duration,
}

fn default_shutdown_timeout_ms() -> u64 {
    30_000
}

/// The file as serde reads it: `[source]` stays a table for [`SourceConfig::from_table`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    name: String,
    #[serde(default = "default_shutdown_timeout_ms")]
    shutdown_timeout_ms: u64,
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
    /// `[[routing]]`: topic routing rules.
    #[serde(default)]
    routing: Vec<RouteConfig>,
    /// `[[sink]]`: read by [`cdc_sinks::SinkSpec::from_table`].
    #[serde(default)]
    sink: Vec<toml::Table>,
}

/// `[admin]`: health, readiness, metrics and the schema registry API.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// A bearer token every admin endpoint but `/healthz` and `/readyz` then requires
    /// (`Authorization: Bearer <token>`): status, metrics, the status page's data and
    /// the registry API. Secret (`CDC_ADMIN__TOKEN` from the environment).
    #[serde(default)]
    pub token: Option<cdc_sources::secret::Secret>,
    /// The token in a file (one trailing newline ignored); wins over `token`.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
}

impl AdminConfig {
    /// The admin token, read from `token_file` when set (validated at load).
    pub fn token(&self) -> Option<cdc_sources::secret::Secret> {
        match &self.token_file {
            Some(f) => read_token_file(f).ok(),
            None => self.token.clone().filter(|t| !t.expose().is_empty()),
        }
    }
}

fn read_token_file(f: &Path) -> Result<cdc_sources::secret::Secret, String> {
    let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
    let t = text.strip_suffix('\n').unwrap_or(&text);
    let t = t.strip_suffix('\r').unwrap_or(t);
    if t.is_empty() {
        return Err(format!("{} is empty", f.display()));
    }
    Ok(cdc_sources::secret::Secret::new(t))
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8083))
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: default_listen(),
            token: None,
            token_file: None,
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

/// The deepest key an environment override may name (`CDC_A__B__C__…`).
const MAX_ENV_KEY_DEPTH: usize = 8;

/// The environment variable prefix.
pub const ENV_PREFIX: &str = "CDC_";

/// Top-level keys settable from the environment (`CDC_NAME`, `CDC_ROUTING`); other
/// `CDC_*` variables without `__` are not configuration.
const TOP_LEVEL_ENV: &[&str] = &["NAME", "ROUTING"];

/// Keys that existed once and were removed, with what to use instead: a file that still
/// has one gets this rather than a bare "unknown key".
const REMOVED_KEYS: &[(&str, &str, &str)] = &[
    (
        "log",
        "flush_interval_ms",
        "removed: it never took effect. `cdc run` flushes the log only at transaction boundaries, with group commit: set source.group_commit_ms (flush once the oldest unflushed transaction waited this long, default 50) and source.group_commit_bytes (or after this many bytes, default 4194304); `cdc log produce` flushes every --flush-every records",
    ),
    (
        "log",
        "flush_bytes",
        "removed: it never took effect. `cdc run` flushes the log only at transaction boundaries, with group commit: set source.group_commit_bytes (flush once this many bytes were appended, default 4194304) and source.group_commit_ms (or once the oldest transaction waited this long, default 50); `cdc log produce` flushes every --flush-every records",
    ),
];

fn removed_key(table: &toml::Table) -> Option<(String, String)> {
    REMOVED_KEYS.iter().find_map(|(section, key, why)| {
        table
            .get(*section)
            .and_then(|s| s.as_table())
            .filter(|s| s.contains_key(*key))
            .map(|_| (format!("{section}.{key}"), why.to_string()))
    })
}

/// Every key the configuration knows, by section (`""`: the top level; `"routing"`: the
/// keys of a `[[routing]]` entry; `"source"`: the common keys and every database's), so
/// documentation can be checked against the parser.
pub fn known_keys() -> Vec<(&'static str, Vec<&'static str>)> {
    use cdc_sources::config::fields_of;
    vec![
        ("", fields_of::<RawConfig>().to_vec()),
        ("source", SourceConfig::known_keys()),
        ("log", fields_of::<LogConfig>().to_vec()),
        ("admin", fields_of::<AdminConfig>().to_vec()),
        ("registry", fields_of::<RegistryConfig>().to_vec()),
        ("format", fields_of::<FormatConfig>().to_vec()),
        ("snapshot", fields_of::<SnapshotConfig>().to_vec()),
        ("routing", fields_of::<RouteConfig>().to_vec()),
        ("sink", cdc_sinks::config::known_keys()),
    ]
}

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
            if !rest.contains("__") && !TOP_LEVEL_ENV.contains(&rest) {
                continue;
            }
            let key = rest.to_ascii_lowercase().replace("__", ".");
            // The configuration nests a few levels (`SINK__0__URL`); a key of thousands of
            // levels built as deep a table, and the recursion over it overflowed the stack
            // (found by the `config` fuzz target).
            let depth = key.split('.').count();
            if depth > MAX_ENV_KEY_DEPTH {
                return Err(ConfigError::Invalid {
                    origin: format!("environment variable {var}"),
                    key: key.chars().take(80).collect(),
                    message: format!("the name nests {depth} levels; configuration keys nest at most {MAX_ENV_KEY_DEPTH} (SECTION__KEY, SECTION__INDEX__KEY)"),
                });
            }
            let (value, as_string) = literal_or_string(&raw);
            set_path(&mut table, &key, value).map_err(|message| ConfigError::Invalid {
                origin: format!("environment variable {var}"),
                key: key.clone(),
                message,
            })?;
            from_env.insert(key, (var, raw, as_string));
        }
        if let Some((key, message)) = removed_key(&table) {
            return Err(ConfigError::Invalid {
                origin: origin_of(&key, &from_env, &file_origin),
                key,
                message,
            });
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
        if let Some(f) = &self.admin.token_file {
            read_token_file(f).map_err(|m| ("admin.token_file".to_string(), m))?;
        }
        if !self.admin.listen.ip().is_loopback() && self.admin.token().is_none() {
            tracing::warn!(listen = %self.admin.listen, "the admin address is not loopback and no admin token is set: anyone who reaches it can read the status and metrics and change the schema registry; set admin.token_file");
        }
        self.log.topic_config()?;
        if self.log.kind == LogKind::Kafka {
            if let Some(s) = self.sinks.iter().find(|s| s.retention_is_set()) {
                return Err((
                    format!("{}.retention", s.path),
                    "applies to the embedded log: with [log] type = \"kafka\" the cluster's topic retention decides what a lagging sink may miss (retention.ms, retention.bytes on the topics): remove it".into(),
                ));
            }
        }
        self.snapshot.validate()?;
        self.validate_pipeline()?;
        self.registry.validate()?;
        if self.log.disk_budget_bytes == Some(0) {
            return Err((
                "log.disk_budget_bytes".into(),
                "0 is not allowed: leave the key out to disable it".into(),
            ));
        }
        if let Some((i, t)) = self
            .topic_router()?
            .reserved_replacements()
            .into_iter()
            .next()
        {
            return Err((
                format!("routing[{i}].replacement"),
                format!("{t:?} is the connector's transaction topic: route tables elsewhere (a table routed there by a group reference keeps its own topic)"),
            ));
        }
        for (i, s) in self.sinks.iter().enumerate() {
            for (j, t) in self.sinks[..i].iter().enumerate() {
                if s.name() == t.name() {
                    return Err((
                        format!("sink[{i}].name"),
                        format!(
                            "{:?} is also the name of sink[{j}]: give every sink its own name",
                            s.name()
                        ),
                    ));
                }
                if s.group() == t.group() {
                    return Err((
                        format!("sink[{i}].group"),
                        format!("{:?} is also the group of sink[{j}]: two sinks in one group would each see only part of the records", s.group()),
                    ));
                }
            }
        }
        for (i, r) in self.routing.iter().enumerate() {
            if let Some(c) = r.replacement.chars().find(|c| {
                !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '$' | '{' | '}'))
            }) {
                return Err((
                    format!("routing[{i}].replacement"),
                    format!("{:?} has {c:?}: topic names are made of a-z A-Z 0-9 . _ - (and $1, ${{name}} refer to groups of the regex)", r.replacement),
                ));
            }
        }
        Ok(())
    }

    /// The topic router of `[[routing]]` (valid after [`Config::validate`]); an error
    /// names `routing[i].regex` or `routing[i].replacement`.
    pub fn topic_router(&self) -> Result<TopicRouter, (String, String)> {
        let rules: Vec<(&str, &str)> = self
            .routing
            .iter()
            .map(|r| (r.regex.as_str(), r.replacement.as_str()))
            .collect();
        TopicRouter::new(&self.name, &rules).map_err(|e| {
            let (part, fix) = if e.in_replacement {
                ("replacement", "refer only to groups of the regex: $1, ${1} or ${name} of (?<name>…)")
            } else {
                ("regex", "write a regex (Rust `regex` syntax, as Java's without look-around) that matches whole topic names such as \"<name>.<schema>.<table>\"")
            };
            (
                format!("routing[{}].{part}", e.index),
                format!("{:?}: {}; {fix}", e.pattern, e.reason),
            )
        })
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
        if let Some(m) = &f.time_precision_mode {
            one_of(
                "format.time_precision_mode",
                m,
                &["adaptive", "adaptive_time_microseconds", "connect"],
            )?;
        }
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
        one_of(
            "format.bigint_unsigned_handling_mode",
            &f.bigint_unsigned_handling_mode,
            &["long", "precise"],
        )?;
        one_of(
            "format.unrepresentable_handling_mode",
            &f.unrepresentable_handling_mode,
            &["header", "fail"],
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
    let sinks = raw
        .sink
        .iter()
        .enumerate()
        .map(|(i, t)| cdc_sinks::SinkSpec::from_table(t, &raw.name, i))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Config {
        sinks,
        shutdown_timeout: std::time::Duration::from_millis(raw.shutdown_timeout_ms.max(1)),
        name: raw.name,
        source,
        log: raw.log,
        admin: raw.admin,
        registry: raw.registry,
        format: raw.format,
        snapshot: raw.snapshot,
        routing: raw.routing,
    })
}

fn deserialize_raw(table: toml::Table) -> Result<RawConfig, (String, String)> {
    cdc_sources::config::deserialize_keyed(toml::Value::Table(table), "")
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

    /// Found by the `config` fuzz target: an override nesting thousands of levels
    /// overflowed the stack (a segmentation fault) instead of being refused.
    #[test]
    fn an_environment_key_nesting_too_deep_is_refused() {
        let var = format!("CDC_SOURCE__{}Y", "X__".repeat(5000));
        let e = load(GOOD, &[(var.as_str(), "1")]).unwrap_err().to_string();
        assert!(e.contains("nests 5002 levels"), "{e}");
        // The real keys still work.
        load(GOOD, &[("CDC_LOG__PARTITIONS", "3")]).unwrap();
    }

    #[test]
    fn registry_section() {
        let c = load(GOOD, &[]).unwrap();
        assert!(c.registry.url.is_none() && c.registry.remote_options().is_none());
        assert_eq!(
            c.registry.compatibility_level(),
            cdc_schemas::compat::CompatibilityLevel::Backward
        );
        let c = load(
            &format!("{GOOD}[registry]\ncompatibility = \"full_transitive\"\n"),
            &[],
        )
        .unwrap();
        assert_eq!(
            c.registry.compatibility_level(),
            cdc_schemas::compat::CompatibilityLevel::FullTransitive
        );
        let text = format!(
            "{GOOD}[registry]\nurl = \"https://sr.example:8081\"\nusername = \"cdc\"\npassword = \"hunter2\"\nca_file = \"/etc/cdc/ca.pem\"\ntimeout_ms = 2500\n"
        );
        let c = load(&text, &[("CDC_REGISTRY__PASSWORD", "from-env")]).unwrap();
        let o = c.registry.remote_options().unwrap();
        assert_eq!(o.url, "https://sr.example:8081");
        assert_eq!(o.username.as_deref(), Some("cdc"));
        assert_eq!(o.password.as_deref(), Some("from-env"));
        assert_eq!(o.bearer_token, None);
        assert_eq!(
            o.ca_file.as_deref(),
            Some(std::path::Path::new("/etc/cdc/ca.pem"))
        );
        assert_eq!(o.timeout, std::time::Duration::from_millis(2500));
        // A level with a remote registry would be ignored: an error naming the key.
        let e = load(
            &format!("{GOOD}[registry]\nurl = \"http://sr:8081\"\ncompatibility = \"NONE\"\n"),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("`registry.compatibility`") && e.contains("remote"),
            "{e}"
        );
        // Remote-only keys without a URL would be ignored too.
        for line in [
            "username = \"u\"\npassword = \"p\"",
            "bearer_token = \"t\"",
            "ca_file = \"/ca.pem\"",
            "timeout_ms = 100",
        ] {
            let key = line.split(' ').next().unwrap();
            let e = load(&format!("{GOOD}[registry]\n{line}\n"), &[])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("`registry.{key}`")) && e.contains("registry.url"),
                "{line}: {e}"
            );
        }
        // Credentials belong in their keys, and never show in the message.
        let e = load(
            &format!("{GOOD}[registry]\nurl = \"https://u:hunter2@sr:8081/x\"\n"),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("`registry.url`")
                && e.contains("registry.username")
                && !e.contains("hunter2"),
            "{e}"
        );
        assert_eq!(redact_userinfo("http://a:b@h:1/p@q"), "http://***@h:1/p@q");
        assert_eq!(redact_userinfo("http://h:1/p@q"), "http://h:1/p@q");
        let dbg = format!("{:?} {:?}", c.registry, o);
        assert!(
            !dbg.contains("from-env") && !dbg.contains("hunter2"),
            "{dbg}"
        );
        let c = load(
            &format!("{GOOD}[registry]\nurl = \"http://sr:8081\"\nbearer_token = \"tok\"\n"),
            &[],
        )
        .unwrap();
        let o = c.registry.remote_options().unwrap();
        assert_eq!(
            (o.bearer_token.as_deref(), o.username.as_deref()),
            (Some("tok"), None)
        );
        assert!(!format!("{:?}", c.registry).contains("tok\""));
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
    fn admin_token_from_env_or_file_never_printed() {
        let c = load(GOOD, &[("CDC_ADMIN__TOKEN", "tok-env")]).unwrap();
        assert_eq!(c.admin.token().unwrap().expose(), "tok-env");
        assert!(!format!("{:?}", c.admin).contains("tok-env"));
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t");
        std::fs::write(&f, "tok-file\n").unwrap();
        let text = format!("{GOOD}token_file = {:?}\n", f.display().to_string());
        let c = load(&text, &[]).unwrap();
        assert_eq!(c.admin.token().unwrap().expose(), "tok-file");
        std::fs::write(&f, "").unwrap();
        let e = load(&text, &[]).unwrap_err().to_string();
        assert!(
            e.contains("admin.token_file") && e.contains("is empty"),
            "{e}"
        );
        let e = load(&format!("{GOOD}token_file = \"/nonexistent/t\"\n"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("admin.token_file"), "{e}");
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
                "partitions = 6\nsegment_bytes = 65536\nretention_ms = -1\ncleanup_policy = \"compact,delete\"\ncompression = \"zstd\"\ndisk_budget_bytes = 1000000\ncleaner_dedupe_bytes = 2097152",
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
        assert_eq!(c.log.log_options().disk_budget_bytes, Some(1000000));
        for (line, key) in [
            ("cleanup_policy = \"purge\"", "log.cleanup_policy"),
            ("compression = \"gzip\"", "log.compression"),
            ("segment_bytes = 10", "log.segment_bytes"),
            ("retention_ms = -5", "log.retention_ms"),
            ("retention_bytes = 0", "log.retention_bytes"),
            ("disk_budget_bytes = 0", "log.disk_budget_bytes"),
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

    #[test]
    fn removed_flush_keys_point_at_group_commit() {
        for key in ["flush_interval_ms", "flush_bytes"] {
            let e = load(
                &GOOD.replace("partitions = 6", &format!("partitions = 6\n{key} = 1000")),
                &[],
            )
            .unwrap_err()
            .to_string();
            assert!(
                e.contains(&format!("`log.{key}`"))
                    && e.contains("removed")
                    && e.contains("source.group_commit_ms")
                    && e.contains("source.group_commit_bytes"),
                "{e}"
            );
            let var = format!("CDC_LOG__{}", key.to_ascii_uppercase());
            let e = load(GOOD, &[(&var, "5")]).unwrap_err().to_string();
            assert!(
                e.contains(&format!("environment variable {var}")) && e.contains("removed"),
                "{e}"
            );
        }
    }

    #[test]
    fn routing_rules_reach_the_router_and_are_validated() {
        let text = format!(
            "{GOOD}[[routing]]\nregex = 'inventory\\.public\\.orders_(\\d+)'\nreplacement = 'inventory.orders'\n[[routing]]\nregex = '(?<p>[^.]+)\\.public\\.(.*)'\nreplacement = '${{p}}.$2'\n"
        );
        let c = load(&text, &[]).unwrap();
        let r = c.topic_router().unwrap();
        let id = cdc_schemas::TableId::new;
        assert_eq!(r.topic_for(&id("public", "orders_7")), "inventory.orders");
        assert_eq!(r.topic_for(&id("public", "items")), "inventory.items");
        assert_eq!(r.topic_for(&id("sales", "x")), "inventory.sales.x");
        for (rule, key) in [
            ("regex = 'a('\nreplacement = 'b'", "routing[0].regex"),
            (
                "regex = 'a(.*)'\nreplacement = 'b$2'",
                "routing[0].replacement",
            ),
            ("regex = 'a'", "routing[0].replacement"),
            (
                "regex = 'a'\nreplacement = 'b'\ntopic = 'c'",
                "routing[0].topic",
            ),
            (
                "regex = 'inventory\\.public\\.t'\nreplacement = 'inventory.transaction'",
                "routing[0].replacement",
            ),
        ] {
            let e = load(&format!("{GOOD}[[routing]]\n{rule}\n"), &[])
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("`{key}`")), "{rule}: {e}");
        }
        // From the environment, as a TOML array of tables.
        let c = load(
            GOOD,
            &[(
                "CDC_ROUTING",
                r#"[{regex = 'inventory\.public\.(.*)', replacement = 'x.$1'}]"#,
            )],
        )
        .unwrap();
        assert_eq!(
            c.topic_router().unwrap().topic_for(&id("public", "t")),
            "x.t"
        );
        let e = load(
            GOOD,
            &[("CDC_ROUTING", r#"[{regex = '(', replacement = 'x'}]"#)],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("environment variable CDC_ROUTING") && e.contains("`routing[0].regex`"),
            "{e}"
        );
    }

    #[test]
    fn message_key_columns_are_validated() {
        let c = load(
            &GOOD.replace(
                "tables = [",
                "message_key_columns = [\"public.events:id,kind\"]\ntables = [",
            ),
            &[],
        )
        .unwrap();
        let k = c.source.common.key_columns();
        assert_eq!(
            k.for_table(&cdc_schemas::TableId::new("public", "events"))
                .unwrap()
                .columns,
            ["id", "kind"]
        );
        let e = load(
            GOOD,
            &[("CDC_SOURCE__MESSAGE_KEY_COLUMNS", r#"["events:id"]"#)],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("CDC_SOURCE__MESSAGE_KEY_COLUMNS")
                && e.contains("`source.message_key_columns[0]`"),
            "{e}"
        );
    }
}
