//! The `[source]` and `[snapshot]` sections of the connector's configuration.
//!
//! `[source]` is one flat TOML table, as users write it (`source.url`, `source.slot`,
//! `source.server_id`, …), but its keys belong to two owners: the keys every source has
//! ([`CommonSourceConfig`]: type, url, tables, batching) and the keys of the chosen
//! database (`postgres::config::PgSettings`, `mysql::config::MySqlSettings`, each in its
//! source's folder). [`SourceConfig::from_table`] reads the table twice, once per owner,
//! and refuses a key that neither knows: the error names the key, the keys that are
//! known, and, when the key belongs to the other database, says so.
//!
//! Invariants after [`SourceConfig::from_table`]: every key was known to the common part
//! or to the chosen database, values had the right types, defaults that derive from the
//! connector's name (slot, publication, replica `server_id`) are resolved, and each
//! part's `validate` passed. Errors are `(key path, message)`, the key path starting with
//! `source.` or `snapshot.`, so the connector can say where the value came from.

use std::path::PathBuf;

use serde::de::DeserializeOwned;

use crate::filter::TableFilter;
use crate::keys::MessageKeyColumns;
use crate::secret::{redact_url, Secret};
use crate::{mysql, postgres};

pub use cdc_schemas::config_keys::KeyError;

/// Which database the source is, from `source.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
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

/// A URL whose password never reaches `Debug` or `Display` output.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct SecretUrl(String);

impl SecretUrl {
    pub fn new(s: impl Into<String>) -> Self {
        SecretUrl(s.into())
    }
    /// The URL with its password, for connecting only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", redact_url(&self.0))
    }
}

impl std::fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

/// The keys of `[source]` that every source has.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct CommonSourceConfig {
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
    /// Largest number of events in one batch handed to the pipeline: bigger transactions
    /// go in several chunks. Default 4096.
    #[serde(default = "default_max_batch_events")]
    pub max_batch_events: usize,
    /// Group commit: with transactions queued, flush once this many bytes were appended…
    #[serde(default = "default_group_commit_bytes")]
    pub group_commit_bytes: u64,
    /// …or once the oldest unflushed transaction waited this long. Default 50.
    #[serde(default = "default_group_commit_ms")]
    pub group_commit_ms: u64,
    /// Memory for decoded changes queued between the source and the pipeline (estimated
    /// bytes of the events, not a count of batches). Default 8388608 (8 MiB).
    #[serde(default = "default_max_queued_bytes")]
    pub max_queued_bytes: u64,
    /// Record keys by configuration (Debezium's `message.key.columns`):
    /// `"schema.table:col1,col2"` entries, see [`crate::keys`].
    #[serde(default)]
    pub message_key_columns: Vec<String>,
}

fn default_max_batch_events() -> usize {
    4096
}
fn default_group_commit_bytes() -> u64 {
    4 << 20
}
fn default_group_commit_ms() -> u64 {
    50
}
fn default_max_queued_bytes() -> u64 {
    8 << 20
}

impl CommonSourceConfig {
    /// The include / exclude lists as a filter.
    pub fn filter(&self) -> TableFilter {
        TableFilter::new(&self.tables, &self.exclude_tables)
    }

    /// `message_key_columns`, parsed (valid after [`SourceConfig::from_table`]).
    pub fn key_columns(&self) -> MessageKeyColumns {
        MessageKeyColumns::parse(&self.message_key_columns).unwrap_or_default()
    }

    fn validate(&self) -> Result<(), KeyError> {
        let url = self.url.expose();
        let scheme_ok = match self.kind {
            SourceKind::Postgres => {
                url.starts_with("postgres://") || url.starts_with("postgresql://")
            }
            SourceKind::Mysql => url.starts_with("mysql://") || url.starts_with("mariadb://"),
        };
        if !scheme_ok {
            return Err((
                "source.url".into(),
                format!(
                    "{} does not match source.type = {:?}: write postgres://… for postgres, mysql://… for mysql",
                    self.url,
                    self.kind.as_str()
                ),
            ));
        }
        for (key, list) in [
            ("source.tables", &self.tables),
            ("source.exclude_tables", &self.exclude_tables),
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
        MessageKeyColumns::parse(&self.message_key_columns)?;
        if self.max_queued_bytes < 1024 {
            return Err((
                "source.max_queued_bytes".into(),
                "must be at least 1024".into(),
            ));
        }
        if self.max_batch_events == 0 {
            return Err((
                "source.max_batch_events".into(),
                "must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// The keys of `[source]` that only one database has.
#[derive(Debug, Clone)]
pub enum DbSettings {
    Postgres(postgres::config::PgSettings),
    Mysql(mysql::config::MySqlSettings),
}

/// The whole `[source]` section.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    pub common: CommonSourceConfig,
    pub db: DbSettings,
}

/// What a database's part of `[source]` provides to [`SourceConfig::from_table`].
pub(crate) trait DbSection: DeserializeOwned {
    /// Resolves the defaults derived from the connector's name and checks what types
    /// alone cannot.
    /// `common` has been read (not yet validated) from the same table.
    fn finish(&mut self, connector_name: &str, common: &CommonSourceConfig)
        -> Result<(), KeyError>;
}

impl SourceConfig {
    /// Reads the `[source]` table of a connector named `connector_name`.
    pub fn from_table(table: &toml::Table, connector_name: &str) -> Result<Self, KeyError> {
        let common: CommonSourceConfig = read_section(table)?;
        common.validate()?;
        let (db, db_fields) = match common.kind {
            SourceKind::Postgres => (
                DbSettings::Postgres(read_db(table, connector_name, &common)?),
                fields_of::<postgres::config::PgSettings>(),
            ),
            SourceKind::Mysql => (
                DbSettings::Mysql(read_db(table, connector_name, &common)?),
                fields_of::<mysql::config::MySqlSettings>(),
            ),
        };
        let common_fields = fields_of::<CommonSourceConfig>();
        for key in table.keys() {
            let k = key.as_str();
            if common_fields.contains(&k) || db_fields.contains(&k) {
                continue;
            }
            let other = match common.kind {
                SourceKind::Postgres => ("mysql", fields_of::<mysql::config::MySqlSettings>()),
                SourceKind::Mysql => ("postgres", fields_of::<postgres::config::PgSettings>()),
            };
            let why = if other.1.contains(&k) {
                format!(
                    "a {} key, but source.type = {:?}",
                    other.0,
                    common.kind.as_str()
                )
            } else {
                "unknown key".to_string()
            };
            let mut known: Vec<&str> = common_fields.iter().chain(db_fields).copied().collect();
            known.sort_unstable();
            return Err((
                format!("source.{key}"),
                format!("{why} (known keys: {})", known.join(", ")),
            ));
        }
        Ok(SourceConfig { common, db })
    }

    pub fn kind(&self) -> SourceKind {
        self.common.kind
    }

    /// Every key `[source]` may have, for any database.
    pub fn known_keys() -> Vec<&'static str> {
        let mut k: Vec<&'static str> = fields_of::<CommonSourceConfig>().to_vec();
        k.extend(fields_of::<postgres::config::PgSettings>());
        k.extend(fields_of::<mysql::config::MySqlSettings>());
        k
    }

    /// The URL with its password redacted, for messages.
    pub fn redacted_url(&self) -> String {
        self.common.url.to_string()
    }
}

fn read_db<T: DbSection>(
    table: &toml::Table,
    connector_name: &str,
    common: &CommonSourceConfig,
) -> Result<T, KeyError> {
    let mut s: T = read_section(table)?;
    s.finish(connector_name, common)?;
    Ok(s)
}

/// Deserializes one owner's keys of `[source]`, ignoring the other owner's; an error
/// names the key as `source.<path>`.
fn read_section<T: DeserializeOwned>(table: &toml::Table) -> Result<T, KeyError> {
    deserialize_keyed(toml::Value::Table(table.clone()), "source")
}

pub use cdc_schemas::config_keys::{deserialize_keyed, fields_of};

/// `[snapshot]`: the initial snapshot of the captured tables.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotConfig {
    /// "initial" (default) | "never" | "when_needed" | "initial_only".
    #[serde(default = "default_snapshot_mode")]
    pub mode: String,
    /// Connections reading tables in parallel, all sharing one consistent snapshot.
    #[serde(default = "default_snapshot_connections")]
    pub connections: usize,
    /// Postgres: table pages (8 KiB) per chunk: tables are read in ctid page ranges.
    #[serde(default = "default_chunk_pages")]
    pub chunk_pages: u64,
    /// MySQL / MariaDB: rows per chunk: tables are read in primary-key ranges.
    #[serde(default = "default_chunk_rows")]
    pub chunk_rows: u64,
}

fn default_snapshot_mode() -> String {
    "initial".into()
}
fn default_snapshot_connections() -> usize {
    2
}
fn default_chunk_pages() -> u64 {
    2048
}
fn default_chunk_rows() -> u64 {
    100_000
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        SnapshotConfig {
            mode: default_snapshot_mode(),
            connections: default_snapshot_connections(),
            chunk_pages: default_chunk_pages(),
            chunk_rows: default_chunk_rows(),
        }
    }
}

/// `snapshot.mode`, as Debezium names its modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotMode {
    /// Snapshot when there is no stored position, then stream.
    Initial,
    /// Never snapshot: stream from the slot's / binlog's current position.
    Never,
    /// Like `Initial`, and also snapshot again when the stored position can no longer be
    /// streamed from (slot lost, binlog purged).
    WhenNeeded,
    /// Snapshot, then stop; nothing is left behind that retains WAL or binlog.
    InitialOnly,
}

impl SnapshotMode {
    pub fn parse(s: &str) -> Option<SnapshotMode> {
        Some(match s {
            "initial" => SnapshotMode::Initial,
            "never" => SnapshotMode::Never,
            "when_needed" => SnapshotMode::WhenNeeded,
            "initial_only" => SnapshotMode::InitialOnly,
            _ => return None,
        })
    }
}

impl SnapshotConfig {
    /// `mode` as a value (valid after [`SnapshotConfig::validate`]).
    pub fn snapshot_mode(&self) -> SnapshotMode {
        SnapshotMode::parse(&self.mode).unwrap_or(SnapshotMode::Initial)
    }

    pub fn validate(&self) -> Result<(), KeyError> {
        if SnapshotMode::parse(&self.mode).is_none() {
            return Err((
                "snapshot.mode".into(),
                format!(
                    "{:?}: use one of initial, never, when_needed, initial_only",
                    self.mode
                ),
            ));
        }
        if !(1..=64).contains(&self.connections) {
            return Err(("snapshot.connections".into(), "use 1 to 64".into()));
        }
        if self.chunk_pages == 0 {
            return Err(("snapshot.chunk_pages".into(), "must be at least 1".into()));
        }
        if self.chunk_rows == 0 {
            return Err(("snapshot.chunk_rows".into(), "must be at least 1".into()));
        }
        Ok(())
    }
}

/// Everything a source is built from: its sections and the connector around it.
#[derive(Debug, Clone)]
pub struct SourceSpec {
    /// The connector's name (topic prefix; seeds default slot / server_id names).
    pub name: String,
    pub source: SourceConfig,
    pub snapshot: SnapshotConfig,
    /// The connector's data directory (`[log] dir`): where a source keeps files of its own
    /// (the Postgres spill) unless configured otherwise.
    pub data_dir: PathBuf,
}

/// Parses a byte size: a number of bytes, or a number with a unit (`"512MB"`, `"1GB"`,
/// `"64KiB"`; decimal and binary units are both 1024-based, as Postgres does).
pub fn parse_byte_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let end = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let n: f64 = s[..end].parse().ok()?;
    let mult: u64 = match s[end..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return None,
    };
    Some((n * mult as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        text.parse().unwrap()
    }

    #[test]
    fn fields_are_introspected() {
        let f = fields_of::<CommonSourceConfig>();
        assert!(f.contains(&"type") && f.contains(&"url") && f.contains(&"max_queued_bytes"));
        assert!(fields_of::<postgres::config::PgSettings>().contains(&"slot"));
        assert!(fields_of::<mysql::config::MySqlSettings>().contains(&"server_id"));
    }

    #[test]
    fn keys_of_the_other_database_are_named_as_such() {
        let e = SourceConfig::from_table(
            &table("type = \"mysql\"\nurl = \"mysql://u@h/d\"\nslot = \"x\""),
            "n",
        )
        .unwrap_err();
        assert_eq!(e.0, "source.slot");
        assert!(e.1.contains("a postgres key"), "{}", e.1);
        let e = SourceConfig::from_table(
            &table("type = \"postgres\"\nurl = \"postgres://u@h/d\"\nbogus = 1"),
            "n",
        )
        .unwrap_err();
        assert_eq!(e.0, "source.bogus");
        assert!(e.1.starts_with("unknown key (known keys: "), "{}", e.1);
        assert!(e.1.contains("publication"), "{}", e.1);
    }

    #[test]
    fn defaults_derive_from_the_name() {
        let c = SourceConfig::from_table(
            &table("type = \"postgres\"\nurl = \"postgres://u@h/d\""),
            "Inv-1",
        )
        .unwrap();
        let DbSettings::Postgres(pg) = &c.db else {
            panic!("postgres")
        };
        assert_eq!(pg.slot.as_deref(), Some("cdc_inv_1"));
        assert_eq!(pg.publication.as_deref(), Some("cdc_inv_1"));
        let c = SourceConfig::from_table(
            &table("type = \"mariadb\"\nurl = \"mysql://u@h/d\""),
            "inventory",
        )
        .unwrap();
        let DbSettings::Mysql(my) = &c.db else {
            panic!("mysql")
        };
        let id = my.server_id.unwrap();
        assert!((1_000_000..i32::MAX as u32).contains(&id));
    }

    #[test]
    fn wrong_types_and_missing_keys_name_the_key() {
        let e = SourceConfig::from_table(
            &table(
                "type = \"postgres\"\nurl = \"postgres://u@h/d\"\nheartbeat_interval_ms = \"x\"",
            ),
            "n",
        )
        .unwrap_err();
        assert_eq!(e.0, "source.heartbeat_interval_ms");
        let e = SourceConfig::from_table(&table("type = \"postgres\""), "n").unwrap_err();
        assert_eq!(e, ("source.url".into(), "is required but missing".into()));
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_byte_size("512MB"), Some(512 << 20));
        assert_eq!(parse_byte_size("1GB"), Some(1 << 30));
        assert_eq!(parse_byte_size("100"), Some(100));
        assert_eq!(parse_byte_size("1 kib"), Some(1024));
        assert_eq!(parse_byte_size("12 parsecs"), None);
    }
}
