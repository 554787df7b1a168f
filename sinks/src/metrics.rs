//! A sink's figures on the admin `/metrics`, labelled `sink="<name>"`: changes applied,
//! records sent to the dead-letter topic, retries, and the lag in records and in
//! milliseconds (how old the oldest record waiting to be applied is; 0 when caught up).

use cdc_schemas::metrics::{Counter, Gauge, Metrics};

#[derive(Clone)]
pub struct SinkMetrics {
    pub applied: Counter,
    pub dead_letters: Counter,
    pub retries: Counter,
    pub commits: Counter,
    pub lag_records: Gauge,
    pub lag_ms: Gauge,
    /// 1 while delivering, 0 during a streak of failures.
    pub up: Gauge,
}

impl SinkMetrics {
    pub fn new(metrics: &Metrics, sink: &str) -> Self {
        let l = |name: &str| format!("{name}{{sink=\"{sink}\"}}");
        SinkMetrics {
            applied: metrics.counter(
                &l("cdc_sink_changes_applied_total"),
                "Row changes a sink applied to its target (durably)",
            ),
            dead_letters: metrics.counter(
                &l("cdc_sink_dead_letters_total"),
                "Records a sink sent to its dead-letter topic (refused by the target or undecodable)",
            ),
            retries: metrics.counter(
                &l("cdc_sink_retries_total"),
                "Transient failures a sink retried (target or log unavailable)",
            ),
            commits: metrics.counter(
                &l("cdc_sink_commits_total"),
                "Consumer-group offset commits of a sink",
            ),
            lag_records: metrics.gauge(
                &l("cdc_sink_lag_records"),
                "Records in the log a sink has not applied yet",
            ),
            lag_ms: metrics.gauge_scaled(
                &l("cdc_sink_lag_seconds"),
                "Age of the oldest record the sink has read and not yet applied (while records wait); 0 when caught up",
                1000,
            ),
            up: metrics.gauge(
                &l("cdc_sink_up"),
                "1 while the sink delivers, 0 during a streak of failures",
            ),
        }
    }
}
