//! Where the connector stands: `GET /status` on the admin address, the status page at `/`,
//! and `cdc status --config FILE` (a table, or `--json`).
//!
//! [`Status`] is what a running process knows and nothing else does: its state (running,
//! waiting for disk), the last durable position and when it became durable, the lag, the
//! sinks' live figures, the last error of each kind, restarts, uptime. [`collect`] adds
//! what anyone can read: the database's view of the position (the slot, the binlogs), the
//! log's topics and sizes, the consumer groups' lag, the disk budget. `/status` answers
//! the whole document; `cdc status` asks a running connector first (`[admin] listen`) and
//! builds the same document from the files and the database when none answers
//! (`"running": false`).
//!
//! Invariants: no document carries a secret or a row value (positions, names, counts,
//! error messages, which are written not to hold values); building one never blocks the
//! data path (each part has its own bounded wait, and a part that fails says so in its
//! `"error"` instead of failing the whole).

pub mod cmd;
pub mod collect;
pub mod text;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use cdc_schemas::Checkpoint;
use cdc_sinks::metrics::SinkMetrics;
use cdc_sources::SnapshotProgress;
use serde_json::{json, Value};

use crate::config::Config;

/// The page at `/`: no external assets, refreshes itself from `/status`.
pub const PAGE: &str = include_str!("page.html");

/// What the running process knows. Cheap to clone.
#[derive(Clone)]
pub struct Status {
    inner: Arc<Inner>,
}

struct Inner {
    started: Instant,
    started_unix_ms: i64,
    disk_wait: Mutex<Option<(String, Instant)>>,
    /// Per sink: its figures and, once it stopped on a definite error, that error.
    sinks: Mutex<BTreeMap<String, SinkEntry>>,
    durable: Mutex<Option<(Checkpoint, i64)>>,
    /// Kind (`source.transient`, `pipeline.definite`, `sink.<name>`…) → the last one.
    errors: Mutex<BTreeMap<String, LastError>>,
    restarts: AtomicU64,
    /// The configuration `collect` reads the database and the log with (`cdc run`).
    config: OnceLock<Arc<Config>>,
    snapshot: OnceLock<Arc<SnapshotProgress>>,
    lag: PipelineLag,
    /// The parts [`collect`] read from the database and the log, and when: reused for
    /// [`PARTS_TTL`], so that pages and scrapers polling `/status` cost the database at
    /// most one short connection per interval.
    parts: Mutex<Option<(Instant, collect::Parts)>>,
}

/// How long the database's and the log's answers are reused by `/status`.
pub const PARTS_TTL: std::time::Duration = std::time::Duration::from_secs(1);

/// A sink's figures and, once it stopped on a definite error, that error.
type SinkEntry = (SinkMetrics, Option<String>);

struct LastError {
    message: String,
    at_unix_ms: i64,
    count: u64,
}

/// The pipeline's lag, as [`crate::pipeline::telemetry`] keeps it.
#[derive(Default)]
pub struct PipelineLag {
    /// Commit time (µs since the epoch) of the oldest transaction waiting; 0: none.
    pub oldest_waiting_us: AtomicI64,
    /// Commit-to-durable of the newest durable transaction (µs).
    pub last_latency_us: AtomicI64,
    /// When the last flush made a position durable (µs since the epoch); 0: never.
    pub last_durable_at_us: AtomicI64,
    /// The commit time of the newest durable streamed transaction (µs); 0: none yet.
    pub last_durable_commit_us: AtomicI64,
}

impl PipelineLag {
    /// Now minus the commit time of the oldest transaction waiting; with none waiting, the
    /// commit-to-durable time of the newest durable one (µs).
    pub fn lag_us(&self, now_us: i64) -> i64 {
        match self.oldest_waiting_us.load(Ordering::Relaxed) {
            0 => self.last_latency_us.load(Ordering::Relaxed),
            at => (now_us - at).max(0),
        }
    }
}

impl Default for Status {
    fn default() -> Self {
        Status {
            inner: Arc::new(Inner {
                started: Instant::now(),
                started_unix_ms: now_ms(),
                disk_wait: Mutex::new(None),
                sinks: Mutex::new(BTreeMap::new()),
                durable: Mutex::new(None),
                errors: Mutex::new(BTreeMap::new()),
                restarts: AtomicU64::new(0),
                config: OnceLock::new(),
                snapshot: OnceLock::new(),
                parts: Mutex::new(None),
                lag: PipelineLag::default(),
            }),
        }
    }
}

impl std::fmt::Debug for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Status")
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Status {
    /// `/status` also reports the source, the log and the groups of `config`.
    pub fn set_config(&self, config: Arc<Config>) {
        let _ = self.inner.config.set(config);
    }

    pub fn config(&self) -> Option<&Arc<Config>> {
        self.inner.config.get()
    }

    /// `/status` reports this snapshot progress.
    pub fn set_snapshot(&self, p: Arc<SnapshotProgress>) {
        let _ = self.inner.snapshot.set(p);
    }

    /// The snapshot's progress, once one started in this process.
    pub fn snapshot_json(&self) -> Option<Value> {
        let v = self.inner.snapshot.get()?.view();
        if !v.started {
            return None;
        }
        Some(json!({
            "running": v.running,
            "rows": v.rows,
            "rows_estimated": v.estimated_rows,
            "tables": v.tables,
            "tables_done": v.tables_done,
            "elapsed_seconds": v.elapsed.as_secs(),
            "rows_per_second": v.rows_per_sec().round(),
            "eta_seconds": v.eta().map(|d| d.as_secs()),
        }))
    }

    /// The parts read at most [`PARTS_TTL`] ago, if any.
    pub fn cached_parts(&self) -> Option<collect::Parts> {
        let g = lock(&self.inner.parts);
        g.as_ref()
            .filter(|(at, _)| at.elapsed() < PARTS_TTL)
            .map(|(_, p)| p.clone())
    }

    pub fn cache_parts(&self, p: &collect::Parts) {
        *lock(&self.inner.parts) = Some((Instant::now(), p.clone()));
    }

    /// The pipeline's lag cells (written by its telemetry).
    pub fn lag(&self) -> &PipelineLag {
        &self.inner.lag
    }

    /// Reports sink `name` (its figures are `metrics`) in `/status` from now on.
    pub fn add_sink(&self, name: &str, metrics: SinkMetrics) {
        lock(&self.inner.sinks).insert(name.to_string(), (metrics, None));
    }

    /// Sink `name` stopped on a definite `error`.
    pub fn sink_stopped(&self, name: &str, error: String) {
        if let Some(e) = lock(&self.inner.sinks).get_mut(name) {
            e.1 = Some(error.clone());
        }
        self.record_error(&format!("sink.{name}"), &error);
    }

    /// `Some(reason)`: the pipeline waits for disk from now on; `None`: it runs again.
    pub fn set_waiting_for_disk(&self, reason: Option<String>) {
        let mut g = lock(&self.inner.disk_wait);
        match reason {
            Some(r) => {
                let since = g.as_ref().map_or_else(Instant::now, |(_, t)| *t);
                *g = Some((r, since));
            }
            None => *g = None,
        }
    }

    /// The reason and how long the pipeline has waited, while it waits for disk.
    pub fn waiting_for_disk(&self) -> Option<(String, std::time::Duration)> {
        let g = lock(&self.inner.disk_wait);
        g.as_ref().map(|(r, t)| (r.clone(), t.elapsed()))
    }

    /// `pos` became durable now.
    pub fn set_durable(&self, pos: &Checkpoint) {
        *lock(&self.inner.durable) = Some((pos.clone(), now_ms()));
    }

    /// The last durable position, if one became durable in this process.
    pub fn durable(&self) -> Option<Checkpoint> {
        lock(&self.inner.durable).as_ref().map(|(c, _)| c.clone())
    }

    /// The last error of `kind` (`source.transient`, `pipeline.definite`, `log.transient`,
    /// `sink.<name>`…) was `message`.
    pub fn record_error(&self, kind: &str, message: &str) {
        let mut g = lock(&self.inner.errors);
        let e = g.entry(kind.to_string()).or_insert(LastError {
            message: String::new(),
            at_unix_ms: 0,
            count: 0,
        });
        e.message = message.to_string();
        e.at_unix_ms = now_ms();
        e.count += 1;
    }

    /// The supervisor starts another attempt.
    pub fn restarted(&self) {
        self.inner.restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// What this process knows, as the `/status` document without the parts
    /// [`collect`] adds.
    pub fn to_json(&self) -> Value {
        let mut doc = match self.waiting_for_disk() {
            Some((reason, d)) => json!({
                "state": "waiting for disk",
                "reason": reason,
                "waiting_seconds": d.as_secs(),
            }),
            None => json!({ "state": "running" }),
        };
        doc["running"] = json!(true);
        doc["uptime_seconds"] = json!(self.inner.started.elapsed().as_secs());
        doc["started_at"] = json!(rfc3339(self.inner.started_unix_ms));
        doc["restarts"] = json!(self.inner.restarts.load(Ordering::Relaxed));
        let sinks = lock(&self.inner.sinks);
        if !sinks.is_empty() {
            let sinks: serde_json::Map<String, Value> = sinks
                .iter()
                .map(|(name, (m, stopped))| {
                    let state = match stopped {
                        Some(_) => "stopped",
                        None if m.up.get() == 1 => "running",
                        None => "retrying",
                    };
                    (
                        name.clone(),
                        json!({
                            "state": state,
                            "error": stopped,
                            "lag_records": m.lag_records.get(),
                            "lag_ms": m.lag_ms.get(),
                            "applied": m.applied.get(),
                            "dead_letters": m.dead_letters.get(),
                            "retries": m.retries.get(),
                        }),
                    )
                })
                .collect();
            doc["sinks"] = Value::Object(sinks);
        }
        drop(sinks);
        let errors = lock(&self.inner.errors);
        let errors: serde_json::Map<String, Value> = errors
            .iter()
            .map(|(k, e)| {
                (
                    k.clone(),
                    json!({ "message": e.message, "at": rfc3339(e.at_unix_ms), "count": e.count }),
                )
            })
            .collect();
        doc["errors"] = Value::Object(errors);
        let mut pipeline = json!({});
        if let Some((cp, at)) = lock(&self.inner.durable).as_ref() {
            pipeline["durable_position"] = position_json(cp);
            pipeline["durable_at"] = json!(rfc3339(*at));
        }
        let lag_us = self.inner.lag.lag_us(now_ms() * 1000);
        pipeline["lag_seconds"] = json!(lag_us as f64 / 1e6);
        let commit_us = self
            .inner
            .lag
            .last_durable_commit_us
            .load(Ordering::Relaxed);
        if commit_us > 0 {
            pipeline["last_durable_commit_at"] = json!(rfc3339(commit_us / 1000));
        }
        doc["pipeline"] = pipeline;
        doc
    }
}

/// A checkpoint as JSON: the position's own stored form, or `"snapshot incomplete"`.
pub fn position_json(cp: &Checkpoint) -> Value {
    match cp {
        Checkpoint::SnapshotIncomplete => json!("snapshot incomplete"),
        Checkpoint::At(_) => {
            serde_json::from_slice(&cp.to_bytes()).unwrap_or_else(|_| json!(cp.to_string()))
        }
    }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `2026-12-07T13:05:00.123Z`.
pub fn rfc3339(unix_ms: i64) -> String {
    let secs = unix_ms.div_euclid(1000);
    let ms = unix_ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_648_700_123), "2026-12-07T13:05:00.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn status_says_waiting_for_disk_and_keeps_the_last_error_of_each_kind() {
        let s = Status::default();
        assert_eq!(s.to_json()["state"], "running");
        s.set_waiting_for_disk(Some("budget".into()));
        let j = s.to_json();
        assert_eq!(j["state"], "waiting for disk");
        assert_eq!(j["reason"], "budget");
        s.set_waiting_for_disk(None);
        s.record_error("source.transient", "first");
        s.record_error("source.transient", "second");
        let j = s.to_json();
        assert_eq!(j["state"], "running");
        assert_eq!(j["errors"]["source.transient"]["message"], "second");
        assert_eq!(j["errors"]["source.transient"]["count"], 2);
    }
}
