//! The [`Log`] handle and its catalogue of topics: the types every part of the log shares
//! (options, the shared `LogInner`, [`Topic`], the descriptions) and the directory layout.
//! The rest of `Log`'s methods live in child modules, one job each, all over the same
//! `LogInner`:
//!
//! - `open`: opening a directory, recovering every topic against the ledger;
//! - `append`: [`Topic`] appends and the [`FlushPolicy`] (when an append, or its timer,
//!   flushes on its own);
//! - `flush`: [`Log::flush`] (the durability protocol) and [`Log::close`];
//! - `view`: a read-only log catching up with the writer of another process;
//! - `consumers`: readers and consumer groups' committed offsets, merged over both
//!   stores (the writer's `groups` file and `groups.d`);
//! - `external`: external groups (`groups.d`): commits from any process, locks, reset;
//! - `budget`: the disk budget and the disk-usage gauge it is checked against;
//! - `maintenance`: retention, compaction and verification, and the thread that runs them.
//!
//! Owns the directory layout:
//!
//! ```text
//! <dir>/.lock                          flock held while open (one process at a time)
//! <dir>/ledger                         durable ends, log starts, checkpoint (ledger.rs)
//! <dir>/groups                         consumer-group committed offsets (groups.rs)
//! <dir>/groups.d/<group>.group         external groups' offsets + protect flag (external.rs)
//! <dir>/groups.d/<group>.lock          flock held while a consumer of the group is open
//! <dir>/topics/<topic>/topic.conf      topic config (topic_config.rs)
//! <dir>/topics/<topic>/<partition>/    segments: NNNNNNNNNNNNNNNNNNNN.{log,index,timeindex}
//! ```
//!
//! Invariants: a topic exists iff its `topic.conf` exists (a directory without one is a
//! creation interrupted by a crash and is removed on open, unless the ledger holds durable
//! records of the topic: then the file was lost, and open refuses instead). A partition
//! the ledger marks durable is never deleted. The ledger is written only by
//! `flush` (after fsyncing segment data), by retention (log start, before deleting files)
//! and on open when recovery had to move a bound; all ledger writes hold `ledger`'s mutex
//! and write the whole in-memory state. Lock order: `flush_lock` -> partition state ->
//! `ledger`; `groups`, `external` and `topics` are never held while taking a partition lock... except
//! `topics` (read) while iterating partitions, which never waits on anything else.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{LogError, Result};
use crate::fsutil::{self, DirLock};
use crate::groups::GroupStore;
use crate::ledger::{LedgerFile, LedgerState, PartitionMark};
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::notify::{HasNotifier, Notifier};
use crate::partition::{lock, Partition};
use crate::topic_config::{validate_topic_name, TopicConfig};

mod append;
mod budget;
mod consumers;
mod external;
mod flush;
mod maintenance;
mod open;
mod view;

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
    /// Bytes that other writers sharing the same disk budget hold outside the log (the
    /// connector passes the source's spill files here): counted with the log's own bytes
    /// when the budget is checked. Their owner frees them without telling the log, so a
    /// waiter on [`Log::budget_ready`] should also re-check on a timer.
    pub budget_shared_bytes: Option<Arc<AtomicU64>>,
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
    /// The counters and gauges this log updates. `None`: its own, from zero. A process
    /// that closes and reopens its log (the connector does on every transient failure)
    /// passes one here, so that counters add up across opens and what an open reported
    /// (a recovery cut, a ledger slot fallback) is still exported after the next one.
    pub metrics: Option<Arc<Metrics>>,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            flush_policy: FlushPolicy::Manual,
            disk_budget_bytes: None,
            budget_wait: Duration::ZERO,
            budget_shared_bytes: None,
            accept_damaged_tail: false,
            maintenance_interval: None,
            read_only: false,
            recycle_segments: crate::recycle::DEFAULT_RECYCLE_SEGMENTS,
            write_behind: true,
            cleaner_dedupe_bytes: 64 << 20,
            metrics: None,
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
    /// The handles given out (`Log::user`): none left means the log was dropped.
    users: std::sync::Weak<UserHandle>,
    pub dir: PathBuf,
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
    /// The groups of `groups.d` (`external.rs`) as last read; re-read (cheaply, by file
    /// stamps) before every decision that depends on them.
    pub external: Mutex<crate::external::ExternalStore>,
    /// Groups holding back time/size retention in the last pass (one warning per streak).
    pub retention_holds: Mutex<std::collections::BTreeSet<String>>,
    pub metrics: Arc<Metrics>,
    pub budget: Arc<BudgetSignal>,
    poisoned: Mutex<Option<String>>,
    /// [`Log::close`] ran: no more writes through any handle.
    closed: AtomicBool,
    stop: Arc<(Mutex<bool>, Condvar)>,
    /// The background threads (maintenance, flush timer): `close` and `Drop` stop and join
    /// them before the directory lock is released.
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The writer's lock on the directory (`None` when read-only or after `close`).
    /// Declared last on purpose: fields drop in declaration order, so a log dropped
    /// without `close` releases the lock only after its partitions (and their stages,
    /// which wait for their write-behind writes) are gone.
    dir_lock: Mutex<Option<DirLock>>,
}

impl LogInner {
    /// Wakes the background threads and tells them to end.
    fn request_stop(&self) {
        let (m, c) = &*self.stop;
        *lock(m) = true;
        c.notify_all();
    }

    /// Joins every background thread but the calling one (the last handle may be dropped
    /// by a background thread itself, which then ends on its own).
    fn join_threads(&self) {
        let handles = std::mem::take(&mut *lock(&self.threads));
        let me = std::thread::current().id();
        for h in handles {
            if h.thread().id() == me {
                continue;
            }
            if h.join().is_err() {
                tracing::error!("a background thread of the log panicked");
            }
        }
    }
}

impl Drop for LogInner {
    fn drop(&mut self) {
        // A background thread holds the log (strongly) only while it works, so none is
        // writing now; they wait for their next tick and end here.
        self.request_stop();
        self.join_threads();
    }
}

/// The embedded log. Cheap to clone (a shared handle); `Send + Sync`.
#[derive(Clone)]
pub struct Log {
    pub(crate) inner: Arc<LogInner>,
    /// Shared by every handle the API gave out (clones included); `None` in the handle a
    /// background thread holds while it works (see `should_stop`).
    pub(crate) user: Option<Arc<UserHandle>>,
}

/// The token of the handles given out (`Log::user`); `LogInner::users` counts them.
pub(crate) struct UserHandle;

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
    /// `None`: a group of the writer's own store (`Log::commit`; the disk budget keeps
    /// its unread records). `Some(protect)`: an external group (`groups.d`, committed
    /// with [`Log::commit_external`]); with `protect` retention and the budget keep its
    /// unread records, without it they ignore the group.
    pub protect: Option<bool>,
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

impl Log {
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    fn check_writable(&self) -> Result<()> {
        if self.inner.options.read_only {
            return Err(LogError::ReadOnly(self.inner.dir.clone()));
        }
        Ok(())
    }

    /// Writable and not closed: every operation that changes files (appends, flushes,
    /// commits, maintenance) checks this first.
    fn check_open(&self) -> Result<()> {
        self.check_writable()?;
        self.check_not_closed()
    }

    /// [`Log::close`] has started: long work (a compaction pass) checks this between
    /// batches and stops, leaving the files as they were before the unfinished step.
    pub(crate) fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// Long work (a compaction pass) stops between batches when this turns true: the log
    /// is closing, or this is a background thread's handle and the last other handle is
    /// gone (the log was dropped without `close`: the pass stops, the thread lets go, and
    /// the directory lock is released without waiting for the whole pass).
    pub(crate) fn should_stop(&self) -> bool {
        self.is_closed() || (self.user.is_none() && self.inner.users.strong_count() == 0)
    }

    /// `Err(Closed)` once [`Log::close`] has started (see `is_closed`).
    pub(crate) fn check_not_closed(&self) -> Result<()> {
        if self.is_closed() {
            return Err(LogError::Closed(self.inner.dir.clone()));
        }
        Ok(())
    }

    fn check_poisoned(&self) -> Result<()> {
        self.check_open()?;
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
            // Left by an interrupted creation, unless the ledger says it holds durable
            // records (then it is refused, never deleted).
            open::refuse_if_durable(&tdir, name, &lock(&self.inner.ledger))?;
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

    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    pub(crate) fn options(&self) -> &LogOptions {
        &self.inner.options
    }

    /// The live counters themselves (to export them after this handle is gone, or to pass
    /// to the next open as [`LogOptions::metrics`]).
    pub fn shared_metrics(&self) -> Arc<Metrics> {
        self.inner.metrics.clone()
    }

    pub(crate) fn metrics_ref(&self) -> &Metrics {
        &self.inner.metrics
    }
}
