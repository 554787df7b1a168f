//! Progress of the initial snapshot: the counters the readers update and the ways they
//! are reported.
//!
//! A [`SnapshotProgress`] counts rows read, tables done and the row estimate (the
//! database's own statistics: Postgres sums `pg_class.reltuples`). The pipeline hands one
//! to the source in its [`crate::SourceContext`] and renders it (progress bar on a
//! terminal, log lines and metrics otherwise); when no reporter is attached the snapshot
//! logs an info line every few seconds itself ([`log_progress`]). [`join_readers`] is how
//! both sources wait for their snapshot readers.
//!
//! Invariants: counters are cumulative for one snapshot and reset when the next begins;
//! they are updated once per batch, not per row, with relaxed atomics, so a
//! [`ProgressView`] is consistent enough for display but not a synchronisation point.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

/// How often the snapshot logs its progress when no reporter is attached.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// Progress of the (current or last) snapshot, shared between the readers and whoever
/// reports it. All counters are cumulative for one snapshot; a new snapshot resets them.
#[derive(Debug, Default)]
pub struct SnapshotProgress {
    running: AtomicBool,
    reporter: AtomicBool,
    rows: AtomicU64,
    estimated_rows: AtomicU64,
    tables: AtomicU64,
    tables_done: AtomicU64,
    times: Mutex<(Option<Instant>, Option<Instant>)>,
}

/// A consistent-enough reading of [`SnapshotProgress`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProgressView {
    /// A snapshot is running now.
    pub running: bool,
    /// A snapshot ran (or runs) in this process.
    pub started: bool,
    pub rows: u64,
    /// The database's estimate of the tables' rows (0 when it has no statistics).
    pub estimated_rows: u64,
    pub tables: u64,
    pub tables_done: u64,
    pub elapsed: Duration,
}

impl ProgressView {
    pub fn rows_per_sec(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.rows as f64 / s
        } else {
            0.0
        }
    }

    /// Time left at the average rate so far; `None` without an estimate or a rate, or
    /// once more rows than estimated were read (the estimate was low: unknown).
    pub fn eta(&self) -> Option<Duration> {
        let rate = self.rows_per_sec();
        if !self.running || self.rows >= self.estimated_rows || rate <= 0.0 {
            return None;
        }
        let left = self.estimated_rows.saturating_sub(self.rows) as f64;
        Some(Duration::from_secs_f64(left / rate))
    }

    /// Rows read as a fraction of the estimate (capped at 1), when there is one.
    pub fn fraction(&self) -> Option<f64> {
        (self.estimated_rows > 0).then(|| (self.rows as f64 / self.estimated_rows as f64).min(1.0))
    }
}

impl SnapshotProgress {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Someone renders this progress: the snapshot then does not log it periodically.
    pub fn attach_reporter(&self) {
        self.reporter.store(true, Ordering::Relaxed);
    }

    pub fn view(&self) -> ProgressView {
        let (start, end) = *self.times.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = match (start, end) {
            (Some(s), Some(e)) => e.duration_since(s),
            (Some(s), None) => s.elapsed(),
            _ => Duration::ZERO,
        };
        ProgressView {
            running: self.running.load(Ordering::Relaxed),
            started: start.is_some(),
            rows: self.rows.load(Ordering::Relaxed),
            estimated_rows: self.estimated_rows.load(Ordering::Relaxed),
            tables: self.tables.load(Ordering::Relaxed),
            tables_done: self.tables_done.load(Ordering::Relaxed),
            elapsed,
        }
    }

    /// True when someone renders this progress (the snapshot then does not log it).
    pub(super) fn has_reporter(&self) -> bool {
        self.reporter.load(Ordering::Relaxed)
    }

    pub(super) fn begin(&self, tables: u64, estimated_rows: u64) {
        *self.times.lock().unwrap_or_else(|e| e.into_inner()) = (Some(Instant::now()), None);
        self.rows.store(0, Ordering::Relaxed);
        self.tables_done.store(0, Ordering::Relaxed);
        self.tables.store(tables, Ordering::Relaxed);
        self.estimated_rows.store(estimated_rows, Ordering::Relaxed);
        self.running.store(true, Ordering::Relaxed);
    }

    pub(super) fn add_rows(&self, n: u64) {
        self.rows.fetch_add(n, Ordering::Relaxed);
    }

    pub(super) fn table_done(&self) {
        self.tables_done.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn end(&self) {
        self.times.lock().unwrap_or_else(|e| e.into_inner()).1 = Some(Instant::now());
        self.running.store(false, Ordering::Relaxed);
    }
}

/// Without a reporter, a task that logs [`log_progress`] every [`LOG_EVERY`] until it
/// is aborted.
pub(crate) fn spawn_logger(progress: &Arc<SnapshotProgress>) -> Option<JoinHandle<()>> {
    (!progress.has_reporter()).then(|| {
        let progress = progress.clone();
        tokio::spawn(async move {
            let mut t = tokio::time::interval(LOG_EVERY);
            t.tick().await;
            loop {
                t.tick().await;
                log_progress(&progress.view());
            }
        })
    })
}

/// The periodic progress line.
pub fn log_progress(v: &ProgressView) {
    tracing::info!(
        rows = v.rows,
        rows_per_sec = v.rows_per_sec() as u64,
        estimated_rows = v.estimated_rows,
        eta_secs = v.eta().map(|d| d.as_secs()),
        tables_done = v.tables_done,
        tables = v.tables,
        "snapshot in progress"
    );
}

/// Waits for every snapshot reader task: the first error wins and aborts the others (a
/// reader that panicked is reported as such, a definite error).
pub async fn join_readers(
    workers: &mut tokio::task::JoinSet<Result<(), crate::SourceError>>,
) -> Result<(), crate::SourceError> {
    let mut result = Ok(());
    while let Some(r) = workers.join_next().await {
        let r = r.unwrap_or_else(|e| {
            Err(crate::SourceError::definite(
                "snapshot reader",
                e.to_string(),
                "report this as a bug",
            ))
        });
        if let Err(e) = r {
            if result.is_ok() {
                result = Err(e);
            }
            workers.abort_all();
        }
    }
    result
}

/// The end of a snapshot's reading, for both sources: stops the `logger` of
/// [`spawn_logger`], marks the progress ended, and on success logs the totals and returns
/// the rows read.
pub(crate) fn end_snapshot(
    progress: &SnapshotProgress,
    logger: Option<JoinHandle<()>>,
    started: Instant,
    result: Result<(), crate::SourceError>,
) -> Result<u64, crate::SourceError> {
    if let Some(l) = logger {
        l.abort();
    }
    progress.end();
    result?;
    let view = progress.view();
    tracing::info!(
        rows = view.rows,
        tables = view.tables,
        secs = started.elapsed().as_secs_f64(),
        rows_per_sec = view.rows_per_sec() as u64,
        "snapshot read every table"
    );
    Ok(view.rows)
}
