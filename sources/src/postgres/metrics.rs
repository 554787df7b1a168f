//! The Postgres source's figures on the admin `/metrics` (the slot's retained WAL and
//! `wal_status`, the newest LSN durable in the log) and the slot monitor that reads them.
//!
//! Registered once per source run in the [`Metrics`] the pipeline hands the source; the
//! monitor updates them on every poll (`source.slot_monitor_interval_ms`). The monitor
//! also emits the heartbeats (`source.heartbeat_interval_ms`) on the same connection:
//! both exist to keep the slot's retained WAL bounded, and a crossing of
//! `source.max_retained_wal` is an alarm, a lost slot a definite error.

use cdc_schemas::metrics::{Gauge, Metrics};

use cdc_schemas::Lsn;
use std::time::Duration;

use tokio::sync::mpsc;

use super::config::PgSourceConfig;
use super::source::{definite, HEARTBEAT_PREFIX};
use super::stream_task::durable_lsn;
use crate::SourceError;

/// What the slot monitor last saw.
#[derive(Clone, Debug, Default)]
pub struct SlotStatus {
    pub retained_wal_bytes: Option<u64>,
    pub wal_status: Option<String>,
    pub confirmed_flush_lsn: Option<Lsn>,
    /// The slot exists and a walsender holds it.
    pub active: bool,
    /// Above `source.max_retained_wal` at the last poll (the alarm fires once per crossing).
    pub over_limit: bool,
}

/// The gauges of one Postgres source.
#[derive(Clone, Debug)]
pub struct PgMetrics {
    pub retained_wal_bytes: Gauge,
    pub wal_status_lost: Gauge,
    pub durable_lsn: Gauge,
    /// 1 while the retained WAL is above `source.max_retained_wal` (the alarm).
    pub retained_wal_alarm: Gauge,
    /// 1 while the slot exists and a walsender holds it.
    pub active: Gauge,
}

impl PgMetrics {
    pub fn register(m: &Metrics) -> PgMetrics {
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
            retained_wal_alarm: m.gauge(
                "cdc_pg_slot_retained_wal_alarm",
                "1 while the slot retains more WAL than source.max_retained_wal",
            ),
            active: m.gauge(
                "cdc_pg_slot_active",
                "1 while the replication slot exists and a walsender streams from it",
            ),
        }
    }

    /// Exports what the slot monitor read.
    pub fn observe(&self, s: &SlotStatus) {
        self.retained_wal_bytes
            .set(s.retained_wal_bytes.unwrap_or(0));
        self.wal_status_lost
            .set((s.wal_status.as_deref() == Some("lost")) as u64);
        self.retained_wal_alarm.set(s.over_limit as u64);
        self.active.set(s.active as u64);
    }
}

/// Heartbeats and slot monitoring, on a connection of their own.
pub(super) async fn monitor(
    cfg: PgSourceConfig,
    metrics: PgMetrics,
    durable: crate::Durable,
    alarm: mpsc::Sender<SourceError>,
) {
    let mut client = None;
    let mut hb = tokio::time::interval(cfg.heartbeat_interval.unwrap_or(Duration::from_secs(3600)));
    let mut mon = tokio::time::interval(cfg.slot_monitor_interval.max(Duration::from_millis(100)));
    hb.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    mon.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut s = SlotStatus::default();
    let mut warned_lost = false;
    loop {
        let heartbeat = tokio::select! {
            _ = hb.tick() => true,
            _ = mon.tick() => false,
        };
        if client.is_none() {
            match cfg.endpoint.connect().await {
                Ok(c) => client = Some(c),
                Err(e) => {
                    tracing::debug!(error = %e, "slot monitor cannot connect");
                    continue;
                }
            }
        }
        let Some(c) = client.as_ref() else { continue };
        if heartbeat {
            if cfg.heartbeat_interval.is_none() {
                continue;
            }
            if let Err(e) = c
                .execute(
                    "SELECT pg_logical_emit_message(false, $1, '')",
                    &[&HEARTBEAT_PREFIX],
                )
                .await
            {
                tracing::debug!(error = %e, "heartbeat failed");
                if e.is_closed() {
                    client = None;
                }
            }
            continue;
        }
        let row = c
            .query_opt(
                "SELECT (pg_current_wal_lsn() - restart_lsn)::int8, to_jsonb(s)->>'wal_status', confirmed_flush_lsn::text, active
                 FROM pg_replication_slots s WHERE slot_name = $1",
                &[&cfg.slot],
            )
            .await;
        let row = match row {
            Ok(Some(r)) => r,
            Ok(None) => {
                s.active = false;
                metrics.observe(&s);
                continue;
            }
            Err(e) => {
                tracing::debug!(error = %e, "slot monitor query failed");
                if e.is_closed() {
                    client = None;
                }
                continue;
            }
        };
        let retained: Option<i64> = row.get(0);
        let wal_status: Option<String> = row.get(1);
        let confirmed: Option<String> = row.get(2);
        s.active = row.get(3);
        let retained = retained.map(|r| r.max(0) as u64);
        {
            s.retained_wal_bytes = retained;
            s.wal_status = wal_status.clone();
            s.confirmed_flush_lsn = confirmed.and_then(|c| c.parse().ok());
            if let Some(lsn) = durable.position_with(durable_lsn) {
                metrics.durable_lsn.set(lsn.0);
            }
            tracing::debug!(slot = %cfg.slot, retained_wal_bytes = ?retained, wal_status = ?wal_status, "slot status");
            if let (Some(limit), Some(r)) = (cfg.max_retained_wal, retained) {
                if r > limit && !s.over_limit {
                    s.over_limit = true;
                    tracing::warn!(slot = %cfg.slot, retained_wal_bytes = r, max_retained_wal = limit, "ALARM: the replication slot retains more WAL than source.max_retained_wal; is the connector keeping up (pipeline, disk)?");
                } else if r <= limit && s.over_limit {
                    s.over_limit = false;
                    tracing::info!(slot = %cfg.slot, retained_wal_bytes = r, "retained WAL is back under source.max_retained_wal");
                }
            }
            metrics.observe(&s);
        }
        if wal_status.as_deref() == Some("lost") && !warned_lost {
            warned_lost = true;
            // Said here at once: the stream may not notice for a while (a pipeline
            // waiting for disk does not read it), and the alarm below waits for it.
            tracing::error!(slot = %cfg.slot, "the replication slot was invalidated (wal_status = lost): the server removed WAL it still needed (max_slot_wal_keep_size); changes since the slot's last confirmed position are gone from the server");
            let _ = alarm
                .send(definite(
                    format!("replication slot {:?}", cfg.slot),
                    "the slot was invalidated (wal_status = lost): the server removed WAL it still needed",
                    "set snapshot.mode = \"when_needed\" and restart to take a new snapshot, or start over with an empty log dir; raise max_slot_wal_keep_size to prevent it",
                ))
                .await;
        }
    }
}
