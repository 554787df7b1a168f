//! The [`Log`]: the directory, its topics, the flush that makes appends durable together
//! with the source checkpoint, consumer groups, the disk budget and maintenance.
//!
//! Owns the directory layout:
//!
//! ```text
//! <dir>/.lock                          flock held while open (one process at a time)
//! <dir>/ledger                         durable ends, log starts, checkpoint (ledger.rs)
//! <dir>/groups                         consumer-group committed offsets (groups.rs)
//! <dir>/topics/<topic>/topic.conf      topic config (topic_config.rs)
//! <dir>/topics/<topic>/<partition>/    segments: NNNNNNNNNNNNNNNNNNNN.{log,index,timeindex}
//! ```
//!
//! Invariants: a topic exists iff its `topic.conf` exists (a directory without one is a
//! creation interrupted by a crash and is removed on open). The ledger is written only by
//! `flush` (after fsyncing segment data), by retention (log start, before deleting files)
//! and on open when recovery had to move a bound; all ledger writes hold `ledger`'s mutex
//! and write the whole in-memory state. Lock order: `flush_lock` -> partition state ->
//! `ledger`; `groups` and `topics` are never held while taking a partition lock... except
//! `topics` (read) while iterating partitions, which never waits on anything else.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use crate::error::{LogError, Result};
use crate::fsutil::{self, DirLock};
use crate::groups::GroupStore;
use crate::ledger::{LedgerFile, LedgerState, LoadedFormat, PartitionMark};
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::notify::{HasNotifier, Notified, Notifier};
use crate::partition::{lock, AppendInfo, Partition};
use crate::partitioner::partition_for_key;
use crate::reader::{Reader, ResetPolicy, StartAt};
use crate::record::{now_ms, NewRecord};
use crate::topic_config::{validate_topic_name, TopicConfig};

/// When appends become durable without an explicit [`Log::flush`]. Automatic flushes keep
/// the last checkpoint: only an explicit `flush(Some(..))` moves it, so for exactly-once
/// the pipeline uses `Manual` and flushes before acknowledging a source position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlushPolicy {
    /// Only explicit `flush` calls (default).
    #[default]
    Manual,
    /// Every append is flushed before it returns.
    EveryAppend,
    /// Flush once this many bytes were appended since the last flush (checked inside
    /// `append`), or once appended data has waited `interval` without a flush (checked
    /// inside `append` *and* by a timer thread the `Log` owns, so a quiet producer's last
    /// records do not wait for the next append). Automatic flushes never move the
    /// checkpoint: a pipeline still flushes explicitly (`flush(Some(position))`) before
    /// acknowledging a source position; the threshold only bounds how long records stay
    /// invisible to readers.
    Threshold {
        bytes: Option<u64>,
        interval: Option<Duration>,
    },
}

/// Options of [`Log::open`].
#[derive(Debug, Clone)]
pub struct LogOptions {
    pub flush_policy: FlushPolicy,
    /// Bound on the bytes of all segment files. When reached, appends wait up to
    /// `budget_wait` for consumers/retention to free space, then fail with
    /// [`LogError::BudgetExhausted`] (transient). `None` = no budget.
    pub disk_budget_bytes: Option<u64>,
    pub budget_wait: Duration,
    /// On open, if the durable data is shorter than the ledger says (fsynced data lost),
    /// cut the ledger back instead of failing. Off by default: losing durable data should
    /// stop the pipeline, not silently replay from a checkpoint that is now ahead.
    pub accept_damaged_tail: bool,
    /// Run retention and compaction on a background thread at this interval.
    pub maintenance_interval: Option<Duration>,
    /// Open without the writer lock, for inspection tools and readers in another process
    /// than the writer (see [`Log::open_read_only`]). Nothing is created, repaired or
    /// deleted; every write fails with [`LogError::ReadOnly`].
    pub read_only: bool,
    /// How many `.log` files of segments dropped by retention (or disk-budget relief)
    /// each partition keeps to reuse as its next segments, instead of deleting them
    /// (Postgres' WAL recycling: overwriting blocks already written is cheaper to fsync
    /// than writing new ones). Default 2; 0 disables recycling. Pool files count toward
    /// the disk budget and are deleted first when it is short.
    pub recycle_segments: usize,
    /// Hand each full MiB of a partition's appends to a background writer thread, so the
    /// appending thread goes on encoding while the device writes (`stage.rs`). Default
    /// on. Durability is unchanged: a flush waits for those writes before it fsyncs.
    pub write_behind: bool,
    /// Memory bound of the cleaner's key map (Kafka's `log.cleaner.dedupe.buffer.size`),
    /// about 32 bytes per distinct key: a compaction run covers as many whole dirty
    /// segments as fit, and the next run goes on from there (`compaction.rs`). Default
    /// 64 MiB (about two million keys per run).
    pub cleaner_dedupe_bytes: usize,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            flush_policy: FlushPolicy::Manual,
            disk_budget_bytes: None,
            budget_wait: Duration::ZERO,
            accept_damaged_tail: false,
            maintenance_interval: None,
            read_only: false,
            recycle_segments: crate::recycle::DEFAULT_RECYCLE_SEGMENTS,
            write_behind: true,
            cleaner_dedupe_bytes: 64 << 20,
        }
    }
}

pub(crate) struct TopicInner {
    pub name: String,
    pub config: TopicConfig,
    pub partitions: Vec<Arc<Partition>>,
    round_robin: AtomicU32,
}

struct FlushClock {
    last: Instant,
}

pub(crate) struct BudgetSignal {
    pub notifier: Notifier,
}

impl HasNotifier for BudgetSignal {
    fn notifier(&self) -> &Notifier {
        &self.notifier
    }
}

pub(crate) struct LogInner {
    pub dir: PathBuf,
    _lock: Option<DirLock>,
    pub options: LogOptions,
    pub topics: RwLock<BTreeMap<String, Arc<TopicInner>>>,
    pub ledger: Mutex<LedgerState>,
    /// The writer's open ledger file (`None` when read-only). Taken after `ledger`.
    pub ledger_file: Mutex<Option<LedgerFile>>,
    /// Read-only logs: inotify watch on the directory (the writer's ledger writes).
    watcher: Option<fsutil::DirWatcher>,
    flush_lock: Mutex<FlushClock>,
    bytes_since_flush: AtomicU64,
    pub groups: Mutex<GroupStore>,
    pub metrics: Metrics,
    pub budget: Arc<BudgetSignal>,
    poisoned: Mutex<Option<String>>,
    /// [`Log::close`] ran: no more writes through any handle.
    closed: AtomicBool,
    stop: Arc<(Mutex<bool>, Condvar)>,
}

impl Drop for LogInner {
    fn drop(&mut self) {
        let (m, c) = &*self.stop;
        *lock(m) = true;
        c.notify_all();
    }
}

/// The embedded log. Cheap to clone (a shared handle); `Send + Sync`.
#[derive(Clone)]
pub struct Log {
    pub(crate) inner: Arc<LogInner>,
}

/// A topic handle, for appending. Cheap to clone.
#[derive(Clone)]
pub struct Topic {
    log: Log,
    inner: Arc<TopicInner>,
}

/// One partition in [`TopicDescription`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionDescription {
    pub partition: u32,
    pub log_start_offset: u64,
    /// Offset after the last durable record; readers see records below it.
    pub high_watermark: u64,
    /// Offset the next appended record gets (includes unflushed records).
    pub log_end_offset: u64,
    pub size_bytes: u64,
    pub segments: usize,
}

/// A group's position on one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupLag {
    pub group: String,
    pub topic: String,
    pub partition: u32,
    pub committed: u64,
    pub high_watermark: u64,
    /// `high_watermark - committed`, 0 if the group is ahead.
    pub lag: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    pub name: String,
    pub config: TopicConfig,
    pub partitions: Vec<PartitionDescription>,
    pub groups: Vec<GroupLag>,
}

/// What one flush made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlushInfo {
    pub partitions: usize,
    pub files_synced: usize,
    pub ledger_written: bool,
}

/// What a maintenance pass removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MaintenanceReport {
    pub deleted_segments: u64,
    pub deleted_bytes: u64,
    pub compacted_partitions: u64,
    pub removed_records: u64,
    pub reclaimed_bytes: u64,
}

fn topics_dir(dir: &Path) -> PathBuf {
    dir.join("topics")
}

fn list_topic_dirs(td: &Path) -> Result<Vec<String>> {
    let mut topic_names = Vec::new();
    let rd = match fs::read_dir(td) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(topic_names),
        Err(e) => return Err(LogError::io("listing", td, e)),
    };
    for ent in rd {
        let ent = ent.map_err(|e| LogError::io("listing", td, e))?;
        if let Some(name) = ent.file_name().to_str() {
            if ent.path().is_dir() && validate_topic_name(name).is_ok() {
                topic_names.push(name.to_string());
            }
        }
    }
    topic_names.sort();
    Ok(topic_names)
}

/// Opens (recovers) one topic's partitions against the ledger; `None` for a directory
/// without `topic.conf` (an interrupted creation: removed unless read-only).
fn open_topic(
    td: &Path,
    name: &str,
    ledger: &LedgerState,
    options: &LogOptions,
    metrics: &Metrics,
) -> Result<Option<Arc<TopicInner>>> {
    let tdir = td.join(name);
    let Some(config) = TopicConfig::load(&tdir)? else {
        if !options.read_only {
            tracing::warn!(topic = %name, "removing topic directory without topic.conf (creation interrupted)");
            fs::remove_dir_all(&tdir).map_err(|e| LogError::io("removing", &tdir, e))?;
        }
        return Ok(None);
    };
    let mut parts = Vec::with_capacity(config.partitions as usize);
    for p in 0..config.partitions {
        let key = (name.to_string(), p);
        let mark = ledger.partitions.get(&key).copied().unwrap_or_default();
        let (part, report) = Partition::open(name, p, tdir.join(p.to_string()), mark, options)?;
        if report.truncated_bytes > 0 || report.removed_segments > 0 {
            tracing::warn!(
                topic = %name,
                partition = p,
                durable_end = mark.durable_end,
                truncated_bytes = report.truncated_bytes,
                removed_segments = report.removed_segments,
                "recovery cut bytes past the durable end: unflushed or torn data (after a crash), or the stale rest of a recycled segment file (also after a clean stop); nothing durable is lost"
            );
        }
        Metrics::add(&metrics.recovery_truncated_bytes, report.truncated_bytes);
        Metrics::add(&metrics.recovery_removed_segments, report.removed_segments);
        Metrics::add(&metrics.recovery_rebuilt_indexes, report.rebuilt_indexes);
        parts.push(Arc::new(part));
    }
    Ok(Some(Arc::new(TopicInner {
        name: name.to_string(),
        config,
        partitions: parts,
        round_robin: AtomicU32::new(0),
    })))
}

impl Log {
    /// Opens (creating if needed) the log in `dir`, recovering every partition against the
    /// ledger (see `partition.rs`). Cuts are logged at warn level and counted in metrics.
    /// With `options.read_only`, see [`Log::open_read_only`].
    pub fn open(dir: impl AsRef<Path>, options: LogOptions) -> Result<Log> {
        let dir = dir.as_ref().to_path_buf();
        let read_only = options.read_only;
        let td = topics_dir(&dir);
        let lock_ = if read_only {
            if !dir.join(crate::ledger::FILE_NAME).exists() {
                return Err(LogError::NotALog(dir));
            }
            None
        } else {
            fs::create_dir_all(&td).map_err(|e| LogError::io("creating log directory", &dir, e))?;
            Some(DirLock::acquire(&dir)?)
        };
        let topic_names = list_topic_dirs(&td)?;
        let mut ledger_file = None;
        let mut ledger = match LedgerState::load(&dir)? {
            Some((l, format)) => {
                if !read_only {
                    let mut l = l;
                    ledger_file = Some(match format {
                        LoadedFormat::V1 => {
                            tracing::info!(dir = %dir.display(), "migrating the ledger to format 2 (two in-place slots)");
                            LedgerFile::create(&dir, &mut l)?
                        }
                        LoadedFormat::V2 { slot_size, newest } => {
                            LedgerFile::open(&dir, slot_size, newest, l.generation)?
                        }
                    });
                    l
                } else {
                    l
                }
            }
            None => {
                if topic_names
                    .iter()
                    .any(|t| td.join(t).join(crate::topic_config::FILE_NAME).exists())
                {
                    return Err(LogError::corrupt_file(
                        "ledger",
                        dir.join(crate::ledger::FILE_NAME),
                        "missing while topics exist",
                        "restore the log directory from a backup",
                    ));
                }
                let mut l = LedgerState::default();
                ledger_file = Some(LedgerFile::create(&dir, &mut l)?);
                l
            }
        };
        let metrics = Metrics::default();
        let mut topics = BTreeMap::new();
        let mut ledger_changed = false;
        for name in topic_names {
            let Some(topic) = open_topic(&td, &name, &ledger, &options, &metrics)? else {
                continue;
            };
            for part in &topic.partitions {
                let key = (name.clone(), part.id);
                let new_mark = part.mark();
                if !read_only && ledger.partitions.get(&key) != Some(&new_mark) {
                    ledger.partitions.insert(key, new_mark);
                    ledger_changed = true;
                }
            }
            topics.insert(name.clone(), topic);
        }
        // A ledger entry without its partition means a topic directory or config was lost
        // or damaged: refuse rather than forget durable data.
        for ((t, p), m) in &ledger.partitions {
            let known = topics
                .get(t)
                .is_some_and(|ti: &Arc<TopicInner>| *p < ti.config.partitions);
            if !known && m.durable_end > 0 && !read_only {
                return Err(LogError::DurableDataLost {
                    topic: t.clone(),
                    partition: *p,
                    ledger_end: m.durable_end,
                    found_end: 0,
                    detail: format!(
                        "the ledger has durable records for it but {} does not define it",
                        td.join(t).join(crate::topic_config::FILE_NAME).display()
                    ),
                });
            }
        }
        let ledger_file = Mutex::new(ledger_file);
        if ledger_changed {
            ledger.store(&ledger_file)?;
        }
        let total: u64 = topics
            .values()
            .flat_map(|t| t.partitions.iter())
            .map(|p| p.lock().disk_bytes())
            .sum();
        metrics.total_bytes.store(total, Ordering::Relaxed);
        let groups = GroupStore::load(&dir)?;
        let watcher = if read_only {
            Some(fsutil::DirWatcher::new(&dir)?)
        } else {
            None
        };
        let inner = Arc::new(LogInner {
            watcher,
            dir,
            _lock: lock_,
            options,
            topics: RwLock::new(topics),
            ledger: Mutex::new(ledger),
            ledger_file,
            flush_lock: Mutex::new(FlushClock {
                last: Instant::now(),
            }),
            bytes_since_flush: AtomicU64::new(0),
            groups: Mutex::new(groups),
            metrics,
            budget: Arc::new(BudgetSignal {
                notifier: Notifier::default(),
            }),
            poisoned: Mutex::new(None),
            closed: AtomicBool::new(false),
            stop: Arc::new((Mutex::new(false), Condvar::new())),
        });
        if !read_only {
            if let Some(every) = inner.options.maintenance_interval {
                spawn_maintenance(Arc::downgrade(&inner), inner.stop.clone(), every);
            }
            if let FlushPolicy::Threshold {
                interval: Some(every),
                ..
            } = inner.options.flush_policy
            {
                spawn_flusher(Arc::downgrade(&inner), inner.stop.clone(), every);
            }
        }
        Ok(Log { inner })
    }

    /// Opens an existing log for reading only, from any process, also while a writer
    /// (`cdc run`) holds it: takes no lock, creates, repairs and deletes nothing, and
    /// sees each partition up to the durable end the ledger recorded when it was read
    /// (unflushed or torn tails are ignored, not cut). [`Log::refresh`] catches up with
    /// the writer; [`Log::wait_for_change`] waits for it to write. Every write fails with
    /// [`LogError::ReadOnly`]. `log_end_offset` in [`Log::describe`] is then the high
    /// watermark (unflushed appends of the writer are invisible).
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Log> {
        Log::open(
            dir,
            LogOptions {
                read_only: true,
                ..LogOptions::default()
            },
        )
    }

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
                if let Some(t) =
                    open_topic(&td, &name, &state, &self.inner.options, &self.inner.metrics)?
                {
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
        let mut g = lock(&self.inner.groups);
        if g.generation != groups.generation {
            *g = groups;
            changed = true;
        }
        Ok(changed)
    }

    /// Read-only logs: one partition's [`Partition::refresh_read_only`] to `mark`. The
    /// writer's retention may drop, and recycle, a segment between the ledger read and the
    /// scan of its file (the scan then fails: missing file, or another segment's batches in
    /// it). Such a failure is retried with the ledger as it is now, as long as that moved
    /// the log start on (the view then restarts past the dropped segments); otherwise the
    /// error stands.
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
                Some(m) if attempts <= 3 && m.log_start > mark.log_start => {
                    tracing::debug!(topic, partition = part.id, error = %err, log_start = m.log_start, "read-only refresh raced with retention; retrying with the current ledger");
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
    /// just sleeps (use [`Reader::wait`] there).
    pub fn wait_for_change(&self, timeout: Duration) -> Result<bool> {
        match &self.inner.watcher {
            Some(w) => w.wait(timeout),
            None => {
                std::thread::sleep(timeout);
                Ok(false)
            }
        }
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    fn check_writable(&self) -> Result<()> {
        if self.inner.options.read_only {
            return Err(LogError::ReadOnly(self.inner.dir.clone()));
        }
        Ok(())
    }

    fn check_poisoned(&self) -> Result<()> {
        self.check_writable()?;
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(LogError::Closed(self.inner.dir.clone()));
        }
        match &*lock(&self.inner.poisoned) {
            Some(p) => Err(LogError::Poisoned(p.clone())),
            None => Ok(()),
        }
    }

    fn poison(&self, e: &LogError) {
        tracing::error!(error = %e, "log poisoned: refusing further writes until reopened");
        lock(&self.inner.poisoned).get_or_insert_with(|| e.to_string());
    }

    /// Creates a topic. Durable when this returns (its config file is fsynced).
    pub fn create_topic(&self, name: &str, config: TopicConfig) -> Result<Topic> {
        validate_topic_name(name)?;
        config.validate()?;
        self.check_poisoned()?;
        let mut topics = self.inner.topics.write().unwrap_or_else(|e| e.into_inner());
        if topics.contains_key(name) {
            return Err(LogError::TopicExists(name.to_string()));
        }
        let tdir = topics_dir(&self.inner.dir).join(name);
        if tdir.exists() {
            fs::remove_dir_all(&tdir).map_err(|e| LogError::io("removing stale", &tdir, e))?;
        }
        fs::create_dir_all(&tdir)
            .map_err(|e| LogError::io("creating topic directory", &tdir, e))?;
        let mut parts = Vec::new();
        for p in 0..config.partitions {
            let pdir = tdir.join(p.to_string());
            let part = Partition::new_empty(name, p, pdir.clone(), &self.inner.options)?;
            fsutil::sync_dir(&pdir)?;
            parts.push(Arc::new(part));
        }
        // The config file is written last: its existence is the topic's existence.
        config.store(&tdir)?;
        fsutil::sync_dir(&topics_dir(&self.inner.dir))?;
        {
            let mut l = lock(&self.inner.ledger);
            for p in 0..config.partitions {
                l.partitions
                    .insert((name.to_string(), p), PartitionMark::default());
            }
        }
        let inner = Arc::new(TopicInner {
            name: name.to_string(),
            config,
            partitions: parts,
            round_robin: AtomicU32::new(0),
        });
        topics.insert(name.to_string(), inner.clone());
        tracing::info!(
            topic = name,
            partitions = inner.config.partitions,
            "created topic"
        );
        Ok(Topic {
            log: self.clone(),
            inner,
        })
    }

    /// The topic handle, or `UnknownTopic`.
    pub fn topic(&self, name: &str) -> Result<Topic> {
        let topics = self.inner.topics.read().unwrap_or_else(|e| e.into_inner());
        let inner = topics
            .get(name)
            .cloned()
            .ok_or_else(|| LogError::UnknownTopic(name.to_string()))?;
        Ok(Topic {
            log: self.clone(),
            inner,
        })
    }

    /// Returns the topic, creating it with `config` if absent (an existing topic keeps its
    /// own config).
    pub fn topic_or_create(&self, name: &str, config: TopicConfig) -> Result<Topic> {
        match self.topic(name) {
            Ok(t) => Ok(t),
            Err(LogError::UnknownTopic(_)) => match self.create_topic(name, config) {
                Err(LogError::TopicExists(_)) => self.topic(name),
                r => r,
            },
            Err(e) => Err(e),
        }
    }

    /// Names of all topics, sorted.
    pub fn topics(&self) -> Vec<String> {
        let topics = self.inner.topics.read().unwrap_or_else(|e| e.into_inner());
        topics.keys().cloned().collect()
    }

    pub(crate) fn partition(&self, topic: &str, partition: u32) -> Result<Arc<Partition>> {
        let t = self.topic(topic)?;
        t.inner
            .partitions
            .get(partition as usize)
            .cloned()
            .ok_or(LogError::UnknownPartition {
                topic: topic.to_string(),
                partition,
                partitions: t.inner.config.partitions,
            })
    }

    pub(crate) fn all_partitions(&self) -> Vec<(Arc<TopicInner>, Arc<Partition>)> {
        let topics = self.inner.topics.read().unwrap_or_else(|e| e.into_inner());
        topics
            .values()
            .flat_map(|t| t.partitions.iter().map(move |p| (t.clone(), p.clone())))
            .collect()
    }

    /// Partitions, offsets, sizes and the lag of every group on the topic.
    pub fn describe(&self, topic: &str) -> Result<TopicDescription> {
        let t = self.topic(topic)?;
        let partitions = t
            .inner
            .partitions
            .iter()
            .map(|p| {
                let st = p.lock();
                PartitionDescription {
                    partition: p.id,
                    log_start_offset: st.log_start,
                    high_watermark: st.hw,
                    log_end_offset: st.leo,
                    size_bytes: st.size_bytes(),
                    segments: st.segments.len(),
                }
            })
            .collect();
        let groups = self
            .groups()
            .into_iter()
            .filter(|g| g.topic == topic)
            .collect();
        Ok(TopicDescription {
            name: topic.to_string(),
            config: t.inner.config.clone(),
            partitions,
            groups,
        })
    }

    /// A clean stop: ends writing through every handle of this log (later appends and
    /// flushes fail with [`LogError::Closed`]) and cuts each recycled active segment
    /// (`recycle.rs`) to its flushed bytes, so the next open has no stale tail to cut and
    /// report. Appends not flushed yet are discarded, as a crash would discard them.
    /// Dropping the log without `close` leaves the files as a crash does (recovery cuts
    /// and reports the stale tails). After a failed flush (the log is poisoned) nothing is
    /// cut: its ledger write may have reached the disk, and only recovery can tell.
    pub fn close(&self) -> Result<()> {
        if self.inner.options.read_only {
            return Ok(());
        }
        // No flush runs while, or after, the files are cut: the ledger must never name
        // bytes the cut removed.
        let _flushes = lock(&self.inner.flush_lock);
        if self.inner.closed.swap(true, Ordering::AcqRel) || lock(&self.inner.poisoned).is_some() {
            return Ok(());
        }
        for (_, p) in self.all_partitions() {
            p.cut_recycled_tail()?;
        }
        Ok(())
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

    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    pub(crate) fn options(&self) -> &LogOptions {
        &self.inner.options
    }

    pub(crate) fn metrics_ref(&self) -> &Metrics {
        &self.inner.metrics
    }

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
        self.check_writable()?;
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

    /// The group's committed offset for a partition, if any.
    pub fn committed(&self, group: &str, topic: &str, partition: u32) -> Option<u64> {
        lock(&self.inner.groups)
            .groups
            .get(group)
            .and_then(|m| m.get(&(topic.to_string(), partition)))
            .copied()
    }

    /// Every group's committed offset and lag on every partition it committed.
    pub fn groups(&self) -> Vec<GroupLag> {
        let snapshot = lock(&self.inner.groups).groups.clone();
        let mut out = Vec::new();
        for (g, entries) in snapshot {
            for ((t, p), committed) in entries {
                let hw = self
                    .partition(&t, p)
                    .map(|part| part.high_watermark())
                    .unwrap_or(0);
                out.push(GroupLag {
                    group: g.clone(),
                    topic: t,
                    partition: p,
                    committed,
                    high_watermark: hw,
                    lag: hw.saturating_sub(committed),
                });
            }
        }
        out
    }

    /// Sets the group's committed offset on every partition of `topic` to `to`, resolved
    /// per partition. Returns the offsets committed. (Stop the group's consumers first:
    /// a running consumer commits its own position over this.)
    pub fn reset_group(&self, group: &str, topic: &str, to: StartAt) -> Result<Vec<(u32, u64)>> {
        let t = self.topic(topic)?;
        let mut offsets = Vec::new();
        for part in &t.inner.partitions {
            let o = self.resolve(part, to)?;
            offsets.push((part.id, o));
        }
        self.commit_many(group, topic, &offsets)?;
        Ok(offsets)
    }

    /// Forgets a group entirely.
    pub fn delete_group(&self, group: &str) -> Result<bool> {
        self.check_writable()?;
        let mut g = lock(&self.inner.groups);
        let mut next = g.clone();
        let existed = next.groups.remove(group).is_some();
        if existed {
            next.store(&self.inner.dir)?;
            *g = next;
        }
        drop(g);
        self.inner.budget.notifier.notify_all();
        Ok(existed)
    }

    /// Lowest committed offset among groups registered on the partition, if any.
    pub(crate) fn min_committed(&self, topic: &str, partition: u32) -> Option<u64> {
        let g = lock(&self.inner.groups);
        let key = (topic.to_string(), partition);
        g.groups.values().filter_map(|m| m.get(&key)).min().copied()
    }

    /// Applies retention and compaction once (what the background thread does).
    pub fn run_maintenance(&self) -> Result<MaintenanceReport> {
        self.check_writable()?;
        let now = now_ms();
        for (t, p) in self.all_partitions() {
            let rolled = p.roll_if_due(t.config.segment_ms, now);
            self.settle_released(&p);
            rolled?;
            if let Err(e) = p.trim_if_idle() {
                // The stage kept its bytes; the next append or flush reports the error.
                tracing::warn!(topic = %t.name, partition = p.id, error = %e, "write-behind failed while trimming an idle partition");
            }
        }
        let mut r = crate::retention::enforce_retention(self, now_ms())?;
        for t in self.topics() {
            let topic = self.topic(&t)?;
            if topic.inner.config.cleanup_policy.compact {
                let c = crate::compaction::compact_topic(self, &t, now_ms())?;
                r.compacted_partitions += c.compacted_partitions;
                r.removed_records += c.removed_records;
                r.reclaimed_bytes += c.reclaimed_bytes;
            }
        }
        if r.deleted_bytes > 0 || r.reclaimed_bytes > 0 {
            self.inner.budget.notifier.notify_all();
        }
        Ok(r)
    }

    /// Deletes closed segments past `retention.ms` / `retention.bytes` of every topic whose
    /// policy includes `delete`; advances (and persists) the log start offset.
    pub fn enforce_retention(&self) -> Result<MaintenanceReport> {
        self.check_writable()?;
        let r = crate::retention::enforce_retention(self, now_ms())?;
        self.inner.budget.notifier.notify_all();
        Ok(r)
    }

    /// Compacts the closed segments of one topic (its policy must include `compact`).
    pub fn compact(&self, topic: &str) -> Result<MaintenanceReport> {
        self.check_writable()?;
        let r = crate::compaction::compact_topic(self, topic, now_ms())?;
        self.inner.budget.notifier.notify_all();
        Ok(r)
    }

    /// Like [`Log::compact`] with an explicit clock (tests, tools).
    pub fn compact_at(&self, topic: &str, now_ms: i64) -> Result<MaintenanceReport> {
        self.check_writable()?;
        crate::compaction::compact_topic(self, topic, now_ms)
    }

    /// Reads every batch of every segment of `topic`, checking CRCs and record structure.
    /// Slow (reads everything); for operators and tests.
    pub fn verify(&self, topic: &str) -> Result<u64> {
        let t = self.topic(topic)?;
        let mut n = 0;
        for p in &t.inner.partitions {
            n += crate::reader::verify_partition(p)?;
        }
        Ok(n)
    }

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

    pub(crate) fn budget_has_room(&self) -> bool {
        match self.inner.options.disk_budget_bytes {
            None => true,
            Some(b) => self.inner.metrics.total_bytes.load(Ordering::Relaxed) < b,
        }
    }

    fn budget_has_room_or_free(&self) -> Result<bool> {
        if self.budget_has_room() {
            return Ok(true);
        }
        crate::retention::free_for_budget(self)?;
        Ok(self.budget_has_room())
    }

    fn admit(&self) -> Result<()> {
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
                used = self.inner.metrics.total_bytes.load(Ordering::Relaxed),
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
            used: self.inner.metrics.total_bytes.load(Ordering::Relaxed),
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

    fn after_append(&self, info: &AppendInfo, records: usize) -> Result<()> {
        let m = &self.inner.metrics;
        Metrics::add(&m.appended_records, records as u64);
        Metrics::add(&m.appended_bytes, info.bytes);
        Metrics::add(&m.appended_batches, 1);
        Metrics::add(&m.total_bytes, info.bytes);
        let since = self
            .inner
            .bytes_since_flush
            .fetch_add(info.bytes, Ordering::Relaxed)
            + info.bytes;
        match self.inner.options.flush_policy {
            FlushPolicy::Manual => {}
            FlushPolicy::EveryAppend => {
                self.flush(None)?;
            }
            FlushPolicy::Threshold { bytes, interval } => {
                let due_bytes = bytes.is_some_and(|b| since >= b);
                let due_time =
                    interval.is_some_and(|i| lock(&self.inner.flush_lock).last.elapsed() >= i);
                if due_bytes || due_time {
                    self.flush(None)?;
                }
            }
        }
        Ok(())
    }
}

impl Topic {
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn config(&self) -> &TopicConfig {
        &self.inner.config
    }

    pub fn partitions(&self) -> u32 {
        self.inner.config.partitions
    }

    /// Appends `records` as one batch to `partition`; returns the offsets they got. Not
    /// visible to readers (nor durable) until the next [`Log::flush`].
    pub fn append(&self, partition: u32, records: &[NewRecord<'_>]) -> Result<AppendInfo> {
        self.log.check_poisoned()?;
        let part =
            self.inner
                .partitions
                .get(partition as usize)
                .ok_or(LogError::UnknownPartition {
                    topic: self.inner.name.clone(),
                    partition,
                    partitions: self.inner.config.partitions,
                })?;
        if records.is_empty() {
            return Err(LogError::InvalidArgument("append of zero records".into()));
        }
        if self.inner.config.cleanup_policy.compact && records.iter().any(|r| r.key.is_none()) {
            return Err(LogError::InvalidArgument(format!(
                "topic {:?} is compacted: every record needs a key",
                self.inner.name
            )));
        }
        self.log.admit()?;
        let info = part.append(
            records,
            self.inner.config.compression,
            self.inner.config.segment_bytes,
            self.inner.config.segment_ms,
        );
        // A roll inside the append may have closed a recycled segment (its stale length
        // leaves the disk usage), also when the append then failed.
        self.log.settle_released(part);
        let info = info?;
        self.log.after_append(&info, records.len())?;
        Ok(info)
    }

    /// The partition Kafka's default partitioner gives `key`; keyless records go
    /// round-robin (see `partitioner.rs`).
    pub fn partition_for(&self, key: Option<&[u8]>) -> u32 {
        let n = self.inner.config.partitions;
        match key {
            Some(k) => partition_for_key(k, n),
            None => self.inner.round_robin.fetch_add(1, Ordering::Relaxed) % n,
        }
    }

    /// Appends records choosing each one's partition with the partitioner, one batch per
    /// partition, preserving order within a partition. Returns (partition, offset) per
    /// record, in input order.
    pub fn append_keyed(&self, records: &[NewRecord<'_>]) -> Result<Vec<(u32, u64)>> {
        let n = self.inner.config.partitions as usize;
        let targets: Vec<u32> = records.iter().map(|r| self.partition_for(r.key)).collect();
        let mut out = vec![(0u32, 0u64); records.len()];
        let mut group: Vec<NewRecord<'_>> = Vec::with_capacity(records.len());
        let mut idx: Vec<usize> = Vec::with_capacity(records.len());
        for p in 0..n as u32 {
            group.clear();
            idx.clear();
            for (i, r) in records.iter().enumerate() {
                if targets[i] == p {
                    group.push(*r);
                    idx.push(i);
                }
            }
            if group.is_empty() {
                continue;
            }
            let info = self.append(p, &group)?;
            for (j, &i) in idx.iter().enumerate() {
                out[i] = (p, info.base_offset + j as u64);
            }
        }
        Ok(out)
    }

    /// High watermark of a partition (offset after the last durable record).
    pub fn high_watermark(&self, partition: u32) -> Option<u64> {
        self.inner
            .partitions
            .get(partition as usize)
            .map(|p| p.high_watermark())
    }
}

/// The timer of `FlushPolicy::Threshold { interval: Some(..) }`: flushes (keeping the
/// checkpoint) when appended data has waited `every` without a flush. Ticks at half the
/// interval, so unflushed data waits at most about 1.5 x the interval.
fn spawn_flusher(weak: Weak<LogInner>, stop: Arc<(Mutex<bool>, Condvar)>, every: Duration) {
    let tick = (every / 2).max(Duration::from_millis(1));
    let spawned = std::thread::Builder::new()
        .name("cdc-log-flusher".into())
        .spawn(move || loop {
            {
                let (m, c) = &*stop;
                let g = lock(m);
                let (g, _) = c
                    .wait_timeout_while(g, tick, |stopped| !*stopped)
                    .unwrap_or_else(|e| e.into_inner());
                if *g {
                    return;
                }
            }
            let Some(inner) = weak.upgrade() else { return };
            let due = inner.bytes_since_flush.load(Ordering::Relaxed) > 0
                && lock(&inner.flush_lock).last.elapsed() >= every;
            if !due {
                continue;
            }
            let log = Log { inner };
            if let Err(e) = log.flush(None) {
                if !matches!(e, LogError::Poisoned(_)) {
                    tracing::warn!(error = %e, transient = e.is_transient(), "timed flush failed");
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "could not start the log flush timer; flush explicitly");
    }
}

fn spawn_maintenance(weak: Weak<LogInner>, stop: Arc<(Mutex<bool>, Condvar)>, every: Duration) {
    let spawned = std::thread::Builder::new()
        .name("cdc-log-maintenance".into())
        .spawn(move || loop {
            {
                let (m, c) = &*stop;
                let g = lock(m);
                let (g, _) = c
                    .wait_timeout_while(g, every, |stopped| !*stopped)
                    .unwrap_or_else(|e| e.into_inner());
                if *g {
                    return;
                }
            }
            let Some(inner) = weak.upgrade() else { return };
            let log = Log { inner };
            match log.run_maintenance() {
                Ok(_) => {}
                // A clean stop (`Log::close`): nothing more to maintain.
                Err(LogError::Closed(_)) => return,
                Err(e) => {
                    tracing::warn!(error = %e, transient = e.is_transient(), "log maintenance failed")
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "could not start the log maintenance thread; call run_maintenance yourself");
    }
}

#[cfg(test)]
mod refresh_race_tests {
    use super::*;
    use crate::reader::StartAt;
    use crate::record::NewRecord;

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
