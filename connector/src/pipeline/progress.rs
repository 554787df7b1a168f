//! Snapshot progress for people and for monitoring.
//!
//! - stderr is a terminal: a progress bar (rows, share of the estimate, rows/s, ETA,
//!   tables done) redrawn a few times a second while a snapshot runs, left on screen with
//!   its final figures when it ends;
//! - otherwise: an info log line every [`LOG_EVERY`] while a snapshot runs (rows,
//!   rows/s, ETA, tables done), as the snapshot itself would log without a reporter;
//! - always: gauges on `/metrics`, computed at scrape time: `cdc_snapshot_running`,
//!   `cdc_snapshot_rows`, `cdc_snapshot_rows_estimated`, `cdc_snapshot_rows_per_second`,
//!   `cdc_snapshot_eta_seconds` (while an estimate and a rate exist),
//!   `cdc_snapshot_tables`, `cdc_snapshot_tables_done`, `cdc_snapshot_elapsed_seconds`.
//!
//! The row estimate is the sum of `pg_class.reltuples` of the captured tables (what the
//! last VACUUM / ANALYZE saw), so the share can end above or below 100 %.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_sources::progress::{log_progress, ProgressView, SnapshotProgress};

use crate::admin::Metrics;

/// Log line interval when stderr is not a terminal.
pub const LOG_EVERY: Duration = Duration::from_secs(5);
/// Redraw interval of the bar.
const DRAW_EVERY: Duration = Duration::from_millis(250);
const BAR_WIDTH: usize = 24;

/// The running reporter; [`Reporter::finish`] at exit leaves a drawn bar complete.
pub struct Reporter {
    task: tokio::task::JoinHandle<()>,
    progress: Arc<SnapshotProgress>,
    /// A bar is on screen without its final newline.
    bar_open: Arc<AtomicBool>,
}

impl Reporter {
    /// Stops the reporter; a bar still open is redrawn with its final figures and ended.
    pub fn finish(self) {
        self.task.abort();
        if self.bar_open.swap(false, Ordering::SeqCst) {
            draw(&render_bar(&self.progress.view()), true);
        }
    }
}

fn draw(line: &str, last: bool) {
    let mut err = std::io::stderr().lock();
    // Erase the line first: a log line may have been written over it.
    let _ = write!(err, "\x1b[2K{line}{}", if last { '\n' } else { '\r' });
    let _ = err.flush();
}

/// Exports `progress` on `/metrics` and renders it (bar or log lines) while snapshots run.
pub fn spawn(progress: Arc<SnapshotProgress>, metrics: &Metrics) -> Reporter {
    progress.attach_reporter();
    {
        let progress = progress.clone();
        metrics.collector(move |out| render_metrics(&progress.view(), out));
    }
    let terminal = std::io::stderr().is_terminal();
    let bar_open = Arc::new(AtomicBool::new(false));
    let task = {
        let progress = progress.clone();
        let bar_open = bar_open.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(DRAW_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut was_running = false;
            let mut last_log = Instant::now();
            loop {
                tick.tick().await;
                let v = progress.view();
                if terminal {
                    if v.running {
                        bar_open.store(true, Ordering::SeqCst);
                        draw(&render_bar(&v), false);
                    } else if bar_open.swap(false, Ordering::SeqCst) {
                        draw(&render_bar(&v), true);
                    }
                } else if v.running {
                    if !was_running {
                        last_log = Instant::now();
                    } else if last_log.elapsed() >= LOG_EVERY {
                        last_log = Instant::now();
                        log_progress(&v);
                    }
                }
                was_running = v.running;
            }
        })
    };
    Reporter {
        task,
        progress,
        bar_open,
    }
}

/// `12,345,678`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// One line: `snapshot [=======>      ]  45%  450,000/~1,000,000 rows  190,000 rows/s  ETA 3s  tables 0/1`.
pub fn render_bar(v: &ProgressView) -> String {
    let mut s = String::from("snapshot ");
    match v.fraction() {
        Some(f) => {
            let filled = ((f * BAR_WIDTH as f64) as usize).min(BAR_WIDTH);
            s.push('[');
            s.push_str(&"=".repeat(filled));
            if filled < BAR_WIDTH {
                s.push('>');
                s.push_str(&" ".repeat(BAR_WIDTH - filled - 1));
            }
            let _ = write!(
                s,
                "] {:>3}%  {}/~{} rows",
                (f * 100.0) as u32,
                thousands(v.rows),
                thousands(v.estimated_rows)
            );
        }
        None => {
            let _ = write!(s, "{} rows", thousands(v.rows));
        }
    }
    let _ = write!(s, "  {} rows/s", thousands(v.rows_per_sec() as u64));
    if let Some(eta) = v.eta() {
        // Rounded up: "ETA 0s" while rows are still coming would mislead.
        let _ = write!(
            s,
            "  ETA {}",
            duration(Duration::from_secs(eta.as_secs_f64().ceil() as u64))
        );
    } else if !v.running && v.started {
        let took = if v.elapsed < Duration::from_secs(60) {
            format!("{:.1}s", v.elapsed.as_secs_f64())
        } else {
            duration(v.elapsed)
        };
        let _ = write!(s, "  done in {took}");
    }
    let _ = write!(s, "  tables {}/{}", v.tables_done, v.tables);
    s
}

fn gauge(out: &mut String, name: &str, help: &str, v: impl std::fmt::Display) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
}

/// The snapshot gauges in Prometheus text format.
pub fn render_metrics(v: &ProgressView, out: &mut String) {
    gauge(
        out,
        "cdc_snapshot_running",
        "1 while the initial snapshot runs.",
        u8::from(v.running),
    );
    gauge(
        out,
        "cdc_snapshot_rows",
        "Rows read by the current (or last) snapshot.",
        v.rows,
    );
    gauge(
        out,
        "cdc_snapshot_rows_estimated",
        "Rows the snapshot expects to read (sum of pg_class.reltuples).",
        v.estimated_rows,
    );
    gauge(
        out,
        "cdc_snapshot_rows_per_second",
        "Average snapshot read rate so far.",
        v.rows_per_sec() as u64,
    );
    if let Some(eta) = v.eta() {
        gauge(
            out,
            "cdc_snapshot_eta_seconds",
            "Estimated time until the snapshot has read every table.",
            eta.as_secs(),
        );
    }
    gauge(
        out,
        "cdc_snapshot_tables",
        "Tables in the current (or last) snapshot.",
        v.tables,
    );
    gauge(
        out,
        "cdc_snapshot_tables_done",
        "Tables the snapshot has read completely.",
        v.tables_done,
    );
    gauge(
        out,
        "cdc_snapshot_elapsed_seconds",
        "Time the current (or last) snapshot has run.",
        format!("{:.3}", v.elapsed.as_secs_f64()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(running: bool, rows: u64, estimated_rows: u64) -> ProgressView {
        ProgressView {
            running,
            started: true,
            rows,
            estimated_rows,
            tables: 3,
            tables_done: 1,
            elapsed: Duration::from_secs(2),
        }
    }

    #[test]
    fn bar_with_and_without_estimate() {
        let s = render_bar(&view(true, 500_000, 1_000_000));
        assert_eq!(
            s,
            "snapshot [============>           ]  50%  500,000/~1,000,000 rows  250,000 rows/s  ETA 2s  tables 1/3"
        );
        let s = render_bar(&view(true, 1234, 0));
        assert_eq!(s, "snapshot 1,234 rows  617 rows/s  tables 1/3");
        let s = render_bar(&view(false, 1_000_000, 1_000_000));
        assert!(s.contains("100%") && s.contains("done in 2.0s"), "{s}");
        // More rows than estimated: capped at 100 %, no ETA.
        let s = render_bar(&view(true, 2_000, 1_000));
        assert!(s.contains("[========================] 100%"), "{s}");
        assert!(!s.contains("ETA"), "{s}");
    }

    #[test]
    fn metrics_text() {
        let mut out = String::new();
        render_metrics(&view(true, 500, 1000), &mut out);
        assert!(out.contains("cdc_snapshot_running 1\n"), "{out}");
        assert!(out.contains("cdc_snapshot_rows 500\n"), "{out}");
        assert!(out.contains("cdc_snapshot_rows_estimated 1000\n"), "{out}");
        assert!(out.contains("cdc_snapshot_eta_seconds 2\n"), "{out}");
        assert!(out.contains("cdc_snapshot_tables_done 1\n"), "{out}");
        assert!(out.contains("# TYPE cdc_snapshot_rows gauge\n"), "{out}");
    }

    #[test]
    fn number_formats() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(duration(Duration::from_secs(59)), "59s");
        assert_eq!(duration(Duration::from_secs(61)), "1m01s");
        assert_eq!(duration(Duration::from_secs(3661)), "1h01m");
    }
}
