//! Maintenance: retention, compaction and verification, run on demand
//! ([`Log::run_maintenance`] and the single-purpose calls) or by the maintenance thread
//! every `LogOptions::maintenance_interval`. The work itself is in `retention.rs` and
//! `compaction.rs`; this module decides when it runs and reports what it removed.
//!
//! Invariants: a pass first rolls the partitions whose `segment.ms` is due (so time
//! retention can reach a quiet partition's data) and gives idle partitions' stage memory
//! back, then applies retention, then compacts every compacted topic. The thread holds
//! the log only weakly between passes, so it never keeps a dropped log alive, and ends
//! with it. `Log::close` signals it and joins it; a pass under way notices the close
//! between batches (compaction) or partitions (retention) and stops, leaving every file as
//! a completed step left it (`compaction.rs`).

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use super::{Log, LogInner, MaintenanceReport};
use crate::error::{LogError, Result};
use crate::partition::lock;
use crate::record::now_ms;

impl Log {
    /// Applies retention and compaction once (what the background thread does).
    pub fn run_maintenance(&self) -> Result<MaintenanceReport> {
        self.check_open()?;
        let now = now_ms();
        for (t, p) in self.all_partitions() {
            let rolled = p.roll_if_due(t.config.segment_ms, now);
            self.settle_released(&p);
            rolled?;
            if let Err(e) = p.trim_if_idle() {
                // The stage kept its bytes; the next append or flush reports the error.
                tracing::warn!(topic = %t.name, partition = p.id, error = %e, "write-behind failed while trimming an idle partition");
            }
        }
        let mut r = crate::retention::enforce_retention(self, now_ms())?;
        for t in self.topics() {
            let topic = self.topic(&t)?;
            if topic.inner.config.cleanup_policy.compact {
                let c = crate::compaction::compact_topic(self, &t, now_ms())?;
                r.compacted_partitions += c.compacted_partitions;
                r.removed_records += c.removed_records;
                r.reclaimed_bytes += c.reclaimed_bytes;
            }
        }
        if r.deleted_bytes > 0 || r.reclaimed_bytes > 0 {
            self.inner.budget.notifier.notify_all();
        }
        Ok(r)
    }

    /// Deletes closed segments past `retention.ms` / `retention.bytes` of every topic whose
    /// policy includes `delete`; advances (and persists) the log start offset.
    pub fn enforce_retention(&self) -> Result<MaintenanceReport> {
        self.check_open()?;
        let r = crate::retention::enforce_retention(self, now_ms())?;
        self.inner.budget.notifier.notify_all();
        Ok(r)
    }

    /// Compacts the closed segments of one topic (its policy must include `compact`).
    pub fn compact(&self, topic: &str) -> Result<MaintenanceReport> {
        self.check_open()?;
        let r = crate::compaction::compact_topic(self, topic, now_ms())?;
        self.inner.budget.notifier.notify_all();
        Ok(r)
    }

    /// Like [`Log::compact`] with an explicit clock (tests, tools).
    pub fn compact_at(&self, topic: &str, now_ms: i64) -> Result<MaintenanceReport> {
        self.check_open()?;
        crate::compaction::compact_topic(self, topic, now_ms)
    }

    /// Reads every batch of every segment of `topic`, checking CRCs and record structure.
    /// Slow (reads everything); for operators and tests.
    pub fn verify(&self, topic: &str) -> Result<u64> {
        let t = self.topic(topic)?;
        let mut n = 0;
        for p in &t.inner.partitions {
            n += crate::reader::verify_partition(p)?;
        }
        Ok(n)
    }
}

pub(super) fn spawn_maintenance(
    weak: Weak<LogInner>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    every: Duration,
) -> Option<std::thread::JoinHandle<()>> {
    let spawned = std::thread::Builder::new()
        .name("cdc-log-maintenance".into())
        .spawn(move || loop {
            {
                let (m, c) = &*stop;
                let g = lock(m);
                let (g, _) = c
                    .wait_timeout_while(g, every, |stopped| !*stopped)
                    .unwrap_or_else(|e| e.into_inner());
                if *g {
                    return;
                }
            }
            let Some(inner) = weak.upgrade() else { return };
            let log = Log { inner, user: None };
            match log.run_maintenance() {
                Ok(_) => {}
                // A clean stop (`Log::close`): nothing more to maintain.
                Err(LogError::Closed(_)) => return,
                Err(e) => {
                    tracing::warn!(error = %e, transient = e.is_transient(), "log maintenance failed")
                }
            }
        });
    match spawned {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!(error = %e, "could not start the log maintenance thread; call run_maintenance yourself");
            None
        }
    }
}
