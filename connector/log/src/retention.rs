//! Retention (time and size) and disk-budget relief: deleting whole closed segments from
//! the front of a partition. Owns the "truncate front" protocol:
//!
//! 1. under the partition's maintenance lock, pick the oldest closed, fully durable
//!    segments to drop; the new log start is the base offset of the first one kept;
//! 2. write the new log start to the ledger (atomic, fsynced);
//! 3. remove the segments from the partition (bumping its epoch so readers re-locate);
//! 4. unlink their files, or (retention, not budget relief) move up to the partition's
//!    recycle bound of `.log` files into its recycle pool by rename (`recycle.rs`; their
//!    index files are unlinked); then fsync the directory.
//!
//! A crash after 2 leaves files below the log start, which the next open deletes, or pool
//! files, which it keeps; a crash before 2 leaves everything as it was. The active segment
//! is never deleted. Every partition's work runs under its maintenance lock and starts
//! with a check that the log is not closed, so `Log::close` (which takes each partition's
//! maintenance lock after marking the log closed) returns only when none is under way.
//!
//! Budget relief (when the disk budget is exhausted) first deletes every partition's
//! recycle-pool files (they hold no records), then applies only to topics whose policy
//! includes `delete` and only to segments that *every* group registered on the partition
//! has read past; a partition with no registered group is never trimmed by the budget
//! (only by its retention), so a sink that has not started yet loses nothing.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::Result;
use crate::log::{Log, MaintenanceReport};
use crate::metrics::Metrics;
use crate::partition::{lock, Partition};
use crate::topic_config::TopicConfig;

/// Drops the first `count` segments of `part` (see module docs). Returns (segments, bytes).
/// `recycle`: dropped `.log` files may go to the recycle pool (retention); budget relief
/// passes false, since a pooled file still counts against the budget it is relieving.
fn truncate_front(log: &Log, part: &Partition, count: usize, recycle: bool) -> Result<(u64, u64)> {
    if count == 0 {
        return Ok((0, 0));
    }
    let new_start = {
        let st = part.lock();
        // Never the active segment.
        let count = count.min(st.segments.len() - 1);
        if count == 0 {
            return Ok((0, 0));
        }
        st.segments[count].base()
    };
    {
        let mut l = lock(&log.inner.ledger);
        let mut next = l.clone();
        let m = next
            .partitions
            .entry((part.topic.clone(), part.id))
            .or_default();
        m.log_start = m.log_start.max(new_start);
        m.durable_end = m.durable_end.max(m.log_start);
        next.store(&log.inner.ledger_file)?;
        *l = next;
    }
    let removed: Vec<_> = {
        let mut st = part.lock();
        let k = st.segments.partition_point(|s| s.base() < new_start);
        let removed: Vec<_> = st.segments.drain(..k).collect();
        st.log_start = st.log_start.max(new_start);
        st.epoch += 1;
        removed
    };
    let count = removed.len();
    let mut bytes = 0;
    let mut freed = 0;
    for seg in removed {
        bytes += seg.size;
        freed += part.retire_segment(seg, recycle)?;
    }
    crate::fsutil::sync_dir(&part.dir)?;
    let m = log.metrics_ref();
    Metrics::add(&m.retention_deleted_segments, count as u64);
    Metrics::add(&m.retention_deleted_bytes, bytes);
    let _ = m
        .total_bytes
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            Some(v.saturating_sub(freed))
        });
    tracing::info!(topic = %part.topic, partition = part.id, segments = count, bytes, log_start = new_start, "deleted segments");
    Ok((count as u64, bytes))
}

/// How many leading segments retention deletes (Kafka's rules: time by the segment's
/// largest timestamp; size while what remains stays >= retention.bytes).
fn retention_count(part: &Partition, cfg: &TopicConfig, now: i64) -> usize {
    let st = part.lock();
    let n = st.segments.len();
    let mut remaining = st.size_bytes();
    let mut count = 0;
    for i in 0..n.saturating_sub(1) {
        if st.segment_end(i) > st.hw {
            break;
        }
        let seg = &st.segments[i];
        let by_time = cfg
            .retention_ms
            .is_some_and(|r| seg.max_timestamp().unwrap_or(i64::MIN) < now.saturating_sub(r));
        let by_size = cfg
            .retention_bytes
            .is_some_and(|r| remaining.saturating_sub(seg.size) >= r);
        if !(by_time || by_size) {
            break;
        }
        remaining -= seg.size;
        count += 1;
    }
    count
}

pub fn enforce_retention(log: &Log, now: i64) -> Result<MaintenanceReport> {
    let mut r = MaintenanceReport::default();
    for name in log.topics() {
        let t = log.topic(&name)?;
        let cfg = t.config().clone();
        if !cfg.cleanup_policy.delete {
            continue;
        }
        for p in 0..cfg.partitions {
            let part: Arc<Partition> = log.partition(&name, p)?;
            let _m = lock(&part.maintenance);
            // `Log::close` waits for the partition's maintenance lock: past it, nothing
            // more may be written.
            log.check_not_closed()?;
            let k = retention_count(&part, &cfg, now);
            let (s, b) = truncate_front(log, &part, k, true)?;
            r.deleted_segments += s;
            r.deleted_bytes += b;
        }
    }
    Ok(r)
}

/// Frees space for the disk budget by deleting closed segments every registered group
/// has consumed (delete-policy topics only). Returns bytes freed.
pub fn free_for_budget(log: &Log) -> Result<u64> {
    let mut freed = 0;
    // Pool files first: they hold no records.
    for (_, part) in log.all_partitions() {
        let f = {
            let _m = lock(&part.maintenance);
            log.check_not_closed()?;
            part.drop_pool()?
        };
        if f > 0 {
            tracing::info!(topic = %part.topic, partition = part.id, bytes = f, "disk budget: deleted recycle-pool files");
            let m = log.metrics_ref();
            let _ = m
                .total_bytes
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                    Some(v.saturating_sub(f))
                });
            freed += f;
        }
    }
    if freed > 0 && log.budget_has_room() {
        return Ok(freed);
    }
    for name in log.topics() {
        let t = log.topic(&name)?;
        if !t.config().cleanup_policy.delete {
            continue;
        }
        for p in 0..t.partitions() {
            let Some(min_committed) = log.min_committed(&name, p) else {
                continue;
            };
            let part = log.partition(&name, p)?;
            let Ok(_m) = part.maintenance.try_lock() else {
                continue;
            };
            log.check_not_closed()?;
            let k = {
                let st = part.lock();
                (0..st.segments.len().saturating_sub(1))
                    .take_while(|&i| {
                        let end = st.segment_end(i);
                        end <= st.hw && end <= min_committed
                    })
                    .count()
            };
            if k > 0 {
                tracing::warn!(topic = %name, partition = p, segments = k, "disk budget: deleting segments every consumer group has read");
                freed += truncate_front(log, &part, k, false)?.1;
            }
        }
    }
    Ok(freed)
}
