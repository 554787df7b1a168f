//! The MySQL / MariaDB source's figures on the admin `/metrics`: where in the binlog the
//! stream is (file number and offset), how far behind the server's clock the last event
//! was, how many binlog events and snapshot rows were read, how many DDL statements were
//! skipped.
//!
//! Registered once per source run in the [`Metrics`] the pipeline hands the source; the
//! stream sets them as it reads (plain atomic stores, no locks on the hot path).

use cdc_schemas::metrics::{Counter, Gauge, Metrics};

use super::history::file_number;

/// The gauges of one MySQL / MariaDB source.
#[derive(Clone, Debug)]
pub struct MyMetrics {
    /// The numeric suffix of the binlog file being read (`binlog.000042` → 42).
    pub binlog_file: Gauge,
    /// The offset in that file after the last event read.
    pub binlog_pos: Gauge,
    /// Seconds between the last event's timestamp and now (0 when idle and caught up).
    pub seconds_behind: Gauge,
    pub events_read: Counter,
    pub snapshot_rows: Counter,
    /// DDL statements on captured tables skipped (`source.skip_unparseable_ddl`).
    pub ddl_skipped: Counter,
}

impl MyMetrics {
    pub fn register(m: &Metrics) -> MyMetrics {
        MyMetrics {
            binlog_file: m.gauge(
                "cdc_mysql_binlog_file_number",
                "the numeric suffix of the binlog file the stream reads",
            ),
            binlog_pos: m.gauge(
                "cdc_mysql_binlog_position",
                "the offset in the binlog file after the last event read",
            ),
            seconds_behind: m.gauge(
                "cdc_mysql_seconds_behind_source",
                "seconds between the last binlog event's timestamp and now",
            ),
            events_read: m.counter("cdc_mysql_binlog_events_read", "binlog events read"),
            snapshot_rows: m.counter("cdc_mysql_snapshot_rows", "rows read by snapshots"),
            ddl_skipped: m.counter(
                "cdc_mysql_ddl_skipped_total",
                "DDL statements on captured tables that could not be followed and were skipped (source.skip_unparseable_ddl)",
            ),
        }
    }

    /// Records the stream's place: `file` and the offset after the last event.
    pub fn position(&self, file: &str, pos: u64) {
        self.binlog_file.set(file_number(file).unwrap_or(0));
        self.binlog_pos.set(pos);
    }
}
