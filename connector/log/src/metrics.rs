//! Counters and gauges of the log, lock-free, readable at any time as a snapshot (the
//! connector's metrics endpoint exports them). Owns nothing on disk.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Metrics {
    pub appended_records: AtomicU64,
    pub appended_bytes: AtomicU64,
    pub appended_batches: AtomicU64,
    pub flushes: AtomicU64,
    pub flush_nanos: AtomicU64,
    pub recovery_truncated_bytes: AtomicU64,
    pub recovery_removed_segments: AtomicU64,
    pub recovery_rebuilt_indexes: AtomicU64,
    pub retention_deleted_segments: AtomicU64,
    pub retention_deleted_bytes: AtomicU64,
    pub compaction_runs: AtomicU64,
    pub compaction_removed_records: AtomicU64,
    pub compaction_reclaimed_bytes: AtomicU64,
    pub budget_exhausted_total: AtomicU64,
    /// Rolls that reused a recycle-pool file instead of creating one (`recycle.rs`).
    pub recycled_segments: AtomicU64,
    /// Opens that found the newest ledger slot damaged and used the older one.
    pub ledger_slot_fallbacks: AtomicU64,
    /// Records cut on such an open past the older slot's durable ends (flushed, possibly
    /// acknowledged).
    pub ledger_fallback_cut_records: AtomicU64,
    /// 1 while appends are held back by the disk budget.
    pub budget_blocked: AtomicU64,
    /// Bytes of all segment files, recycle-pool files included, and the stale length of a
    /// recycled active segment (gauge; what the disk budget compares; `recycle.rs`).
    pub total_bytes: AtomicU64,
    /// Segments that time/size retention would have deleted in its last pass but kept
    /// because a consumer group with `protect` has not read them (gauge).
    pub retention_held_segments: AtomicU64,
}

/// A point-in-time copy of [`Metrics`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    pub appended_records: u64,
    pub appended_bytes: u64,
    pub appended_batches: u64,
    pub flushes: u64,
    pub flush_nanos: u64,
    /// Bytes cut off torn/unflushed tails on open (plus removed unflushed segments).
    pub recovery_truncated_bytes: u64,
    pub recovery_removed_segments: u64,
    pub recovery_rebuilt_indexes: u64,
    pub retention_deleted_segments: u64,
    pub retention_deleted_bytes: u64,
    pub compaction_runs: u64,
    pub compaction_removed_records: u64,
    pub compaction_reclaimed_bytes: u64,
    pub budget_exhausted_total: u64,
    /// Rolls that reused a recycle-pool file instead of creating one.
    pub recycled_segments: u64,
    /// Opens that found the newest ledger slot damaged and fell back to the older one
    /// (an error-level log line says what it cost).
    pub ledger_slot_fallbacks: u64,
    /// Flushed records cut by such an open (past the older slot's durable ends).
    pub ledger_fallback_cut_records: u64,
    pub budget_blocked: bool,
    pub total_bytes: u64,
    pub retention_held_segments: u64,
}

impl Metrics {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MetricsSnapshot {
            appended_records: g(&self.appended_records),
            appended_bytes: g(&self.appended_bytes),
            appended_batches: g(&self.appended_batches),
            flushes: g(&self.flushes),
            flush_nanos: g(&self.flush_nanos),
            recovery_truncated_bytes: g(&self.recovery_truncated_bytes),
            recovery_removed_segments: g(&self.recovery_removed_segments),
            recovery_rebuilt_indexes: g(&self.recovery_rebuilt_indexes),
            retention_deleted_segments: g(&self.retention_deleted_segments),
            retention_deleted_bytes: g(&self.retention_deleted_bytes),
            compaction_runs: g(&self.compaction_runs),
            compaction_removed_records: g(&self.compaction_removed_records),
            compaction_reclaimed_bytes: g(&self.compaction_reclaimed_bytes),
            budget_exhausted_total: g(&self.budget_exhausted_total),
            recycled_segments: g(&self.recycled_segments),
            ledger_slot_fallbacks: g(&self.ledger_slot_fallbacks),
            ledger_fallback_cut_records: g(&self.ledger_fallback_cut_records),
            budget_blocked: g(&self.budget_blocked) != 0,
            total_bytes: g(&self.total_bytes),
            retention_held_segments: g(&self.retention_held_segments),
        }
    }
}
