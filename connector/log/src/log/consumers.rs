//! The consuming side: [`Reader`]s of one partition (from an offset, a time, the earliest
//! or the latest record) and consumer groups — durable committed offsets (`groups.rs`,
//! the writer's store; `external.rs`, one file per group in `groups.d`, which the reads,
//! reset and deletion here merge with it), lag, reset, deletion.
//!
//! Invariants: a change of committed offsets is written to the group file before it is
//! applied in memory, so what readers and retention see was made durable first. A group
//! that starts without a committed offset under `Earliest` or `Latest` commits its start
//! at once, so the disk budget protects its unread records (`min_committed`). Every
//! change wakes the appends waiting on the budget: consumers moving on may let it free
//! space.

use std::collections::BTreeMap;

use super::{GroupLag, Log};
use crate::error::{LogError, Result};
use crate::partition::{lock, Partition};
use crate::reader::{Reader, ResetPolicy, StartAt};

impl Log {
    /// A reader of one partition starting at `start`, with reset policy `None` (reading
    /// below the log start is an `OffsetOutOfRange` error; see [`Reader::set_reset_policy`]).
    pub fn reader(&self, topic: &str, partition: u32, start: StartAt) -> Result<Reader> {
        let part = self.partition(topic, partition)?;
        Reader::new(self.clone(), part, start, ResetPolicy::None, None)
    }

    /// A reader for consumer group `group`: starts at the group's committed offset; with
    /// none, at `reset` (Earliest/Latest — and registers the group there by committing
    /// it, so the disk budget protects its unread records) or fails with
    /// `NoCommittedOffset` for `ResetPolicy::None`. The same policy applies when the
    /// committed offset has fallen below the log start.
    pub fn consumer(
        &self,
        group: &str,
        topic: &str,
        partition: u32,
        reset: ResetPolicy,
    ) -> Result<Reader> {
        let part = self.partition(topic, partition)?;
        let start = match self.committed(group, topic, partition) {
            Some(o) => StartAt::Offset(o),
            None => {
                let s = match reset {
                    ResetPolicy::Earliest => StartAt::Earliest,
                    ResetPolicy::Latest => StartAt::Latest,
                    ResetPolicy::None => {
                        return Err(LogError::NoCommittedOffset {
                            group: group.into(),
                            topic: topic.into(),
                            partition,
                        })
                    }
                };
                let o = self.resolve(&part, s)?;
                self.commit(group, topic, partition, o)?;
                StartAt::Offset(o)
            }
        };
        Reader::new(self.clone(), part, start, reset, Some(group.to_string()))
    }

    /// The offset `start` designates now (Earliest = log start, Latest = high watermark,
    /// Timestamp = first durable offset with timestamp >= t, or the high watermark).
    pub fn resolve_offset(&self, topic: &str, partition: u32, start: StartAt) -> Result<u64> {
        let part = self.partition(topic, partition)?;
        self.resolve(&part, start)
    }

    pub(crate) fn resolve(&self, part: &Partition, start: StartAt) -> Result<u64> {
        match start {
            StartAt::Offset(o) => Ok(o),
            StartAt::Earliest => Ok(part.lock().log_start),
            StartAt::Latest => Ok(part.high_watermark()),
            StartAt::Timestamp(ts) => crate::reader::offset_for_time(part, ts),
        }
    }

    /// Commits `offset` (the next offset to read) for `group` on one partition, durably.
    pub fn commit(&self, group: &str, topic: &str, partition: u32, offset: u64) -> Result<()> {
        self.commit_many(group, topic, &[(partition, offset)])
    }

    /// Commits several partitions of one topic in one durable write.
    pub fn commit_many(&self, group: &str, topic: &str, offsets: &[(u32, u64)]) -> Result<()> {
        self.check_open()?;
        if group.is_empty() || group.len() > u16::MAX as usize {
            return Err(LogError::InvalidArgument(
                "group name must be 1..65535 bytes".into(),
            ));
        }
        let t = self.topic(topic)?;
        for &(p, _) in offsets {
            if p >= t.inner.config.partitions {
                return Err(LogError::UnknownPartition {
                    topic: topic.into(),
                    partition: p,
                    partitions: t.inner.config.partitions,
                });
            }
        }
        {
            let mut g = lock(&self.inner.groups);
            let mut next = g.clone();
            let e = next.groups.entry(group.to_string()).or_default();
            for &(p, o) in offsets {
                e.insert((topic.to_string(), p), o);
            }
            next.store(&self.inner.dir)?;
            *g = next;
        }
        // Consumers advancing may let the budget free space.
        self.inner.budget.notifier.notify_all();
        Ok(())
    }

    /// The group's committed offset for a partition, if any: the external group's
    /// (`groups.d`, re-read where it changed) if it has one there, else the writer's store.
    pub fn committed(&self, group: &str, topic: &str, partition: u32) -> Option<u64> {
        self.reload_external_or_warn();
        if let Some(o) = self.external_committed(group, topic, partition) {
            return Some(o);
        }
        lock(&self.inner.groups)
            .groups
            .get(group)
            .and_then(|m| m.get(&(topic.to_string(), partition)))
            .copied()
    }

    /// Every group's committed offset and lag on every partition it committed: the
    /// writer's store and the external groups (`groups.d`, re-read where it changed).
    /// Where a group has an offset in both, the external one is shown (and used).
    pub fn groups(&self) -> Vec<GroupLag> {
        self.reload_external_or_warn();
        let mut merged: BTreeMap<(String, String, u32), (u64, Option<bool>)> = BTreeMap::new();
        for (g, entries) in lock(&self.inner.groups).groups.clone() {
            for ((t, p), o) in entries {
                merged.insert((g.clone(), t, p), (o, None));
            }
        }
        for (g, protect, entries) in self.external_snapshot() {
            for ((t, p), o) in entries {
                merged.insert((g.clone(), t, p), (o, Some(protect)));
            }
        }
        let mut out = Vec::new();
        for ((g, t, p), (committed, protect)) in merged {
            let hw = self
                .partition(&t, p)
                .map(|part| part.high_watermark())
                .unwrap_or(0);
            out.push(GroupLag {
                group: g,
                topic: t,
                partition: p,
                committed,
                high_watermark: hw,
                lag: hw.saturating_sub(committed),
                protect,
            });
        }
        out
    }

    /// Sets the group's committed offset on every partition of `topic` to `to`, resolved
    /// per partition. Returns the offsets committed. An external group (`groups.d`) is
    /// reset in its own file, also on a read-only log, and only while no consumer holds
    /// its lock ([`LogError::GroupLocked`]); any other group in the writer's store (stop
    /// its consumers first: a running consumer commits its own position over this).
    pub fn reset_group(&self, group: &str, topic: &str, to: StartAt) -> Result<Vec<(u32, u64)>> {
        let t = self.topic(topic)?;
        let mut offsets = Vec::new();
        for part in &t.inner.partitions {
            let o = self.resolve(part, to)?;
            offsets.push((part.id, o));
        }
        if self.external_group(group).ok().flatten().is_some() {
            self.reset_external(group, topic, &offsets)?;
        } else {
            self.commit_many(group, topic, &offsets)?;
        }
        Ok(offsets)
    }

    /// Forgets a group entirely, in both stores. Its external file (`groups.d`) is removed
    /// also on a read-only log, and only while no consumer holds the group's lock
    /// ([`LogError::GroupLocked`]); an entry in the writer's store needs a writable log.
    pub fn delete_group(&self, group: &str) -> Result<bool> {
        self.check_not_closed()?;
        let internal = lock(&self.inner.groups).groups.contains_key(group);
        if internal {
            // Checked before the external file goes, so a refusal changes nothing.
            self.check_open()?;
        }
        let mut existed = self.delete_external(group)?;
        if internal {
            let mut g = lock(&self.inner.groups);
            let mut next = g.clone();
            existed |= next.groups.remove(group).is_some();
            next.store(&self.inner.dir)?;
            *g = next;
        }
        self.inner.budget.notifier.notify_all();
        Ok(existed)
    }

    /// Lowest committed offset among groups registered on the partition, if any: the
    /// writer's store and the external groups with `protect` (as last reloaded; the
    /// budget's caller reloads first). External groups without it do not count.
    pub(crate) fn min_committed(&self, topic: &str, partition: u32) -> Option<u64> {
        let key = (topic.to_string(), partition);
        let internal = {
            let g = lock(&self.inner.groups);
            g.groups.values().filter_map(|m| m.get(&key)).min().copied()
        };
        let external = lock(&self.inner.external)
            .groups()
            .filter(|g| g.protect)
            .filter_map(|g| g.offsets.get(&key))
            .min()
            .copied();
        match (internal, external) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
