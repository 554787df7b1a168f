//! The read-only view: a log opened with [`Log::open_read_only`] (by any process, without
//! the lock) catching up with the writer that holds the directory. [`Log::refresh`]
//! re-reads the ledger and the group offsets (the writer's `groups` and `groups.d`), opens
//! new topics (retried like a read-only open, `open.rs`) and extends every partition to
//! the new durable end (`partition/refresh.rs`); [`Log::wait_for_change`] sleeps on the
//! directory's inotify watch until the writer writes.
//!
//! Invariants: a view changes nothing on disk and shows no record past the durable end of
//! the ledger it last read. The writer works on while the view reads: its retention may
//! drop and recycle a segment between the view's ledger read and its scan, and its roll
//! may cut a file the view is reading. A partition's refresh is all or nothing
//! (`partition/refresh.rs`), so a failed one is retried, a few times and briefly apart,
//! with the ledger as it is then; a failure that persists (real damage: durable bytes
//! missing while the writer moves on, or while nothing writes) fails the refresh. The
//! ledger state counts as read only once every partition was refreshed to it, so the next
//! refresh after a failed one tries again.

use std::time::Duration;

use super::open::{list_topic_dirs, may_be_a_race, open_topic, retry_read_only};
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
        let mut changed = lock(&self.inner.ledger).generation != state.generation;
        if changed {
            let td = topics_dir(dir);
            let known: Vec<String> = self.topics();
            for name in list_topic_dirs(&td)? {
                if known.contains(&name)
                    || !td.join(&name).join(crate::topic_config::FILE_NAME).exists()
                {
                    continue;
                }
                let opened = retry_read_only(dir, || {
                    open_topic(
                        &td,
                        &name,
                        &state,
                        &self.inner.options,
                        &self.inner.metrics,
                        None,
                    )
                })?;
                if let Some(t) = opened {
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
            // Only now is this ledger state the view's: after a failed refresh the next
            // one must not take the view for current and skip its partitions.
            *lock(&self.inner.ledger) = state;
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
    /// scan of its file (the scan then fails: missing file, or another segment's batches
    /// in it). A failed refresh changed nothing, so one that may be such a race is retried
    /// a few times, briefly apart, with the ledger as it is then (a moved log start
    /// restarts the view past the dropped segments); a failure that persists stands.
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
            if !may_be_a_race(&err) {
                // Damage, a permission, the disk: trying again changes nothing.
                return Err(err);
            }
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
    use crate::partition::race;
    use crate::reader::StartAt;
    use crate::record::NewRecord;
    use crate::topic_config::TopicConfig;
    use std::cell::Cell;
    use std::path::{Path, PathBuf};
    use std::rc::Rc;

    fn segment_path(dir: &Path, base: u64) -> PathBuf {
        topics_dir(dir)
            .join("t")
            .join("0")
            .join(crate::segment::log_file_name(base))
    }

    /// (segment base offsets, recycle-pool files) of partition t-0.
    fn listing(dir: &Path) -> (Vec<u64>, usize) {
        let (mut bases, mut pool) = (Vec::new(), 0);
        for e in std::fs::read_dir(topics_dir(dir).join("t").join("0")).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().to_string();
            match crate::segment::parse_file_name(&name) {
                Some((b, "log")) => bases.push(b),
                Some((_, "log.recycle")) => pool += 1,
                _ => {}
            }
        }
        bases.sort_unstable();
        (bases, pool)
    }

    /// Every record of the view's t-0, from its log start to its high watermark, is the
    /// writer's (`val` at every offset), gaplessly.
    fn assert_view_reads_all(view: &Log, val: &[u8]) {
        let d = view.describe("t").unwrap().partitions[0].clone();
        let mut r = view.reader("t", 0, StartAt::Earliest).unwrap();
        let mut next = d.log_start_offset;
        loop {
            let recs = r.poll(1 << 20).unwrap();
            if recs.is_empty() {
                break;
            }
            for rec in recs {
                assert_eq!(rec.offset, next);
                assert_eq!(rec.value.as_deref(), Some(val));
                next += 1;
            }
        }
        assert_eq!(next, d.high_watermark);
    }

    /// A writer whose partition t-0 has 4 KiB segments, trimmed by size retention so its
    /// rolls reuse pool files; a read-only view opened on it; then the writer appends
    /// `val` records until a roll into a recycled file (the view does not know that
    /// segment yet) and flushes. Returns (writer, topic, view, the new segment's base).
    /// Makes the writer roll once, in the middle of the view's scan of segment `a`: it
    /// appends a record that overflows the segment, so the roll cuts `a`'s recycled file
    /// to its data. The cell says whether it fired.
    fn roll_when_scanning(t: crate::log::Topic, a: u64) -> Rc<Cell<bool>> {
        let fired = Rc::new(Cell::new(false));
        let hook_fired = fired.clone();
        let big = vec![7u8; 4000];
        race::set_before_scan(Some(Box::new(move |base| {
            if base == a && !hook_fired.replace(true) {
                t.append(0, &[NewRecord::new(None, Some(&big), 0)]).unwrap();
            }
        })));
        fired
    }

    /// The view is at the writer's high watermark and reads every record.
    fn assert_view_equals_writer(view: &Log, w: &Log, val: &[u8]) {
        let want = w.describe("t").unwrap().partitions[0].high_watermark;
        assert_eq!(
            view.describe("t").unwrap().partitions[0].high_watermark,
            want
        );
        assert_view_reads_all(view, val);
    }

    fn writer_rolled_into_a_recycled_file(
        dir: &Path,
        val: &[u8],
    ) -> (Log, crate::log::Topic, Log, u64) {
        let w = Log::open(dir, LogOptions::default()).unwrap();
        let t = w
            .create_topic(
                "t",
                TopicConfig {
                    partitions: 1,
                    segment_bytes: 4 << 10,
                    retention_ms: None,
                    retention_bytes: Some(8 << 10),
                    segment_ms: None,
                    ..TopicConfig::default()
                },
            )
            .unwrap();
        let put = || {
            t.append(0, &[NewRecord::new(None, Some(val), 0)]).unwrap();
        };
        let mut rounds = 0;
        while listing(dir).1 == 0 || w.metrics().recycled_segments == 0 {
            for _ in 0..5 {
                put();
            }
            w.flush(None).unwrap();
            w.enforce_retention().unwrap();
            rounds += 1;
            assert!(rounds < 1000, "retention never filled the recycle pool");
        }
        let view = Log::open_read_only(dir).unwrap();
        let active = *listing(dir).0.last().unwrap();
        // Past the view's high watermark, into the segment the view holds last, until the
        // roll (the record that made it roll is the new segment's first).
        while *listing(dir).0.last().unwrap() == active {
            put();
        }
        let a = *listing(dir).0.last().unwrap();
        let stale = std::fs::metadata(segment_path(dir, a)).unwrap().len();
        assert!(
            stale > 1000,
            "segment {a} reuses a pool file (its stale bytes: {stale})"
        );
        w.flush(None).unwrap();
        (w, t, view, a)
    }

    /// The interleaving of a tailing reader's failure under load ("the ledger records
    /// durable end offset 647 but the segments end at offset 501", on `…554.log`): the
    /// view's refresh scans its last segment up to the base of a segment the writer rolled
    /// into a recycled file, takes that segment on and stats it (the pool file's stale
    /// length); then the writer rolls again, which cuts that file to the segment's exact
    /// size; then the view reads the length it statted. The short read must not fail the
    /// refresh, nor leave the view with a segment past its high watermark.
    #[test]
    fn a_refresh_racing_the_roll_that_cuts_a_recycled_segment_catches_up() {
        let dir = tempfile::tempdir().unwrap();
        let val = vec![7u8; 100];
        let (w, t, view, a) = writer_rolled_into_a_recycled_file(dir.path(), &val);
        let before = view.describe("t").unwrap().partitions[0].high_watermark;
        assert!(before < a, "the view must scan into the new segment");
        let fired = roll_when_scanning(t, a);
        let refreshed = view.refresh();
        race::set_before_scan(None);
        assert!(
            fired.get(),
            "the writer rolled during the scan of segment {a}"
        );
        let cut = std::fs::metadata(segment_path(dir.path(), a))
            .unwrap()
            .len();
        assert!(cut < 1000, "the roll cut segment {a}'s file ({cut} bytes)");
        refreshed.unwrap();
        assert_view_equals_writer(&view, &w, &val);
    }

    /// The same roll, racing a read-only open (`cdc sink`, `cdc log tail` starting while
    /// `cdc run` writes): the open stats the segment it scans last, the writer's roll cuts
    /// that recycled file, the open reads the statted length. The open must not fail.
    #[test]
    fn a_read_only_open_racing_the_roll_that_cuts_its_last_segment_succeeds() {
        let dir = tempfile::tempdir().unwrap();
        let val = vec![7u8; 100];
        let (w, t, _, a) = writer_rolled_into_a_recycled_file(dir.path(), &val);
        let fired = roll_when_scanning(t, a);
        let opened = Log::open_read_only(dir.path());
        race::set_before_scan(None);
        assert!(
            fired.get(),
            "the writer rolled during the scan of segment {a}"
        );
        let view = opened.unwrap();
        assert_view_equals_writer(&view, &w, &val);
    }

    /// A refresh that fails (here: a segment the ledger covers is short while nothing
    /// writes, which stays an error) leaves the view exactly as it was, and once the file
    /// is whole again the next refresh catches up (before, the first attempt had already
    /// taken the new segments on and recorded the ledger as read).
    #[test]
    fn a_failed_refresh_changes_nothing_and_the_next_one_catches_up() {
        let dir = tempfile::tempdir().unwrap();
        let val = vec![7u8; 100];
        let (w, _t, view, a) = writer_rolled_into_a_recycled_file(dir.path(), &val);
        let before = view.describe("t").unwrap().partitions[0].clone();
        let path = segment_path(dir.path(), a);
        let bytes = std::fs::read(&path).unwrap();
        let damaged = Rc::new(Cell::new(false));
        let hook_damaged = damaged.clone();
        let hook_path = path.clone();
        race::set_before_scan(Some(Box::new(move |base| {
            if base == a && !hook_damaged.replace(true) {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&hook_path)
                    .unwrap();
                f.set_len(0).unwrap();
            }
        })));
        let err = view.refresh().unwrap_err();
        race::set_before_scan(None);
        assert!(damaged.get());
        assert!(
            matches!(err, crate::error::LogError::DurableDataLost { .. }),
            "unexpected {err}"
        );
        assert_eq!(view.describe("t").unwrap().partitions[0], before);
        assert_view_reads_all(&view, &val);
        // Whole again: the next refresh catches up.
        std::fs::write(&path, &bytes).unwrap();
        assert!(view.refresh().unwrap());
        let want = w.describe("t").unwrap().partitions[0].high_watermark;
        assert_eq!(
            view.describe("t").unwrap().partitions[0].high_watermark,
            want
        );
        assert_view_reads_all(&view, &val);
    }

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
