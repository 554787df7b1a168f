//! The Postgres keys of `[source]` ([`PgSettings`]) and the resolved configuration the
//! source runs with ([`PgSourceConfig`]).
//!
//! Invariants: after [`DbSection::finish`] the slot and publication names are set (default
//! `cdc_<name>`, lower-cased, non-alphanumerics as `_`, at most 63 bytes) and valid
//! Postgres identifiers, `toast` is one of its values and `max_retained_wal` is a size.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::conn::PgEndpoint;
use crate::config::{
    parse_byte_size, CommonSourceConfig, DbSection, KeyError, SnapshotMode, SourceSpec,
};
use crate::filter::TableFilter;
use crate::SourceError;

/// The keys of `[source]` only a Postgres source has.
#[derive(Debug, Clone, Deserialize)]
pub struct PgSettings {
    /// Replication slot name. Default: `cdc_<name>`.
    #[serde(default)]
    pub slot: Option<String>,
    /// Publication name. Default: `cdc_<name>`.
    #[serde(default)]
    pub publication: Option<String>,
    /// Emit `pg_logical_emit_message(false, 'cdc_heartbeat', '')` this often so a quiet
    /// database's slot keeps moving; 0 disables. Default 10000.
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_interval_ms: u64,
    /// How often a standby status update (the durable flush position) is sent to the
    /// server; Debezium's `status.update.interval.ms`. Also sent whenever the server asks.
    /// Default 10000; at most a third of the server's `wal_sender_timeout` is used.
    #[serde(default = "default_status_interval_ms")]
    pub status_interval_ms: u64,
    /// Retained WAL of the slot above which an alarm is logged ("1GB", or bytes; 0 or
    /// "off" disables it). Default [`DEFAULT_MAX_RETAINED_WAL`].
    #[serde(default)]
    pub max_retained_wal: Option<toml::Value>,
    /// How often the slot's retained WAL and wal_status are polled. Default 10000.
    #[serde(default = "default_slot_monitor_ms")]
    pub slot_monitor_interval_ms: u64,
    /// Unchanged TOASTed values: "placeholder" (default: Debezium's
    /// `__debezium_unavailable_value`) or "reselect" (read the current value by key).
    #[serde(default = "default_toast")]
    pub toast: String,
    /// Have the server send large transactions while they are still open (pgoutput
    /// `streaming`, Postgres 14+); they are spilled to `spill_dir` until they commit.
    #[serde(default = "default_true")]
    pub streaming: bool,
    /// Where open streamed transactions are spilled. Default `<log.dir>/spill`.
    #[serde(default)]
    pub spill_dir: Option<PathBuf>,
}

/// The retained-WAL alarm's default threshold: 1 GiB. A connector that keeps up retains
/// about one status interval of WAL (10 s by default), far below this; Postgres' own
/// default `max_wal_size` is 1 GB, and servers that bound slots (`max_slot_wal_keep_size`)
/// set it to several, often tens of, gigabytes: so the alarm comes early enough for an
/// operator to act (free disk for the log, fix a stalled sink) before the server
/// invalidates the slot or runs out of disk itself.
pub const DEFAULT_MAX_RETAINED_WAL: u64 = 1 << 30;

fn default_heartbeat_ms() -> u64 {
    10_000
}
fn default_status_interval_ms() -> u64 {
    10_000
}
fn default_slot_monitor_ms() -> u64 {
    10_000
}
fn default_toast() -> String {
    "placeholder".into()
}
fn default_true() -> bool {
    true
}

impl PgSettings {
    /// `max_retained_wal` in bytes; `None`: the alarm is off (valid after `finish`).
    pub fn max_retained_wal_bytes(&self) -> Option<u64> {
        self.max_retained_wal_setting().ok().flatten()
    }

    /// `Err`: not a size. `Ok(None)`: off (0 or "off"); unset: the default.
    fn max_retained_wal_setting(&self) -> Result<Option<u64>, ()> {
        match &self.max_retained_wal {
            None => Ok(Some(DEFAULT_MAX_RETAINED_WAL)),
            Some(toml::Value::Integer(0)) => Ok(None),
            Some(toml::Value::Integer(n)) if *n > 0 => Ok(Some(*n as u64)),
            Some(toml::Value::String(s)) if s.trim().eq_ignore_ascii_case("off") => Ok(None),
            Some(toml::Value::String(s)) => match parse_byte_size(s) {
                Some(0) => Ok(None),
                Some(n) => Ok(Some(n)),
                None => Err(()),
            },
            Some(_) => Err(()),
        }
    }

    /// The replication slot name (resolved by `finish`).
    pub fn slot(&self) -> &str {
        self.slot.as_deref().unwrap_or_default()
    }

    /// The publication name (resolved by `finish`).
    pub fn publication(&self) -> &str {
        self.publication.as_deref().unwrap_or_default()
    }
}

/// `cdc_<name>` as a Postgres identifier.
fn default_name(connector: &str) -> String {
    let mut out: String = format!("cdc_{connector}")
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

impl DbSection for PgSettings {
    fn finish(
        &mut self,
        connector_name: &str,
        common: &CommonSourceConfig,
    ) -> Result<(), KeyError> {
        if let Err(e) = PgEndpoint::from_url(common.url.expose(), common.password.as_ref()) {
            return Err((
                "source.url".into(),
                format!("{}. Fix: {}", e.message, e.fix),
            ));
        }
        for (key, v) in [
            ("source.slot", &mut self.slot),
            ("source.publication", &mut self.publication),
        ] {
            let name = v.get_or_insert_with(|| default_name(connector_name));
            if name.is_empty()
                || name.len() > 63
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                return Err((
                    key.into(),
                    format!("{name:?}: Postgres allows 1 to 63 characters of a-z, 0-9 and '_'"),
                ));
            }
        }
        if !["placeholder", "reselect"].contains(&self.toast.as_str()) {
            return Err((
                "source.toast".into(),
                format!("{:?}: use one of placeholder, reselect", self.toast),
            ));
        }
        if self.max_retained_wal_setting().is_err() {
            return Err((
                "source.max_retained_wal".into(),
                "use a number of bytes or a size like \"512MB\" or \"1GB\" (0 or \"off\" disables the alarm)".into(),
            ));
        }
        Ok(())
    }
}

/// Everything the running source needs, resolved from the configuration.
#[derive(Clone, Debug)]
pub struct PgSourceConfig {
    pub endpoint: PgEndpoint,
    pub slot: String,
    pub publication: String,
    pub filter: TableFilter,
    pub snapshot_mode: SnapshotMode,
    pub snapshot_connections: usize,
    pub snapshot_chunk_pages: u64,
    pub max_batch_events: usize,
    /// `None`: no heartbeats.
    pub heartbeat_interval: Option<Duration>,
    pub slot_monitor_interval: Duration,
    pub max_retained_wal: Option<u64>,
    pub status_interval: Duration,
    /// Ask the server to stream large transactions while they are open (protocol 2+,
    /// Postgres 14+); they are spilled to `spill_dir` until they commit.
    pub streaming: bool,
    pub spill_dir: PathBuf,
    /// Re-select unchanged TOASTed values of updates by key (`source.toast = "reselect"`).
    pub toast_reselect: bool,
}

impl PgSourceConfig {
    /// Resolves the configuration of a Postgres source; an unusable URL is a definite
    /// error that says what to fix.
    pub fn from_spec(spec: &SourceSpec, pg: &PgSettings) -> Result<Self, SourceError> {
        let common = &spec.source.common;
        let endpoint = PgEndpoint::from_url(common.url.expose(), common.password.as_ref())
            .map_err(|e| SourceError::definite("source.url", e.message, e.fix))?;
        Ok(PgSourceConfig {
            endpoint,
            slot: pg.slot().to_string(),
            publication: pg.publication().to_string(),
            filter: common.filter(),
            snapshot_mode: spec.snapshot.snapshot_mode(),
            snapshot_connections: spec.snapshot.connections,
            snapshot_chunk_pages: spec.snapshot.chunk_pages,
            max_batch_events: common.max_batch_events,
            heartbeat_interval: (pg.heartbeat_interval_ms > 0)
                .then(|| Duration::from_millis(pg.heartbeat_interval_ms)),
            slot_monitor_interval: Duration::from_millis(pg.slot_monitor_interval_ms.max(100)),
            max_retained_wal: pg.max_retained_wal_bytes(),
            status_interval: Duration::from_millis(pg.status_interval_ms.max(50)),
            streaming: pg.streaming,
            spill_dir: pg
                .spill_dir
                .clone()
                .unwrap_or_else(|| spec.data_dir.join("spill")),
            toast_reselect: pg.toast == "reselect",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(line: &str) -> PgSettings {
        toml::from_str(line).unwrap()
    }

    #[test]
    fn max_retained_wal_defaults_on_and_can_be_turned_off() {
        assert_eq!(
            settings("").max_retained_wal_bytes(),
            Some(DEFAULT_MAX_RETAINED_WAL)
        );
        assert_eq!(
            settings("max_retained_wal = \"512MB\"").max_retained_wal_bytes(),
            Some(512 << 20)
        );
        assert_eq!(
            settings("max_retained_wal = 4096").max_retained_wal_bytes(),
            Some(4096)
        );
        for off in ["0", "\"off\"", "\"0\""] {
            let s = settings(&format!("max_retained_wal = {off}"));
            assert_eq!(s.max_retained_wal_bytes(), None, "{off}");
            assert!(s.max_retained_wal_setting().is_ok());
        }
        for bad in ["-5", "\"lots\"", "true"] {
            let s = settings(&format!("max_retained_wal = {bad}"));
            assert!(s.max_retained_wal_setting().is_err(), "{bad}");
        }
    }
}
