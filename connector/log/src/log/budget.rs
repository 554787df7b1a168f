//! The disk budget (`LogOptions::disk_budget_bytes`): the disk-usage gauge it is checked
//! against (`Metrics::total_bytes`: segments, recycle-pool files and the stale length of a
//! recycled active segment) and the back-pressure it puts on appends when it is full.
//!
//! Bytes held outside the log by other writers on the same budget (the source's spill
//! files: `LogOptions::budget_shared_bytes`) count as used; the log cannot free them.
//!
//! Invariants: a full budget first asks retention for room (`retention::free_for_budget`:
//! pool files, then segments every registered group has read); it never deletes unread
//! records to admit an append, which instead waits up to `budget_wait` and then fails
//! with the transient `BudgetExhausted`. Retention, compaction, a maintenance pass that
//! removed bytes and a group's commit or deletion wake the waiters (`budget.notifier`):
//! each may have made room.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Log;
use crate::error::{LogError, Result};
use crate::metrics::Metrics;
use crate::notify::Notified;
use crate::partition::Partition;

impl Log {
    /// True while appends are held back by the disk budget.
    pub fn budget_exhausted(&self) -> bool {
        self.inner.metrics.budget_blocked.load(Ordering::Relaxed) != 0
    }

    /// Blocks until the budget has room again (or `timeout`); returns whether it has.
    pub fn wait_for_budget(&self, timeout: Duration) -> bool {
        let log = self.clone();
        self.inner.budget.notifier.wait_until(timeout, move || {
            log.budget_has_room_or_free().unwrap_or(false)
        })
    }

    /// Future resolving when the disk budget has room again (for async callers).
    pub fn budget_ready(&self) -> Notified<impl FnMut() -> bool + Unpin> {
        let log = self.clone();
        Notified {
            notifier: self.inner.budget.clone(),
            ready: move || log.budget_has_room_or_free().unwrap_or(false),
        }
    }

    /// Bytes of the log's own files (the disk-usage gauge, `Metrics::total_bytes`).
    pub fn disk_bytes(&self) -> u64 {
        self.inner.metrics.total_bytes.load(Ordering::Relaxed)
    }

    /// Bytes counted against the disk budget: the log's own (`Metrics::total_bytes`)
    /// plus what `LogOptions::budget_shared_bytes` reports.
    pub fn budget_used_bytes(&self) -> u64 {
        let shared = self
            .inner
            .options
            .budget_shared_bytes
            .as_ref()
            .map_or(0, |s| s.load(Ordering::Relaxed));
        self.disk_bytes().saturating_add(shared)
    }

    /// Bytes the disk budget has left (`None` without a budget). An append is admitted
    /// while any are left, whatever its size, so a writer that must not be refused in
    /// the middle of a unit of its own (a transaction) checks this before starting one.
    pub fn budget_room(&self) -> Option<u64> {
        self.inner
            .options
            .disk_budget_bytes
            .map(|b| b.saturating_sub(self.budget_used_bytes()))
    }

    pub(crate) fn budget_has_room(&self) -> bool {
        match self.inner.options.disk_budget_bytes {
            None => true,
            Some(b) => self.budget_used_bytes() < b,
        }
    }

    fn budget_has_room_or_free(&self) -> Result<bool> {
        if self.budget_has_room() {
            return Ok(true);
        }
        crate::retention::free_for_budget(self)?;
        Ok(self.budget_has_room())
    }

    pub(super) fn admit(&self) -> Result<()> {
        let Some(budget) = self.inner.options.disk_budget_bytes else {
            return Ok(());
        };
        if self.budget_has_room_or_free()? {
            if self.inner.metrics.budget_blocked.swap(0, Ordering::Relaxed) != 0 {
                tracing::info!(budget, "disk budget has room again; appends resume");
            }
            return Ok(());
        }
        if self.inner.metrics.budget_blocked.swap(1, Ordering::Relaxed) == 0 {
            Metrics::add(&self.inner.metrics.budget_exhausted_total, 1);
            tracing::warn!(
                budget,
                used = self.budget_used_bytes(),
                "disk budget exhausted: appends wait until consumer groups advance or retention frees space"
            );
        }
        let wait = self.inner.options.budget_wait;
        if !wait.is_zero() && self.wait_for_budget(wait) {
            self.inner
                .metrics
                .budget_blocked
                .store(0, Ordering::Relaxed);
            tracing::info!(budget, "disk budget has room again; appends resume");
            return Ok(());
        }
        Err(LogError::BudgetExhausted {
            used: self.budget_used_bytes(),
            budget,
        })
    }

    /// Subtracts from the disk-usage gauge what `part` released inside, and counts its
    /// recycled rolls (`recycle.rs`).
    pub(crate) fn settle_released(&self, part: &Partition) {
        let (freed, recycled) = part.take_released();
        Metrics::add(&self.inner.metrics.recycled_segments, recycled);
        if freed > 0 {
            let t = &self.inner.metrics.total_bytes;
            let _ = t.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(freed))
            });
        }
    }
}
