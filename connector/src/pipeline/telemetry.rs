//! What the pipeline tells operators: its figures on `/metrics` and its place in `/status`.
//!
//! On `/metrics`:
//! - `cdc_source_changes_total{table}`: changes (snapshot rows included) received from the
//!   source, per table;
//! - `cdc_records_total{topic}` and `cdc_record_bytes_total{topic}` (encoded, before
//!   compression): records appended to the log, per topic;
//! - `cdc_transactions_total`: source transactions whose commit was appended;
//! - `cdc_commit_to_durable_seconds` (histogram): per streamed transaction, from its commit
//!   in the database to the flush that made it durable in the log. For Postgres the commit
//!   time is the server's commit timestamp; the binlog's timestamps are whole seconds, so
//!   for MySQL / MariaDB it is when the pipeline received the transaction (the part the
//!   connector adds);
//! - `cdc_replication_lag_seconds`: now minus the commit time of the oldest transaction
//!   received and not yet durable; with none waiting, the commit-to-durable time of the
//!   newest durable one (so a connector catching up shows how far behind it reads, and an
//!   idle one shows its last latency, not the time since the last write).
//! - `cdc_last_durable_timestamp_seconds`: when the last flush happened (Unix time);
//!   `cdc_last_durable_commit_timestamp_seconds`: the database commit time of the newest
//!   durable streamed transaction (`time() -` it is "seconds behind source" as Debezium
//!   reports it, which also grows while the database is idle).
//!
//! Invariants: counters are looked up once per run of events of one table and once per
//! appended piece, never per record; the commit times waiting for a flush are a queue in
//! commit order, bounded by what the pipeline holds unflushed.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cdc_schemas::metrics::{Counter, Histogram, Metrics};
use cdc_schemas::{ChangeEvent, Checkpoint, SnapshotMarker, SourcePosition, TableSchema};

use crate::status::{PipelineLag, Status};

/// Figures shared by every attempt of one `cdc run` (registered once).
#[derive(Clone)]
pub struct Telemetry {
    metrics: Metrics,
    status: Status,
    transactions: Counter,
    latency: Histogram,
}

impl Telemetry {
    pub fn new(metrics: &Metrics, status: &Status) -> Telemetry {
        {
            let status = status.clone();
            metrics.collector(move |out| render(status.lag(), out));
        }
        Telemetry {
            metrics: metrics.clone(),
            status: status.clone(),
            transactions: metrics.counter(
                "cdc_transactions_total",
                "Source transactions whose commit was appended to the log",
            ),
            latency: metrics.histogram(
                "cdc_commit_to_durable_seconds",
                "Per streamed transaction: from its commit in the database (Postgres; for MySQL/MariaDB, from its arrival in the pipeline) to the flush that made it durable in the log",
            ),
        }
    }

    /// A fresh per-attempt recorder (its queue starts empty).
    pub fn recorder(&self) -> Recorder {
        self.lag().oldest_waiting_us.store(0, Ordering::Relaxed);
        Recorder {
            t: self.clone(),
            changes: HashMap::new(),
            records: HashMap::new(),
            waiting: VecDeque::new(),
            appended: 0,
        }
    }

    fn lag(&self) -> &PipelineLag {
        self.status.lag()
    }
}

/// One attempt's view: counter handles by table and topic, the commits waiting.
pub struct Recorder {
    t: Telemetry,
    changes: HashMap<String, Counter>,
    records: HashMap<String, (Counter, Counter)>,
    /// Commit times (µs; `None`: a snapshot checkpoint) of the transactions received and
    /// not yet durable, in commit order.
    waiting: VecDeque<Option<i64>>,
    /// How many at the front of `waiting` are appended (pending the next flush).
    appended: usize,
}

impl Recorder {
    /// Counts a batch's changes per table; returns the commit time to hand to
    /// [`Recorder::received`] when the batch ends a streamed transaction.
    pub fn count_changes(&mut self, events: &[ChangeEvent]) {
        let mut last: Option<(&Arc<TableSchema>, u64)> = None;
        for e in events {
            let Some(t) = e.table.as_ref() else { continue };
            match &mut last {
                Some((l, n)) if Arc::ptr_eq(l, t) => *n += 1,
                _ => {
                    if let Some((l, n)) = last.take() {
                        self.change_counter(l).add(n);
                    }
                    last = Some((t, 1));
                }
            }
        }
        if let Some((l, n)) = last {
            self.change_counter(l).add(n);
        }
    }

    fn change_counter(&mut self, t: &TableSchema) -> &Counter {
        let name = t.id.to_string();
        let metrics = &self.t.metrics;
        self.changes.entry(name).or_insert_with_key(|name| {
            metrics.counter(
                &format!("cdc_source_changes_total{{table=\"{}\"}}", escape(name)),
                "Changes received from the source (snapshot rows included), per table",
            )
        })
    }

    /// A batch with `commit` was received: its commit time joins the queue.
    pub fn received(&mut self, events: &[ChangeEvent], commit: &Option<Checkpoint>, now_ns: i64) {
        if commit.is_none() {
            return;
        }
        let streamed = events
            .last()
            .filter(|e| e.snapshot == SnapshotMarker::False && e.table.is_some());
        let at = streamed.map(|e| match e.position {
            SourcePosition::Postgres(_) => (e.source_ts_ms * 1000).min(now_ns / 1000),
            SourcePosition::Mysql(_) => now_ns / 1000,
        });
        if self.waiting.is_empty() {
            self.t
                .lag()
                .oldest_waiting_us
                .store(at.unwrap_or(0), Ordering::Relaxed);
        }
        self.waiting.push_back(at);
    }

    /// `records` of `bytes` were appended to `topic`.
    pub fn appended(&mut self, topic: &str, records: u64, bytes: u64) {
        let (r, b) = match self.records.get(topic) {
            Some(c) => c,
            None => {
                let t = escape(topic);
                let c = (
                    self.t.metrics.counter(
                        &format!("cdc_records_total{{topic=\"{t}\"}}"),
                        "Records appended to the log, per topic",
                    ),
                    self.t.metrics.counter(
                        &format!("cdc_record_bytes_total{{topic=\"{t}\"}}"),
                        "Encoded bytes (before compression) appended to the log, per topic",
                    ),
                );
                self.records.entry(topic.to_string()).or_insert(c)
            }
        };
        r.add(records);
        b.add(bytes);
    }

    /// The commit of the next received transaction was appended (it is pending).
    pub fn committed(&mut self) {
        self.t.transactions.inc();
        self.appended = (self.appended + 1).min(self.waiting.len());
    }

    /// The pending commits are durable at `pos`.
    pub fn durable(&mut self, pos: &Checkpoint) {
        let now = now_us();
        for at in self.waiting.drain(..self.appended).flatten() {
            let us = (now - at).max(0);
            self.t.latency.observe_micros(us as u64);
            self.t.lag().last_latency_us.store(us, Ordering::Relaxed);
            self.t
                .lag()
                .last_durable_commit_us
                .fetch_max(at, Ordering::Relaxed);
        }
        self.appended = 0;
        let oldest = self.waiting.front().copied().flatten().unwrap_or(0);
        let lag = self.t.lag();
        lag.oldest_waiting_us.store(oldest, Ordering::Relaxed);
        lag.last_durable_at_us.store(now, Ordering::Relaxed);
        self.t.status.set_durable(pos);
    }
}

fn render(s: &PipelineLag, out: &mut String) {
    let now = now_us();
    let _ = writeln!(
        out,
        "# HELP cdc_replication_lag_seconds Now minus the commit time of the oldest transaction received and not yet durable; with none waiting, the commit-to-durable time of the newest durable one\n# TYPE cdc_replication_lag_seconds gauge\ncdc_replication_lag_seconds {}",
        s.lag_us(now) as f64 / 1e6
    );
    let commit = s.last_durable_commit_us.load(Ordering::Relaxed);
    if commit > 0 {
        let _ = writeln!(
            out,
            "# HELP cdc_last_durable_commit_timestamp_seconds Commit time (in the database) of the newest streamed transaction durable in the log (Unix time); time() minus it is the lag Debezium calls MilliSecondsBehindSource\n# TYPE cdc_last_durable_commit_timestamp_seconds gauge\ncdc_last_durable_commit_timestamp_seconds {}",
            commit as f64 / 1e6
        );
    }
    let at = s.last_durable_at_us.load(Ordering::Relaxed);
    if at > 0 {
        let _ = writeln!(
            out,
            "# HELP cdc_last_durable_timestamp_seconds When the last flush made a source position durable (Unix time)\n# TYPE cdc_last_durable_timestamp_seconds gauge\ncdc_last_durable_timestamp_seconds {}",
            at as f64 / 1e6
        );
    }
}

/// A label value as Prometheus' text format wants it.
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}
