//! The MySQL / MariaDB keys of `[source]` ([`MySqlSettings`]) and the resolved
//! configuration the source runs with ([`MySqlSourceConfig`]).
//!
//! Invariant: after [`DbSection::finish`] `server_id` is set (configured, or a stable
//! hash of the connector's name in `1_000_000..2^31`) and is not 0.

use std::time::Duration;

use serde::Deserialize;

use super::conn::MySqlEndpoint;
use super::decode::{DecodeOptions, ZeroDateMode};
use crate::config::{CommonSourceConfig, DbSection, KeyError, SnapshotMode, SourceSpec};
use crate::filter::TableFilter;
use crate::SourceError;

/// The keys of `[source]` only a MySQL / MariaDB source has.
#[derive(Debug, Clone, Deserialize)]
pub struct MySqlSettings {
    /// The replica `server_id` the binlog connection registers with. Default: derived
    /// from the connector's name (stable, in 1_000_000..2^31).
    #[serde(default)]
    pub server_id: Option<u32>,
    /// The server sends a heartbeat event after this long without binlog events; a read
    /// silent for three periods is a dead connection, and each heartbeat moves the
    /// stored position past transactions of tables that are not captured. Default 10000.
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_interval_ms: u64,
    /// Zero and invalid dates (`0000-00-00`, `2024-00-10`): `null` (Debezium's: NULL, or
    /// the epoch in a NOT NULL column) or `raw` (the same stand-in in the record, the
    /// server's text in a `cdc.unrepresentable.*` header). Default `null`.
    #[serde(default)]
    pub zero_dates: Option<String>,
    /// A DDL statement on a captured table that the source cannot follow: `false` (the
    /// default) stops with a definite error naming it; `true` logs a warning, counts it in
    /// `cdc_mysql_ddl_skipped_total` and goes on with the schema unchanged (Debezium's
    /// `schema.history.internal.skip.unparseable.ddl`).
    #[serde(default)]
    pub skip_unparseable_ddl: bool,
    /// How often the binlog retention watch compares the durable position with the
    /// oldest binlog the server still has (`cdc_mysql_binlog_*` on `/metrics`, an alarm
    /// when the margin is low); it also checks once on start. Default 60000.
    #[serde(default = "default_binlog_check_ms")]
    pub binlog_check_interval_ms: u64,
}

fn default_heartbeat_ms() -> u64 {
    10_000
}
fn default_binlog_check_ms() -> u64 {
    60_000
}

impl MySqlSettings {
    /// The replica `server_id` (resolved by `finish`).
    pub fn server_id(&self) -> u32 {
        self.server_id.unwrap_or_default()
    }
}

/// A stable hash of the connector's name as a replica `server_id`.
fn default_server_id(connector: &str) -> u32 {
    // FNV-1a: stable across releases and platforms, unlike std's hasher.
    let mut h: u32 = 0x811c_9dc5;
    for b in connector.bytes() {
        h = (h ^ b as u32).wrapping_mul(0x0100_0193);
    }
    1_000_000 + h % (i32::MAX as u32 - 1_000_000)
}

impl DbSection for MySqlSettings {
    fn finish(
        &mut self,
        connector_name: &str,
        common: &CommonSourceConfig,
    ) -> Result<(), KeyError> {
        if let Err(e) = MySqlEndpoint::from_url(common.url.expose(), common.password.as_ref()) {
            return Err((
                "source.url".into(),
                format!("{}. Fix: {}", e.message, e.fix),
            ));
        }
        if self.server_id == Some(0) {
            return Err((
                "source.server_id".into(),
                "0 is not a valid replica server_id: use 1 to 4294967295, different from every server's".into(),
            ));
        }
        if self.heartbeat_interval_ms < 100 {
            return Err((
                "source.heartbeat_interval_ms".into(),
                "use at least 100 (ms)".into(),
            ));
        }
        if self.binlog_check_interval_ms < 100 {
            return Err((
                "source.binlog_check_interval_ms".into(),
                "use at least 100 (ms)".into(),
            ));
        }
        if let Some(z) = &self.zero_dates {
            ZeroDateMode::parse(z).map_err(|e| ("source.zero_dates".to_string(), e.to_string()))?;
        }
        self.server_id
            .get_or_insert_with(|| default_server_id(connector_name));
        Ok(())
    }
}

/// Everything the running source needs, resolved from the configuration.
#[derive(Clone, Debug)]
pub struct MySqlSourceConfig {
    pub endpoint: MySqlEndpoint,
    /// The replica server id of the binlog connection.
    pub server_id: u32,
    pub filter: TableFilter,
    pub snapshot_mode: SnapshotMode,
    pub max_batch_events: usize,
    /// `[snapshot] connections`: readers sharing the snapshot.
    pub snapshot_connections: usize,
    /// `[snapshot] chunk_rows`: rows per primary-key range.
    pub snapshot_chunk_rows: u64,
    pub heartbeat_interval: Duration,
    /// How often the binlog retention watch checks (`source.binlog_check_interval_ms`).
    pub binlog_check_interval: Duration,
    /// `source.url` said `mariadb://`: records name the `mariadb` connector.
    pub mariadb_url: bool,
    /// How values are decoded (`source.zero_dates`), by the snapshot and the stream alike.
    pub decode: DecodeOptions,
    /// `source.skip_unparseable_ddl`.
    pub skip_unparseable_ddl: bool,
}

impl MySqlSourceConfig {
    /// Resolves the configuration of a MySQL / MariaDB source; an unusable URL is a
    /// definite error that says what to fix.
    pub fn from_spec(spec: &SourceSpec, my: &MySqlSettings) -> Result<Self, SourceError> {
        let common = &spec.source.common;
        let endpoint = MySqlEndpoint::from_url(common.url.expose(), common.password.as_ref())
            .map_err(|e| SourceError::definite("source.url", e.message, e.fix))?;
        Ok(MySqlSourceConfig {
            endpoint,
            server_id: my.server_id(),
            filter: common.filter(),
            snapshot_mode: spec.snapshot.snapshot_mode(),
            max_batch_events: common.max_batch_events.max(1),
            snapshot_connections: spec.snapshot.connections.max(1),
            snapshot_chunk_rows: spec.snapshot.chunk_rows.max(1),
            heartbeat_interval: Duration::from_millis(my.heartbeat_interval_ms.max(100)),
            binlog_check_interval: Duration::from_millis(my.binlog_check_interval_ms.max(100)),
            mariadb_url: common.url.expose().starts_with("mariadb://"),
            skip_unparseable_ddl: my.skip_unparseable_ddl,
            decode: DecodeOptions {
                // Checked by `finish`.
                zero_date: my
                    .zero_dates
                    .as_deref()
                    .and_then(|z| ZeroDateMode::parse(z).ok())
                    .unwrap_or_default(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_id_is_stable_and_in_range() {
        let a = default_server_id("inventory");
        assert_eq!(a, default_server_id("inventory"));
        assert_ne!(a, default_server_id("inventory2"));
        for n in ["a", "b", "x-y", "inventory"] {
            assert!((1_000_000..i32::MAX as u32).contains(&default_server_id(n)));
        }
    }
}
