//! [`RetentionWatch`]: runs [`inspect`] and [`margin`] on a spare connection, owns the
//! `cdc_mysql_binlog_*` gauges ([`RetentionMetrics`]) and logs once when the margin
//! falls below its threshold and once when it recovers.
//!
//! Invariants: a file's close time learned from the rotations it tracks is the earlier
//! check's (the conservative end); a file's creation time is probed once, not at every
//! check.

use std::collections::BTreeMap;

use cdc_schemas::metrics::{Gauge, Metrics};
use cdc_schemas::MySqlPosition;
use mysql_async::Conn;

use super::inspect::{file_created_at, inspect};
use super::margin::{file_len, margin, Expiry, Margin};
use super::{RetentionError, ServerBinlogs};

/// The `cdc_mysql_binlog_*` gauges.
#[derive(Clone, Debug)]
pub struct RetentionMetrics {
    pub margin_seconds: Gauge,
    pub margin_known: Gauge,
    pub margin_alarm: Gauge,
    pub purged: Gauge,
    pub files_retained: Gauge,
    pub retained_bytes: Gauge,
    pub behind_files: Gauge,
    pub behind_bytes: Gauge,
    pub expire_seconds: Gauge,
}

impl RetentionMetrics {
    pub fn register(m: &Metrics) -> RetentionMetrics {
        RetentionMetrics {
            margin_seconds: m.gauge(
                "cdc_mysql_binlog_margin_seconds",
                "seconds at the earliest until the server may purge the binlog file holding the source's position (valid when cdc_mysql_binlog_margin_known is 1)",
            ),
            margin_known: m.gauge(
                "cdc_mysql_binlog_margin_known",
                "1 when cdc_mysql_binlog_margin_seconds is a figure; 0 when the server never expires binlogs or the file's age is not known yet",
            ),
            margin_alarm: m.gauge(
                "cdc_mysql_binlog_margin_alarm",
                "1 while the margin is below the alarm threshold (the smaller of one hour and 10% of the retention), or the position was purged",
            ),
            purged: m.gauge(
                "cdc_mysql_binlog_purged",
                "1 when the server purged the binlog at the source's position",
            ),
            files_retained: m.gauge(
                "cdc_mysql_binlog_files_retained",
                "binlog files the server still has (SHOW BINARY LOGS)",
            ),
            retained_bytes: m.gauge(
                "cdc_mysql_binlog_retained_bytes",
                "bytes of binlog the server still has",
            ),
            behind_files: m.gauge(
                "cdc_mysql_binlog_behind_files",
                "binlog files at or after the source's position (its own included)",
            ),
            behind_bytes: m.gauge(
                "cdc_mysql_binlog_behind_bytes",
                "binlog bytes from the source's position to the server's current position",
            ),
            expire_seconds: m.gauge(
                "cdc_mysql_binlog_expire_seconds",
                "the server's binlog expiry (binlog_expire_logs_seconds / expire_logs_days), 0 when it never expires them",
            ),
        }
    }
}

/// Watches the binlog retention for one source.
///
/// The source calls [`RetentionWatch::check`] once on start and then every minute, on a
/// spare connection (not the binlog stream's, which is busy in a dump). A check is a
/// handful of short statements (see [`inspect`]) and updates the gauges; it logs one
/// `warn` when the margin falls below [`RetentionWatch::threshold_seconds`] (or the
/// position is purged) and one `info` when it recovers, not one per check. A purged
/// position is reported in the returned [`Margin`]; raising the definite error
/// ([`PurgedDetail`](super::PurgedDetail)) is the source's call.
///
/// It also tracks rotations between checks: that is how it learns when a file was closed,
/// hence when it may expire (see the module doc). Checking more often than every minute
/// tightens that estimate; checking less often only makes it more conservative.
#[derive(Debug)]
pub struct RetentionWatch {
    pub metrics: RetentionMetrics,
    /// The time alarm's threshold: the smaller of one hour and 10 % of the server's
    /// retention, recomputed at every check; None when the server never expires binlogs
    /// (no time alarm then).
    pub threshold_seconds: Option<u64>,
    /// The current file and the server time at the previous check.
    last_current: Option<(String, i64)>,
    /// Files seen closing: name → server time of the last check at which it was still
    /// the current file (it was closed after that).
    closed_after: BTreeMap<String, i64>,
    pub(super) alarmed: bool,
    /// The last file whose creation time was read (or tried) by [`file_created_at`].
    probed: Option<String>,
}

impl RetentionWatch {
    pub fn new(metrics: &Metrics) -> RetentionWatch {
        RetentionWatch {
            metrics: RetentionMetrics::register(metrics),
            threshold_seconds: None,
            last_current: None,
            closed_after: BTreeMap::new(),
            alarmed: false,
            probed: None,
        }
    }

    /// The alarm threshold for a retention period.
    pub fn threshold_for(expire_seconds: Option<u64>) -> Option<u64> {
        expire_seconds.map(|e| (e / 10).min(3600))
    }

    /// Reads the server, places `pos` against it, updates the gauges and logs on a
    /// crossing. See the type's doc.
    pub async fn check(
        &mut self,
        conn: &mut Conn,
        pos: &MySqlPosition,
    ) -> Result<Margin, RetentionError> {
        let mut server = inspect(conn).await?;
        self.track(&mut server);
        self.learn_age(conn, &mut server, pos).await;
        let m = margin(&server, pos);
        self.observe(&server, pos, &m);
        Ok(m)
    }

    /// Records rotations since the previous check and fills in `closed_after`.
    pub fn track(&mut self, server: &mut ServerBinlogs) {
        if let Some((prev, t)) = self.last_current.take() {
            if prev != server.current_file {
                // Every file from the previous current one up to (not including) the new
                // current one was closed after the previous check.
                let mut closing = false;
                for f in &server.files {
                    if f.name == prev {
                        closing = true;
                    }
                    if f.name == server.current_file {
                        break;
                    }
                    if closing {
                        self.closed_after.entry(f.name.clone()).or_insert(t);
                    }
                }
            }
        }
        self.closed_after
            .retain(|name, _| server.files.iter().any(|f| &f.name == name));
        for f in &mut server.files {
            if let Some(&t) = self.closed_after.get(&f.name) {
                f.closed_after = Some(t);
            }
        }
        self.last_current = Some((server.current_file.clone(), server.now));
    }

    /// When the file holding `pos` is closed and its close time unknown (it closed before
    /// the watch started), reads its successor's creation time once ([`file_created_at`]).
    /// A failure leaves the age unknown; that successor is not probed again (a dump per
    /// check would cost more than the estimate is worth), so its age stays unknown until
    /// the file holding `pos` changes.
    async fn learn_age(&mut self, conn: &Conn, server: &mut ServerBinlogs, pos: &MySqlPosition) {
        if server.retention.expire_seconds.is_none() {
            return;
        }
        let Some(i) = server.files.iter().position(|f| f.name == pos.file) else {
            return;
        };
        if server.files[i].closed_after.is_some() || i + 1 >= server.files.len() {
            return;
        }
        let next = server.files[i + 1].name.clone();
        if self.probed.as_deref() == Some(next.as_str()) {
            return; // tried and failed: not every minute
        }
        self.probed = Some(next.clone());
        match file_created_at(conn, &next).await {
            Ok(t) => {
                // One second off: the timestamp has whole seconds, the mtime is finer.
                let t = t - 1;
                self.closed_after.insert(pos.file.clone(), t);
                server.files[i].closed_after = Some(t);
            }
            Err(e) => {
                tracing::debug!(file = %next, error = %e, "cannot read the binlog file's creation time")
            }
        }
    }

    pub(super) fn observe(&mut self, server: &ServerBinlogs, pos: &MySqlPosition, m: &Margin) {
        let g = &self.metrics;
        self.threshold_seconds = Self::threshold_for(server.retention.expire_seconds);
        g.files_retained.set(server.files.len() as u64);
        g.retained_bytes
            .set(server.files.iter().map(|f| file_len(server, f)).sum());
        g.behind_files.set(m.files_ahead as u64);
        g.behind_bytes.set(m.bytes_ahead);
        g.expire_seconds
            .set(server.retention.expire_seconds.unwrap_or(0));
        g.purged.set(m.purged.is_some() as u64);
        match m.expires_in {
            Expiry::In(s) => {
                g.margin_seconds.set(s);
                g.margin_known.set(1);
            }
            Expiry::Never | Expiry::Unknown => {
                g.margin_seconds.set(0);
                g.margin_known.set(0);
            }
        }
        let low = match (m.expires_in, self.threshold_seconds) {
            _ if m.purged.is_some() => true,
            (Expiry::In(s), Some(t)) => s < t,
            _ => false,
        };
        g.margin_alarm.set(low as u64);
        if low && !self.alarmed {
            match &m.purged {
                Some(p) => {
                    tracing::warn!(error = %p, "binlog retention: the source's position was purged")
                }
                None => tracing::warn!(
                    file = %pos.file,
                    margin_seconds = %m.expires_in,
                    threshold_seconds = ?self.threshold_seconds,
                    expire_seconds = ?server.retention.expire_seconds,
                    behind_bytes = m.bytes_ahead,
                    "binlog retention: the server may purge the binlog file holding the source's position soon; the source must catch up, or raise binlog_expire_logs_seconds / expire_logs_days"
                ),
            }
        } else if !low && self.alarmed {
            tracing::info!(
                file = %pos.file,
                margin_seconds = %m.expires_in,
                "binlog retention: the margin is back above the threshold"
            );
        }
        self.alarmed = low;
        tracing::debug!(
            file = %pos.file,
            pos = pos.pos,
            files_ahead = m.files_ahead,
            bytes_ahead = m.bytes_ahead,
            files_before = m.files_before,
            margin_seconds = %m.expires_in,
            "binlog retention checked"
        );
    }
}
