//! The disk budget a source shares with the log (`[log] disk_budget_bytes`): a handle the
//! connector gives the source in [`crate::SourceContext`], through which the source counts
//! the bytes it keeps on disk itself (Postgres: the spill files of open streamed
//! transactions) and asks whether the budget has room before it writes more.
//!
//! The source cannot see the log (dependencies flow toward `schemas`), so the connector
//! builds the handle from two plain parts: the counter of the source's own bytes, which it
//! also hands the log (`cdc_log::LogOptions::budget_shared_bytes`, so the log's appends see
//! them), and a function reading the log's bytes. Invariants: the counter only holds bytes
//! of files that exist (added when written, subtracted when their file is removed); the
//! check is advisory and may overshoot the limit by the one write it admitted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Reads the bytes the rest of the budget's users hold (the log's segments).
type OthersFn = dyn Fn() -> u64 + Send + Sync;

/// A shared disk budget. Cheap to clone; the default has no limit.
#[derive(Clone, Default)]
pub struct DiskBudget {
    limit: Option<u64>,
    own: Arc<AtomicU64>,
    others: Option<Arc<OthersFn>>,
}

impl std::fmt::Debug for DiskBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskBudget")
            .field("limit", &self.limit)
            .field("own", &self.own_bytes())
            .finish()
    }
}

impl DiskBudget {
    /// No limit (the source still counts its bytes).
    pub fn unlimited() -> Self {
        DiskBudget::default()
    }

    /// A budget of `limit` bytes (`None`: no limit), whose other users hold `others()`
    /// bytes; the source's own bytes go into `own` (which the log also counts).
    pub fn new(
        limit: Option<u64>,
        own: Arc<AtomicU64>,
        others: impl Fn() -> u64 + Send + Sync + 'static,
    ) -> Self {
        DiskBudget {
            limit,
            own,
            others: Some(Arc::new(others)),
        }
    }

    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// Bytes the source holds on disk now.
    pub fn own_bytes(&self) -> u64 {
        self.own.load(Ordering::Relaxed)
    }

    /// Everything counted against the budget.
    pub fn used_bytes(&self) -> u64 {
        let others = self.others.as_ref().map_or(0, |f| f());
        self.own_bytes().saturating_add(others)
    }

    /// Whether the source may write more.
    pub fn has_room(&self) -> bool {
        self.limit.is_none_or(|l| self.used_bytes() < l)
    }

    /// The source wrote `n` more bytes.
    pub fn add(&self, n: u64) {
        self.own.fetch_add(n, Ordering::Relaxed);
    }

    /// The source removed files holding `n` bytes.
    pub fn release(&self, n: u64) {
        let _ = self
            .own
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(n))
            });
    }

    /// Waits until the budget has room, re-checking every `poll` (the log frees space
    /// without telling the source). `false`: `shutdown` turned true first.
    pub async fn wait_for_room(
        &self,
        shutdown: &mut tokio::sync::watch::Receiver<bool>,
        poll: Duration,
    ) -> bool {
        loop {
            if *shutdown.borrow() {
                return false;
            }
            if self.has_room() {
                return true;
            }
            tokio::select! {
                // Biased: a shutdown ends the wait even when the timer is due too.
                biased;
                r = shutdown.changed() => if r.is_err() {
                    // The connector is gone: nothing will free space for us.
                    return false;
                },
                _ = tokio::time::sleep(poll) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_own_and_other_bytes_against_the_limit() {
        let others = Arc::new(AtomicU64::new(10));
        let o = others.clone();
        let b = DiskBudget::new(Some(100), Arc::default(), move || o.load(Ordering::Relaxed));
        assert!(b.has_room());
        b.add(89);
        assert_eq!(b.used_bytes(), 99);
        assert!(b.has_room());
        b.add(1);
        assert!(!b.has_room());
        others.store(0, Ordering::Relaxed);
        assert!(b.has_room());
        b.release(1000);
        assert_eq!(b.own_bytes(), 0);
        let u = DiskBudget::unlimited();
        u.add(u64::MAX);
        assert!(u.has_room());
    }

    #[tokio::test]
    async fn wait_ends_with_room_or_shutdown() {
        let b = DiskBudget::new(Some(1), Arc::default(), || 0);
        b.add(1);
        let (tx, mut rx) = tokio::sync::watch::channel(false);
        let b2 = b.clone();
        let freer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            b2.release(1);
        });
        assert!(b.wait_for_room(&mut rx, Duration::from_millis(5)).await);
        freer.await.unwrap();
        b.add(1);
        tx.send(true).unwrap();
        assert!(!b.wait_for_room(&mut rx, Duration::from_millis(5)).await);
    }
}
