//! The Postgres source's figures on the admin `/metrics`: the slot's retained WAL and
//! `wal_status`, and the newest LSN durable in the log.
//!
//! Registered once per source run in the [`Metrics`] the pipeline hands the source; the
//! slot monitor updates them on every poll (`source.slot_monitor_interval_ms`), the
//! acknowledgement path on every durable checkpoint.

use cdc_schemas::metrics::{Gauge, Metrics};

use super::source::SlotStatus;

/// The gauges of one Postgres source.
#[derive(Clone, Debug)]
pub struct PgMetrics {
    pub retained_wal_bytes: Gauge,
    pub wal_status_lost: Gauge,
    pub durable_lsn: Gauge,
}

impl PgMetrics {
    pub fn register(m: &Metrics, _slot: &str) -> PgMetrics {
        PgMetrics {
            retained_wal_bytes: m.gauge(
                "cdc_pg_slot_retained_wal_bytes",
                "WAL the replication slot retains (pg_current_wal_lsn() - restart_lsn)",
            ),
            wal_status_lost: m.gauge(
                "cdc_pg_slot_wal_status_lost",
                "1 when the slot's wal_status is lost",
            ),
            durable_lsn: m.gauge(
                "cdc_pg_durable_lsn",
                "the newest source position durable in the log (as a number)",
            ),
        }
    }

    /// Exports what the slot monitor read.
    pub fn observe(&self, s: &SlotStatus) {
        self.retained_wal_bytes
            .set(s.retained_wal_bytes.unwrap_or(0));
        self.wal_status_lost
            .set((s.wal_status.as_deref() == Some("lost")) as u64);
    }
}
