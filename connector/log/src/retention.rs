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
//! Time and size retention never delete a segment that an external group with `protect`
//! (`groups.d`, `external.rs`; re-read at each pass) has not fully read: such a group is
//! "registered" for retention. Groups of the writer's store and external groups without
//! `protect` do not hold retention back.
//!
//! Budget relief (when the disk budget is exhausted) first deletes every partition's
//! recycle-pool files (they hold no records), then applies only to topics whose policy
//! includes `delete` and only to segments that *every* group registered on the partition
//! (the writer's store and external groups with `protect`, re-read first) has read past;
//! a partition with no registered group is never trimmed by the budget (only by its
//! retention), so a sink that has not started yet loses nothing.

use std::collections::BTreeMap;
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

/// What retention may do with a partition's leading segments.
struct Due {
    /// Segments to delete.
    count: usize,
    /// Segments past `count` that retention would delete but a protecting group has not
    /// read (the first one ends at `held_end`).
    held: usize,
    held_end: u64,
}

/// How many leading segments retention deletes (Kafka's rules: time by the segment's
/// largest timestamp; size while what remains stays >= retention.bytes), never one that
/// ends past `floor` (the lowest offset of the groups protecting the partition).
fn retention_count(part: &Partition, cfg: &TopicConfig, now: i64, floor: Option<u64>) -> Due {
    let st = part.lock();
    let n = st.segments.len();
    let mut remaining = st.size_bytes();
    let mut due = Due {
        count: 0,
        held: 0,
        held_end: 0,
    };
    for i in 0..n.saturating_sub(1) {
        let end = st.segment_end(i);
        if end > st.hw {
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
        // Deletion is a prefix: once a segment is held, every later one is too.
        if due.held == 0 && floor.is_none_or(|f| end <= f) {
            due.count += 1;
        } else {
            if due.held == 0 {
                due.held_end = end;
            }
            due.held += 1;
        }
    }
    due
}

/// Time and size retention of every delete-policy topic. External groups with `protect`
/// (`groups.d`, re-read first) hold it back on the partitions they have not read: the
/// segments kept so are the gauge `retention_held_segments`, and each holding group gets
/// one warning per streak (and an info line when it no longer holds anything back).
pub fn enforce_retention(log: &Log, now: i64) -> Result<MaintenanceReport> {
    // A damaged group file fails the pass: an unknown offset may still need any segment.
    log.reload_external()?;
    let protected = log.protected_offsets();
    let mut r = MaintenanceReport::default();
    let mut held_total = 0u64;
    let mut holding: BTreeMap<String, (String, u32, u64, usize)> = BTreeMap::new();
    for name in log.topics() {
        let t = log.topic(&name)?;
        let cfg = t.config().clone();
        if !cfg.cleanup_policy.delete {
            continue;
        }
        for p in 0..cfg.partitions {
            let part: Arc<Partition> = log.partition(&name, p)?;
            let guards = protected.get(&(name.clone(), p));
            let floor = guards.and_then(|g| g.iter().map(|(_, o)| *o).min());
            let _m = lock(&part.maintenance);
            // `Log::close` waits for the partition's maintenance lock: past it, nothing
            // more may be written.
            log.check_not_closed()?;
            let due = retention_count(&part, &cfg, now, floor);
            let (s, b) = truncate_front(log, &part, due.count, true)?;
            r.deleted_segments += s;
            r.deleted_bytes += b;
            if due.held > 0 {
                held_total += due.held as u64;
                for (g, o) in guards.into_iter().flatten() {
                    if *o < due.held_end {
                        holding
                            .entry(g.clone())
                            .or_insert_with(|| (name.clone(), p, *o, due.held));
                    }
                }
            }
        }
    }
    log.metrics_ref()
        .retention_held_segments
        .store(held_total, Ordering::Relaxed);
    let mut streak = lock(&log.inner.retention_holds);
    for (g, (topic, partition, committed, segments)) in &holding {
        if !streak.contains(g) {
            tracing::warn!(group = %g, topic = %topic, partition, committed, segments, "retention held back: consumer group {g:?} (protect = true) has not read segments that retention would delete; the log grows until it catches up (or set the sink's protect = false, or delete the group)");
        }
    }
    for g in streak.iter() {
        if !holding.contains_key(g) {
            tracing::info!(group = %g, "consumer group no longer holds back retention");
        }
    }
    *streak = holding.into_keys().collect();
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
    // Consumers in other processes commit to `groups.d`: see their progress.
    log.reload_external()?;
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
