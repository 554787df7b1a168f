//! Waiting for disk: when the log refuses an append or a flush because the disk budget is
//! exhausted ([`LogError::BudgetExhausted`], `[log] disk_budget_bytes`) or the file system
//! is full ([`LogError::DiskFull`], ENOSPC/EDQUOT), the pipeline does not fail: it stops
//! taking changes and retries the same call once there may be room. That is backpressure:
//! the queue from the source fills, the source stops reading, and the database retains
//! its log (the slot's WAL) meanwhile — the intended trade, watched by the retained-WAL
//! alarm. It resumes by itself when retention, compaction, a consumer's commit (budget
//! relief) or the operator frees space.
//!
//! Invariants:
//! - Only calls that change nothing when they fail so are retried: a single-partition
//!   append (the budget is checked before the partition is touched, and a failed write
//!   leaves the partition as it was, `stage.rs`) and a flush (a failed write-out keeps the
//!   partitions dirty and writes no ledger). So a retry neither loses nor duplicates a
//!   record. The flush rule of the pipeline (never flush a partly appended transaction)
//!   is untouched: a wait flushes nothing itself, and the one flush the pipeline makes
//!   before a budget wait (its complete transactions, so consumers can release them) is
//!   made only when nothing of the next transaction is appended yet (`mod.rs`).
//! - While waiting, `/readyz` stays ready (the process is healthy; a restart would not
//!   free a byte), the `cdc_pipeline_waiting_for_disk` gauge is 1 and `/status` says
//!   "waiting for disk" with the reason; one warning starts a wait, one info line ends it.
//! - A stop signal (shutdown, or the supervisor's when the source ended with an error)
//!   ends a wait within [`SLICE`] with [`PipelineError::StoppedWhileWaitingForDisk`]:
//!   nothing past the last durable checkpoint was acknowledged, so the source sends it
//!   again on the next start.

use std::time::{Duration, Instant};

use cdc_log::{Log, LogError};
use cdc_schemas::metrics::{Counter, Gauge, Metrics};
use tokio::sync::watch;

use super::PipelineError;
use crate::admin::Status;

/// How long one wait lasts before the stop signals are checked again (and, for the
/// budget, its room: the spill frees its bytes without notifying the log).
const SLICE: Duration = Duration::from_millis(250);
/// First and longest pause between retries on a full file system (nothing notifies us
/// when the operator frees space).
const DISK_FULL_FIRST: Duration = Duration::from_millis(250);
const DISK_FULL_MAX: Duration = Duration::from_secs(5);
/// A long wait is said again this often (a wait that started mid-transaction may be one
/// that can never end: a transaction larger than the budget).
const REMIND_EVERY: Duration = Duration::from_secs(60);

/// Whether `e` means "no room on disk now": wait and retry the same call.
pub(super) fn is_disk_wait(e: &LogError) -> bool {
    matches!(
        e,
        LogError::BudgetExhausted { .. } | LogError::DiskFull { .. }
    )
}

/// The pipeline's waiting-for-disk state and what it reports.
pub struct DiskWait {
    /// A wait ends when any of these is true.
    stop: Vec<watch::Receiver<bool>>,
    gauge: Gauge,
    waits: Counter,
    status: Status,
    /// The current wait: when it started and the next pause on a full file system.
    current: Option<(Instant, Duration)>,
    /// When the current wait was last said in the log.
    said: Instant,
}

impl Default for DiskWait {
    /// No shutdown signal, figures in a registry of their own (tests).
    fn default() -> Self {
        DiskWait::new(Vec::new(), &Metrics::default(), Status::default())
    }
}

impl DiskWait {
    /// Registers the gauge and counter in `metrics`; `status` is what `/status` serves;
    /// a wait ends (the run stops) once any of `stop` is true.
    pub fn new(stop: Vec<watch::Receiver<bool>>, metrics: &Metrics, status: Status) -> Self {
        DiskWait {
            stop,
            gauge: metrics.gauge(
                "cdc_pipeline_waiting_for_disk",
                "1 while the pipeline is waiting for disk (disk budget exhausted or file system full): it takes no changes and the database retains its log",
            ),
            waits: metrics.counter(
                "cdc_pipeline_disk_waits_total",
                "Times the pipeline started waiting for disk.",
            ),
            status,
            current: None,
            said: Instant::now(),
        }
    }

    fn stopping(&self) -> bool {
        self.stop.iter().any(|s| *s.borrow())
    }

    /// Waits after `e` (see [`is_disk_wait`]) until the failed call may succeed; the
    /// caller then retries it. `partial`: part of a transaction is appended (said in the
    /// log line: such a transaction cannot be flushed to make room).
    pub async fn pause(
        &mut self,
        log: &Log,
        e: &LogError,
        partial: bool,
    ) -> Result<(), PipelineError> {
        if self.stopping() {
            return Err(PipelineError::StoppedWhileWaitingForDisk);
        }
        if self.current.is_none() {
            self.current = Some((Instant::now(), DISK_FULL_FIRST));
            self.gauge.set(1);
            self.waits.inc();
            let reason = match e {
                LogError::BudgetExhausted { used, budget } => format!(
                    "the disk budget is exhausted ({used} of {budget} bytes, log.disk_budget_bytes): waiting for retention, compaction or consumer groups to free space"
                ),
                other => format!("{other}"),
            };
            tracing::warn!(
                reason = %reason,
                mid_transaction = partial,
                "waiting for disk: the pipeline takes no more changes until there is room (the database retains its log meanwhile; /status and cdc_pipeline_waiting_for_disk show it)"
            );
            self.status.set_waiting_for_disk(Some(reason));
            self.said = Instant::now();
        } else if self.said.elapsed() >= REMIND_EVERY {
            self.said = Instant::now();
            let waited = self.current.map_or(0, |(t, _)| t.elapsed().as_secs());
            if partial {
                tracing::warn!(waited_s = waited, error = %e, "still waiting for disk, with part of a transaction (or a snapshot) appended: it is flushed only as a whole, so if it is larger than log.disk_budget_bytes it can never fit: raise the budget (or free disk)");
            } else {
                tracing::warn!(waited_s = waited, error = %e, "still waiting for disk");
            }
        }
        if let LogError::BudgetExhausted { .. } = e {
            let log = log.clone();
            // Blocks this worker for at most one slice; the runtime moves other tasks.
            let room = tokio::task::block_in_place(|| log.wait_for_budget(SLICE));
            if !room && self.stopping() {
                return Err(PipelineError::StoppedWhileWaitingForDisk);
            }
            // A point where the task can be cancelled (a runtime shutting down): the
            // retry loop around a wait has no other.
            tokio::task::yield_now().await;
            return Ok(());
        }
        // A full file system: nothing tells us when space is freed; retry with backoff.
        let pause = match &mut self.current {
            Some((_, next)) => {
                let p = *next;
                *next = (*next * 2).min(DISK_FULL_MAX);
                p
            }
            None => DISK_FULL_FIRST,
        };
        let until = Instant::now() + pause;
        while Instant::now() < until {
            tokio::time::sleep(SLICE.min(until - Instant::now())).await;
            if self.stopping() {
                return Err(PipelineError::StoppedWhileWaitingForDisk);
            }
        }
        Ok(())
    }

    /// A retried call went through: ends the wait, if one was running.
    pub fn resumed(&mut self) {
        if let Some((since, _)) = self.current.take() {
            self.gauge.set(0);
            self.status.set_waiting_for_disk(None);
            tracing::info!(
                waited_ms = since.elapsed().as_millis() as u64,
                "disk has room again: the pipeline resumes"
            );
        }
    }
}
