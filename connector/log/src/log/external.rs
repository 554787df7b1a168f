//! External consumer groups (`groups.d`, format and lock in `external.rs`): the groups a
//! sink commits, from the writer's process or from another process that opened the log
//! read-only. [`Log::commit_external`] works on both kinds of open because it never
//! touches the writer's files; the writer reads `groups.d` (re-reading only files whose
//! stamp changed) at each maintenance pass, whenever it needs the groups' minimum offsets
//! (retention, the disk budget) and when asked for the groups; a read-only view on
//! [`Log::refresh`] and the same reads.
//!
//! Invariants: one consumer per group — [`Log::lock_group`] takes the group's `flock` and
//! refuses while anyone (this process included) holds it; a commit refuses while another
//! process holds it; a reset or a deletion refuses while anyone does. A commit is durable
//! (fsynced, renamed into place) before the in-memory copy changes. A damaged group file
//! is an error for retention (it must not delete what an unknown offset may still need);
//! infallible reads (`committed`, `groups`) keep the last good copy and warn.

use std::collections::BTreeMap;

use super::Log;
use crate::error::{LogError, Result};
use crate::external::{self, ExternalGroup, GroupLock, Holder};
use crate::partition::lock;

/// Holding a group's lock for the time of one change: taken here, or already held by a
/// consumer of this process (commits only).
enum Held {
    Taken(#[allow(dead_code)] GroupLock),
    ByThisProcess,
}

/// One external group as read: its name, its protect flag, its offsets per partition.
pub(crate) type ExternalSnapshot = (String, bool, BTreeMap<(String, u32), u64>);

impl Log {
    /// Takes the lock of consumer group `group` (`groups.d/<group>.lock`), held until the
    /// returned value is dropped: while it is held, no other consumer (in any process) can
    /// take it, and reset/deletion of the group refuse. Fails with
    /// [`LogError::GroupLocked`] (naming the holder's pid) when someone holds it.
    pub fn lock_group(&self, group: &str) -> Result<GroupLock> {
        external::check_name(group)?;
        match external::try_lock(&self.inner.dir, group)? {
            Ok(l) => Ok(l),
            Err(Holder::Me) => Err(external::locked(
                &self.inner.dir,
                group,
                Some(std::process::id()),
            )),
            Err(Holder::Other(pid)) => Err(external::locked(&self.inner.dir, group, pid)),
        }
    }

    fn hold_for_change(&self, group: &str, commit: bool) -> Result<Held> {
        match external::try_lock(&self.inner.dir, group)? {
            Ok(l) => Ok(Held::Taken(l)),
            Err(Holder::Me) if commit => Ok(Held::ByThisProcess),
            Err(Holder::Me) => Err(external::locked(
                &self.inner.dir,
                group,
                Some(std::process::id()),
            )),
            Err(Holder::Other(pid)) => Err(external::locked(&self.inner.dir, group, pid)),
        }
    }

    /// Commits `offsets` — (topic, partition, next offset to read) — for external group
    /// `group`, durably, in its own file: works on a writable and on a read-only log.
    /// Offsets of other partitions already stored stay. `protect` is stored with the group:
    /// with it retention (time and size) and the disk budget keep every record the group
    /// has not read; without it they ignore the group, whose offsets may then fall below
    /// the log start. Refused ([`LogError::GroupLocked`]) while another process holds the
    /// group's lock.
    pub fn commit_external(
        &self,
        group: &str,
        protect: bool,
        offsets: &[(&str, u32, u64)],
    ) -> Result<()> {
        self.check_not_closed()?;
        external::check_name(group)?;
        for &(t, p, _) in offsets {
            let topic = self.topic(t)?;
            if p >= topic.partitions() {
                return Err(LogError::UnknownPartition {
                    topic: t.into(),
                    partition: p,
                    partitions: topic.partitions(),
                });
            }
        }
        let _held = self.hold_for_change(group, true)?;
        let dir = &self.inner.dir;
        let mut g = external::load(&external::group_path(dir, group))?.unwrap_or_default();
        g.name = group.to_string();
        g.protect = protect;
        g.generation += 1;
        for &(t, p, o) in offsets {
            g.offsets.insert((t.to_string(), p), o);
        }
        external::store(dir, &g)?;
        lock(&self.inner.external).put(dir, g);
        // A consumer advancing may let the disk budget free space.
        self.inner.budget.notifier.notify_all();
        Ok(())
    }

    /// The external group's file as it is on disk now (`None`: no such group). Unlike
    /// [`Log::committed`], a damaged file is an error here, so a consumer never mistakes
    /// it for a new group.
    pub fn external_group(&self, group: &str) -> Result<Option<ExternalGroup>> {
        external::check_name(group)?;
        external::load(&external::group_path(&self.inner.dir, group))
    }

    /// Sets an external group's offsets on some partitions of `topic` (an operator's
    /// reset: refused while any consumer holds the group's lock). Keeps its protect flag.
    pub fn reset_external(&self, group: &str, topic: &str, offsets: &[(u32, u64)]) -> Result<()> {
        self.check_not_closed()?;
        let _held = self.hold_for_change(group, false)?;
        let dir = &self.inner.dir;
        let Some(mut g) = external::load(&external::group_path(dir, group))? else {
            return Err(LogError::InvalidArgument(format!(
                "{group:?} is not an external consumer group"
            )));
        };
        g.generation += 1;
        for &(p, o) in offsets {
            g.offsets.insert((topic.to_string(), p), o);
        }
        external::store(dir, &g)?;
        lock(&self.inner.external).put(dir, g);
        self.inner.budget.notifier.notify_all();
        Ok(())
    }

    /// Removes an external group's file (refused while its lock is held). Returns whether
    /// it existed.
    pub(crate) fn delete_external(&self, group: &str) -> Result<bool> {
        self.check_not_closed()?;
        if external::check_name(group).is_err() {
            return Ok(false);
        }
        let dir = &self.inner.dir;
        if !external::group_path(dir, group).exists() {
            return Ok(false);
        }
        let _held = self.hold_for_change(group, false)?;
        let existed = external::remove(dir, group)?;
        lock(&self.inner.external).forget(dir, group);
        Ok(existed)
    }

    /// Re-reads `groups.d` where it changed. Returns whether anything did.
    pub(crate) fn reload_external(&self) -> Result<bool> {
        lock(&self.inner.external).reload(&self.inner.dir)
    }

    /// [`Log::reload_external`] for reads that cannot fail: keeps the last good copy.
    pub(crate) fn reload_external_or_warn(&self) {
        if let Err(e) = self.reload_external() {
            tracing::warn!(error = %e, "could not re-read the external consumer groups; using the last copy read");
        }
    }

    /// The external group's committed offset on a partition, from the last reload.
    pub(crate) fn external_committed(&self, group: &str, topic: &str, p: u32) -> Option<u64> {
        lock(&self.inner.external)
            .get(group)
            .and_then(|g| g.offsets.get(&(topic.to_string(), p)).copied())
    }

    /// Every external group: (name, protect, offsets), from the last reload.
    pub(crate) fn external_snapshot(&self) -> Vec<ExternalSnapshot> {
        lock(&self.inner.external)
            .groups()
            .map(|g| (g.name.clone(), g.protect, g.offsets.clone()))
            .collect()
    }

    /// Per partition, the protecting groups' offsets (group, committed), from the last
    /// reload: what time/size retention must not delete.
    pub(crate) fn protected_offsets(&self) -> BTreeMap<(String, u32), Vec<(String, u64)>> {
        let mut out: BTreeMap<(String, u32), Vec<(String, u64)>> = BTreeMap::new();
        for g in lock(&self.inner.external).groups().filter(|g| g.protect) {
            for (tp, o) in &g.offsets {
                out.entry(tp.clone())
                    .or_default()
                    .push((g.name.clone(), *o));
            }
        }
        out
    }
}
