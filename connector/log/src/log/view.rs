//! The read-only view: a log opened with [`Log::open_read_only`] (by any process, without
//! the lock) catching up with the writer that holds the directory. [`Log::refresh`]
//! re-reads the ledger and the group offsets (the writer's `groups` and `groups.d`), opens new topics and extends every partition
//! to the new durable end (`partition/refresh.rs`); [`Log::wait_for_change`] sleeps on the
//! directory's inotify watch until the writer writes.
//!
//! Invariants: a view changes nothing on disk and shows no record past the durable end of
//! the ledger it last read. The writer's retention may drop and recycle a segment between
//! the view's ledger read and its scan; such a failed scan is retried with the ledger as it
//! is now, only while that moved the log start on, so real damage still fails the refresh.

use std::time::Duration;

use super::open::{list_topic_dirs, open_topic};
use super::{topics_dir, Log};
use crate::error::Result;
use crate::groups::GroupStore;
use crate::ledger::{LedgerState, PartitionMark};
use crate::partition::{lock, Partition};

/// Tries of one partition's read-only refresh before its error stands.
const REFRESH_ATTEMPTS: u32 = 5;

impl Log {
    /// True for a log opened with [`Log::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.inner.options.read_only
    }

    /// Read-only logs: re-reads the ledger, the group offsets and the topic list, and
    /// extends every partition to its new durable end (new topics appear, retention's
    /// new log starts apply), waking this process's tailing readers. Returns whether
    /// anything changed. A no-op returning `false` on a writable log (it is always current).
    pub fn refresh(&self) -> Result<bool> {
        if !self.is_read_only() {
            return Ok(false);
        }
        let dir = &self.inner.dir;
        let Some((state, _)) = LedgerState::load(dir)? else {
            return Ok(false);
        };
        let mut changed = false;
        {
            let mut l = lock(&self.inner.ledger);
            if l.generation == state.generation {
                drop(l);
            } else {
                changed = true;
                *l = state.clone();
            }
        }
        if changed {
            let td = topics_dir(dir);
            let known: Vec<String> = self.topics();
            for name in list_topic_dirs(&td)? {
                if known.contains(&name)
                    || !td.join(&name).join(crate::topic_config::FILE_NAME).exists()
                {
                    continue;
                }
                if let Some(t) = open_topic(
                    &td,
                    &name,
                    &state,
                    &self.inner.options,
                    &self.inner.metrics,
                    None,
                )? {
                    self.inner
                        .topics
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(name, t);
                }
            }
            for (t, part) in self.all_partitions() {
                if let Some(m) = state.partitions.get(&(t.name.clone(), part.id)) {
                    self.refresh_partition(&t.name, &part, *m)?;
                }
            }
        }
        let groups = GroupStore::load(dir)?;
        {
            let mut g = lock(&self.inner.groups);
            if g.generation != groups.generation {
                *g = groups;
                changed = true;
            }
        }
        // External groups (`groups.d`): only the files whose stamp changed are read.
        changed |= self.reload_external()?;
        Ok(changed)
    }

    /// Read-only logs: one partition's [`Partition::refresh_read_only`] to `mark`. The
    /// writer's retention may drop, and recycle, a segment between the ledger read and the
    /// scan of its file (the scan then fails: missing file, a file cut short under the
    /// read, or another segment's batches in it), and it may do so before its ledger says
    /// so. Such a failure is retried a few times, briefly apart, with the ledger as it is
    /// then (a moved log start restarts the view past the dropped segments); a failure
    /// that persists stands.
    fn refresh_partition(
        &self,
        topic: &str,
        part: &Partition,
        mut mark: PartitionMark,
    ) -> Result<()> {
        let mut attempts = 0;
        loop {
            let err = match part.refresh_read_only(mark) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            attempts += 1;
            let now = LedgerState::load(&self.inner.dir)?
                .and_then(|(s, _)| s.partitions.get(&(topic.to_string(), part.id)).copied());
            match now {
                Some(m) if attempts <= REFRESH_ATTEMPTS => {
                    tracing::debug!(topic, partition = part.id, error = %err, log_start = m.log_start, "read-only refresh may have raced with retention; retrying with the current ledger");
                    if m.log_start <= mark.log_start {
                        // The writer may not have recorded the new log start yet.
                        std::thread::sleep(Duration::from_millis(10 * attempts as u64));
                    }
                    mark = m;
                }
                _ => return Err(err),
            }
        }
    }

    /// Read-only logs: blocks until a file in the log directory changes (the writer
    /// flushed, committed, created a topic) or `timeout` passes, using an inotify watch
    /// set up at open (no polling; changes between two waits are queued, not lost).
    /// Returns false on timeout. Call [`Log::refresh`] after it. On a writable log it
    /// just sleeps (use [`Reader::wait`](crate::Reader::wait) there).
    pub fn wait_for_change(&self, timeout: Duration) -> Result<bool> {
        match &self.inner.watcher {
            Some(w) => w.wait(timeout),
            None => {
                std::thread::sleep(timeout);
                Ok(false)
            }
        }
    }
}

#[cfg(test)]
mod refresh_race_tests {
    use super::*;
    use crate::log::LogOptions;
    use crate::reader::StartAt;
    use crate::record::NewRecord;
    use crate::topic_config::TopicConfig;

    /// A read-only view refreshed to a ledger state that retention has outrun since (the
    /// view's segments were dropped, their files recycled and overwritten, or deleted)
    /// fails that scan, retries with the current ledger and ends up equal to the writer's
    /// durable state.
    #[test]
    fn a_refresh_that_races_with_retention_retries_with_the_current_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let w = Log::open(dir.path(), LogOptions::default()).unwrap();
        let t = w
            .create_topic(
                "t",
                TopicConfig {
                    partitions: 1,
                    segment_bytes: 8 << 10,
                    retention_ms: None,
                    retention_bytes: Some(16 << 10),
                    segment_ms: None,
                    ..TopicConfig::default()
                },
            )
            .unwrap();
        let val = vec![7u8; 1000];
        let put = |n: usize| {
            for _ in 0..n {
                t.append(0, &[NewRecord::new(Some(b"k"), Some(&val), 0)])
                    .unwrap();
            }
            w.flush(None).unwrap();
        };
        put(20);
        let view = Log::open_read_only(dir.path()).unwrap();
        let probe = Log::open_read_only(dir.path()).unwrap();
        // The state the views are refreshed to, stale by the time they get to it.
        put(20);
        let stale =
            LedgerState::load(dir.path()).unwrap().unwrap().0.partitions[&("t".to_string(), 0)];
        for _ in 0..10 {
            put(20);
            w.enforce_retention().unwrap();
        }
        assert!(w.metrics().recycled_segments > 0);
        let current = w.describe("t").unwrap().partitions[0].clone();
        assert!(current.log_start_offset > stale.durable_end);
        // Without the retry the scan fails.
        assert!(probe
            .partition("t", 0)
            .unwrap()
            .refresh_read_only(stale)
            .is_err());
        // With it the view catches up with the writer.
        view.refresh_partition("t", &view.partition("t", 0).unwrap(), stale)
            .unwrap();
        let got = view.describe("t").unwrap().partitions[0].clone();
        assert_eq!(got.log_start_offset, current.log_start_offset);
        assert_eq!(got.high_watermark, current.high_watermark);
        let mut r = view.reader("t", 0, StartAt::Earliest).unwrap();
        let mut next = current.log_start_offset;
        loop {
            let recs = r.poll(1 << 20).unwrap();
            if recs.is_empty() {
                break;
            }
            for rec in recs {
                assert_eq!(rec.offset, next);
                assert_eq!(rec.value.as_deref(), Some(&val[..]));
                next += 1;
            }
        }
        assert_eq!(next, current.high_watermark);
    }
}
