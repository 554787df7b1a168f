//! Durability: [`Log::flush`] makes every append so far durable together with the source
//! checkpoint in one ledger write, and [`Log::close`] is the clean stop.
//!
//! The order is what makes a flush crash-safe: every dirty partition's stage is written
//! out and the sizes to sync are captured (`Partition::plan_flush`); every segment file
//! with new bytes is fdatasynced and every directory with new files fsynced; only then is
//! the ledger's other slot written (`ledger.rs`); and only after that do readers see the
//! records (`Partition::publish`). So the ledger never names a byte that is not on disk,
//! and no reader sees a record a crash could take back.
//!
//! Invariants: flushes are serialised by `flush_lock`; `close` marks the log closed under
//! it and every flush re-checks that under it, so no flush runs once `close` goes on to
//! cut recycled tails, and no ledger write can name bytes a cut removed. A failed fsync poisons
//! the log (the kernel may have dropped the dirty pages, and a later fsync that succeeds
//! would not bring them back); a failed stage or ledger write leaves the partitions dirty
//! for the next flush.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{FlushInfo, Log};
use crate::error::{LogError, Result};
use crate::fsutil;
use crate::metrics::Metrics;
use crate::partition::lock;

impl Log {
    /// A clean stop: ends writing through every handle of this log (later appends,
    /// flushes, commits and maintenance fail with [`LogError::Closed`]), stops and joins
    /// the background threads (a compaction pass under way stops between two batches,
    /// see `compaction.rs`), waits for any maintenance call running on another thread and
    /// for every write-behind write in flight, cuts each recycled active segment
    /// (`recycle.rs`) to its flushed bytes, so the next open has no stale tail to cut and
    /// report, and releases the directory lock. When it returns nothing of this log
    /// writes into the directory any more, and the directory can be opened again (also
    /// while other handles of this log, readers say, are still alive: they keep reading).
    /// Appends not flushed yet are discarded, as a crash would discard them.
    /// Dropping the log without `close` leaves the files as a crash does (recovery cuts
    /// and reports the stale tails); when the last handle goes, a compaction pass under
    /// way stops between two batches, the threads are joined and the lock is released
    /// after them. After a failed flush (the log is poisoned) nothing is cut:
    /// its ledger write may have reached the disk, and only recovery can tell. A second
    /// `close` does nothing.
    pub fn close(&self) -> Result<()> {
        if self.inner.options.read_only {
            return Ok(());
        }
        // Flushes re-check `closed` under `flush_lock`: once this section is done, none
        // runs, and none will (the ledger must never name bytes the cut below removes).
        let poisoned = {
            let _flushes = lock(&self.inner.flush_lock);
            if self.inner.closed.swap(true, Ordering::AcqRel) {
                return Ok(());
            }
            lock(&self.inner.poisoned).is_some()
        };
        // The threads end at their next check of the stop flag or of `closed`; joined
        // without any lock held (a flush or a pass may be waiting for one).
        self.inner.request_stop();
        self.inner.join_threads();
        let mut first_err = None;
        for (_, p) in self.all_partitions() {
            // A maintenance call of another thread holds this until it has seen `closed`
            // or finished its step on the partition.
            let _maintenance = lock(&p.maintenance);
            if let Err(e) = p.close(!poisoned) {
                tracing::warn!(topic = %p.topic, partition = p.id, error = %e, "closing a partition; its next open recovers it");
                first_err.get_or_insert(e);
            }
        }
        // Nothing of this log writes any more: the directory may be opened again.
        drop(lock(&self.inner.dir_lock).take());
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Makes everything appended so far durable, together with `checkpoint` (the source
    /// position those records cover) in one atomic ledger write: every partition's write
    /// stage written to its segment file, fsync of every segment file with new data (and
    /// of directories with new files), then the ledger. Readers
    /// see the records once this returns. `None` keeps the previous checkpoint.
    /// After a crash, [`Log::checkpoint`] and the records agree.
    pub fn flush(&self, checkpoint: Option<&[u8]>) -> Result<FlushInfo> {
        self.check_poisoned()?;
        let started = Instant::now();
        let mut clock = lock(&self.inner.flush_lock);
        // `close` may have run while this waited for the lock.
        self.check_not_closed()?;
        let mut plans = Vec::new();
        for (_, p) in self.all_partitions() {
            if !p.dirty.load(Ordering::Acquire) {
                continue;
            }
            match p.plan_flush() {
                Ok(plan) => plans.push((p, plan)),
                Err(e) => {
                    // A staged write failed: nothing was fsynced or recorded; the
                    // partitions planned so far stay dirty for the next flush.
                    for (q, _) in &plans {
                        q.dirty.store(true, Ordering::Release);
                    }
                    return Err(e);
                }
            }
        }
        if plans.is_empty() && checkpoint.is_none() {
            return Ok(FlushInfo::default());
        }
        let mut info = FlushInfo {
            partitions: plans.len(),
            ..Default::default()
        };
        for (_, plan) in &plans {
            for (f, _) in &plan.files {
                if let Err(e) = f.file.sync_data() {
                    let err = LogError::FsyncFailed {
                        path: f.path.clone(),
                        source: e,
                    };
                    self.poison(&err);
                    return Err(err);
                }
                info.files_synced += 1;
            }
            if let Some(d) = &plan.dir {
                if let Err(e) = fsutil::sync_dir(d) {
                    self.poison(&e);
                    return Err(e);
                }
            }
        }
        {
            let mut ledger = lock(&self.inner.ledger);
            let mut next = ledger.clone();
            for (p, plan) in &plans {
                let m = next.partitions.entry((p.topic.clone(), p.id)).or_default();
                m.durable_end = m.durable_end.max(plan.leo);
            }
            if let Some(c) = checkpoint {
                next.checkpoint = Some(c.to_vec());
            }
            if let Err(e) = next.store(&self.inner.ledger_file) {
                if matches!(e, LogError::FsyncFailed { .. }) {
                    self.poison(&e);
                }
                // Data was fsynced but is not durable yet in the ledger sense: mark the
                // partitions dirty again so the next flush retries.
                for (p, _) in &plans {
                    p.dirty.store(true, Ordering::Release);
                }
                return Err(e);
            }
            *ledger = next;
            info.ledger_written = true;
        }
        for (p, plan) in &plans {
            p.publish(plan);
        }
        clock.last = Instant::now();
        self.inner.bytes_since_flush.store(0, Ordering::Relaxed);
        Metrics::add(&self.inner.metrics.flushes, 1);
        Metrics::add(
            &self.inner.metrics.flush_nanos,
            started.elapsed().as_nanos() as u64,
        );
        Ok(info)
    }

    /// The checkpoint stored by the last successful `flush(Some(..))` (also after reopen).
    pub fn checkpoint(&self) -> Option<Vec<u8>> {
        lock(&self.inner.ledger).checkpoint.clone()
    }
}
