//! Opening a log directory ([`Log::open`]): the writer's lock, the ledger (created, or
//! migrated from format 1), every topic's partitions recovered against it
//! (`partition/recovery.rs`), the ledger rewritten when recovery moved a bound, and the
//! background threads started.
//!
//! Invariants: a writer's open refuses to forget durable data — a ledger entry with
//! durable records but no topic or partition defining it is `DurableDataLost`, and a
//! missing ledger while topics exist is a corrupt file. A topic directory without
//! `topic.conf` is a creation a crash interrupted when the ledger holds no durable record
//! of the topic: a writer removes it, a read-only open skips it. When the ledger does hold
//! durable records of it, the file was lost and open refuses (`TopicConfigMissing`, which
//! says how to put it back or give the data up); nothing is deleted. With
//! `accept_damaged_tail`, ledger entries of partitions that no longer exist are dropped
//! (logged at error level) instead of refused. A read-only open takes no lock, writes
//! nothing and starts no thread; the threads a writer starts are joined by `Log::close`
//! (or when the last handle is dropped). A read-only open reads files a writer in another
//! process changes meanwhile (retention deletes and recycles segments, a roll cuts a file
//! under the read): an error such a change may cause is retried, a few times and briefly
//! apart, from the ledger on; one that persists (damage) stands.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Instant;

use super::append::spawn_flusher;
use super::maintenance::spawn_maintenance;
use super::{
    topics_dir, BudgetSignal, FlushClock, FlushPolicy, Log, LogInner, LogOptions, TopicInner,
};
use crate::error::{LogError, Result};
use crate::fsutil::{self, DirLock};
use crate::groups::GroupStore;
use crate::ledger::{LedgerFile, LedgerState, LoadedFormat, SlotFallback};
use crate::metrics::Metrics;
use crate::notify::Notifier;
use crate::partition::Partition;
use crate::topic_config::{validate_topic_name, TopicConfig};

pub(super) fn list_topic_dirs(td: &Path) -> Result<Vec<String>> {
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
/// without `topic.conf` (an interrupted creation: removed unless read-only, refused when
/// the ledger holds durable records of it). `fallback`: the ledger was loaded from its
/// older slot; what recovery cuts past its durable ends is then reported as possibly
/// acknowledged records, at error level.
pub(super) fn open_topic(
    td: &Path,
    name: &str,
    ledger: &LedgerState,
    options: &LogOptions,
    metrics: &Metrics,
    fallback: Option<&SlotFallback>,
) -> Result<Option<Arc<TopicInner>>> {
    let tdir = td.join(name);
    let Some(config) = TopicConfig::load(&tdir)? else {
        if !options.read_only {
            refuse_if_durable(&tdir, name, ledger)?;
            tracing::warn!(topic = %name, dir = %tdir.display(), "removing topic directory without topic.conf (creation interrupted; the ledger holds no durable record of it)");
            fs::remove_dir_all(&tdir).map_err(|e| LogError::io("removing", &tdir, e))?;
        }
        return Ok(None);
    };
    let mut parts = Vec::with_capacity(config.partitions as usize);
    for p in 0..config.partitions {
        let key = (name.to_string(), p);
        let mark = ledger.partitions.get(&key).copied().unwrap_or_default();
        let (part, report) = Partition::open(
            name,
            p,
            tdir.join(p.to_string()),
            mark,
            options,
            fallback.is_some(),
        )?;
        let lost_end = report
            .valid_end_before_cut
            .filter(|&e| e > mark.durable_end);
        if let (Some(f), Some(end)) = (fallback, lost_end) {
            let claimed = f
                .unverified
                .as_ref()
                .and_then(|u| u.partitions.get(&key))
                .map(|m| m.durable_end);
            tracing::error!(
                topic = %name,
                partition = p,
                durable_end = mark.durable_end,
                cut_from = mark.durable_end,
                cut_to = end,
                cut_records = end - mark.durable_end,
                damaged_slot_durable_end = ?claimed,
                truncated_bytes = report.truncated_bytes,
                "recovery against the older ledger slot cut records that were flushed: offsets cut_from..cut_to were on disk in valid batches; the damaged newest slot most likely made those up to damaged_slot_durable_end durable (acknowledged to the source), unless the process died while writing it"
            );
            Metrics::add(&metrics.ledger_fallback_cut_records, end - mark.durable_end);
        } else if report.truncated_bytes > 0 || report.removed_segments > 0 {
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

/// Whether a topic directory holds a non-empty segment file (`<partition>/<base>.log`).
fn holds_records(tdir: &Path) -> bool {
    let Ok(parts) = fs::read_dir(tdir) else {
        return false;
    };
    parts.filter_map(|p| p.ok()).any(|p| {
        fs::read_dir(p.path()).is_ok_and(|files| {
            files.filter_map(|f| f.ok()).any(|f| {
                f.file_name().to_string_lossy().ends_with(".log")
                    && f.metadata().is_ok_and(|m| m.is_file() && m.len() > 0)
            })
        })
    })
}

/// A checkpoint for a log line: the text if it is short printable UTF-8, else hex.
fn printable(c: Option<&[u8]>) -> String {
    let Some(c) = c else {
        return "(none)".into();
    };
    let c = &c[..c.len().min(256)];
    match std::str::from_utf8(c) {
        Ok(s) if s.chars().all(|ch| !ch.is_control()) => s.to_string(),
        _ => c.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

/// The error-level line of a ledger that fell back to its older slot (`ledger.rs`).
fn report_fallback(dir: &Path, f: &SlotFallback, used: &LedgerState) {
    let lost_checkpoint = f
        .unverified
        .as_ref()
        .map(|u| printable(u.checkpoint.as_deref()));
    tracing::error!(
        dir = %dir.display(),
        file = %dir.join(crate::ledger::FILE_NAME).display(),
        damaged_slot = f.corrupt_slot,
        damaged_sequence = f.corrupt_sequence,
        reason = %f.reason,
        used_sequence = f.used_sequence,
        resume_checkpoint = %printable(used.checkpoint.as_deref()),
        damaged_slot_checkpoint = ?lost_checkpoint,
        "the newest ledger slot is damaged: the log falls back to the older slot and its checkpoint (resume_checkpoint). Either the process died while writing it (that flush never returned: nothing acknowledged is lost) or it was damaged after it was written (what that flush made durable is lost; damaged_slot_checkpoint is what it most likely said, unverified). Recovery now cuts every record past the older slot's durable ends"
    );
}

/// A topic directory without `topic.conf` may be removed only when the ledger holds no
/// durable record of the topic: `TopicConfigMissing` otherwise (see `LogError`).
pub(super) fn refuse_if_durable(tdir: &Path, name: &str, ledger: &LedgerState) -> Result<()> {
    let durable: Vec<String> = ledger
        .partitions
        .iter()
        .filter(|((t, _), m)| t == name && m.durable_end > 0)
        .map(|((_, p), m)| format!("partition {p} (offsets {}..{})", m.log_start, m.durable_end))
        .collect();
    if durable.is_empty() {
        return Ok(());
    }
    // Creation makes every partition directory before it writes topic.conf, so the
    // directories tell the partition count; the ledger bounds it from below.
    let in_ledger = ledger
        .partitions
        .keys()
        .filter(|(t, _)| t == name)
        .map(|(_, p)| p + 1)
        .max()
        .unwrap_or(0);
    let in_dirs = fs::read_dir(tdir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .map(|p| p + 1)
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    let err = LogError::TopicConfigMissing {
        topic: name.to_string(),
        file: tdir.join(crate::topic_config::FILE_NAME),
        durable: durable.join(", "),
        partitions: in_ledger.max(in_dirs),
    };
    tracing::error!(topic = %name, error = %err, "refusing to open the log: a topic with durable records has no topic.conf");
    Err(err)
}

/// Tries of a read-only open (of the log, or of a topic a refresh found) before its
/// error stands.
const READ_ONLY_OPEN_ATTEMPTS: u32 = 5;

/// Whether `e`, met by a read-only open or refresh, may come from the writer (another process)
/// changing the files between the open's reads rather than from damage: retention
/// deleted or recycled a segment after the ledger or the listing was read (a file or an
/// index gone, a segment holding another segment's batches, segments missing below the
/// durable end), or a roll cut a file after its length was read (a short read).
pub(super) fn may_be_a_race(e: &LogError) -> bool {
    match e {
        LogError::DurableDataLost { .. } | LogError::CorruptSegment { .. } => true,
        LogError::Io { source, .. } => matches!(
            source.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::UnexpectedEof
        ),
        _ => false,
    }
}

/// Runs a read-only open, again (briefly apart, a few times) while it fails in a way
/// [`may_be_a_race`] with the writer: each try reads the ledger, the listing and the files
/// anew, and the writer's change is over by then. Damage persists, and its error stands.
pub(super) fn retry_read_only<T>(dir: &Path, mut open: impl FnMut() -> Result<T>) -> Result<T> {
    let mut attempts = 0;
    loop {
        match open() {
            Err(e) if attempts < READ_ONLY_OPEN_ATTEMPTS && may_be_a_race(&e) => {
                attempts += 1;
                tracing::debug!(dir = %dir.display(), error = %e, attempts, "read-only open may have raced with the writer; retrying");
                std::thread::sleep(std::time::Duration::from_millis(10 * attempts as u64));
            }
            r => return r,
        }
    }
}

impl Log {
    /// Opens (creating if needed) the log in `dir`, recovering every partition against the
    /// ledger (see `partition/recovery.rs`). Cuts are logged at warn level and counted in
    /// metrics. With `options.read_only`, see [`Log::open_read_only`].
    pub fn open(dir: impl AsRef<Path>, options: LogOptions) -> Result<Log> {
        let dir = dir.as_ref();
        if options.read_only {
            return retry_read_only(dir, || Log::open_once(dir, options.clone()));
        }
        Log::open_once(dir, options)
    }

    pub(crate) fn open_once(dir: &Path, options: LogOptions) -> Result<Log> {
        let dir = dir.to_path_buf();
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
        let mut slot_fallback = None;
        let mut ledger = match LedgerState::load_checked(&dir)? {
            Some((l, format, fallback)) => {
                match fallback {
                    // A reader racing the writer's in-place slot write sees a torn slot:
                    // normal, and the live writer's own open would have said more.
                    Some(f) if read_only => {
                        tracing::debug!(dir = %dir.display(), reason = %f.reason, "read-only open: the newest ledger slot did not verify (a write in progress?); using the older one");
                    }
                    f => slot_fallback = f,
                }
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
                // The ledger is created by the first open, before any topic: topics (or a
                // topic directory holding records, topic.conf or not) without it mean it
                // was lost, and open must not treat their directories as interrupted
                // creations.
                if topic_names.iter().any(|t| {
                    td.join(t).join(crate::topic_config::FILE_NAME).exists()
                        || holds_records(&td.join(t))
                }) {
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
        // Before recovery changes anything: a durable topic without its config is refused.
        if !read_only {
            for name in &topic_names {
                let tdir = td.join(name);
                if !tdir.join(crate::topic_config::FILE_NAME).exists() {
                    refuse_if_durable(&tdir, name, &ledger)?;
                }
            }
        }
        let metrics = options.metrics.clone().unwrap_or_default();
        if let Some(f) = &slot_fallback {
            report_fallback(&dir, f, &ledger);
            Metrics::add(&metrics.ledger_slot_fallbacks, 1);
        }
        let mut topics = BTreeMap::new();
        let mut ledger_changed = false;
        for name in topic_names {
            let Some(topic) = open_topic(
                &td,
                &name,
                &ledger,
                &options,
                &metrics,
                slot_fallback.as_ref(),
            )?
            else {
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
        let mut forgotten = Vec::new();
        for ((t, p), m) in &ledger.partitions {
            let known = topics
                .get(t)
                .is_some_and(|ti: &Arc<TopicInner>| *p < ti.config.partitions);
            if !known && m.durable_end > 0 && !read_only {
                if options.accept_damaged_tail {
                    // The operator gave the data up (LogError::TopicConfigMissing says how).
                    tracing::error!(topic = %t, partition = p, log_start = m.log_start, durable_end = m.durable_end,
                        "durable records of a partition that no longer exists are forgotten, as accept_damaged_tail allows");
                    forgotten.push((t.clone(), *p));
                    continue;
                }
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
        for key in forgotten {
            ledger.partitions.remove(&key);
            ledger_changed = true;
        }
        if slot_fallback.is_some() {
            // Write the state used over the damaged slot, so the next open does not report
            // the same fallback again.
            ledger_changed = true;
            let cut = metrics.ledger_fallback_cut_records.load(Ordering::Relaxed);
            tracing::error!(
                dir = %dir.display(),
                cut_records = cut,
                resume_checkpoint = %printable(ledger.checkpoint.as_deref()),
                "the log recovered from the older ledger slot: cut_records flushed records past its durable ends are gone (see the lines above for each partition), and the source must resume from resume_checkpoint; if the source was told a later position was durable (the damaged slot's), the changes between the two are lost"
            );
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
        let mut external = crate::external::ExternalStore::default();
        external.reload(&dir)?;
        let watcher = if read_only {
            Some(fsutil::DirWatcher::new(&dir)?)
        } else {
            None
        };
        // Every handle given out shares `user`; the background threads' handles do not.
        let user = Arc::new(super::UserHandle);
        let inner = Arc::new(LogInner {
            users: Arc::downgrade(&user),
            watcher,
            dir,
            dir_lock: Mutex::new(lock_),
            threads: Mutex::new(Vec::new()),
            options,
            topics: RwLock::new(topics),
            ledger: Mutex::new(ledger),
            ledger_file,
            flush_lock: Mutex::new(FlushClock {
                last: Instant::now(),
            }),
            bytes_since_flush: AtomicU64::new(0),
            groups: Mutex::new(groups),
            external: Mutex::new(external),
            retention_holds: Mutex::new(Default::default()),
            metrics,
            budget: Arc::new(BudgetSignal {
                notifier: Notifier::default(),
            }),
            poisoned: Mutex::new(None),
            closed: AtomicBool::new(false),
            stop: Arc::new((Mutex::new(false), Condvar::new())),
        });
        if !read_only {
            let mut threads = Vec::new();
            if let Some(every) = inner.options.maintenance_interval {
                threads.extend(spawn_maintenance(
                    Arc::downgrade(&inner),
                    inner.stop.clone(),
                    every,
                ));
            }
            if let FlushPolicy::Threshold {
                interval: Some(every),
                ..
            } = inner.options.flush_policy
            {
                threads.extend(spawn_flusher(
                    Arc::downgrade(&inner),
                    inner.stop.clone(),
                    every,
                ));
            }
            *crate::partition::lock(&inner.threads) = threads;
        }
        Ok(Log {
            inner,
            user: Some(user),
        })
    }

    /// Opens an existing log for reading only, from any process, also while a writer
    /// (`cdc run`) holds it: takes no lock, creates, repairs and deletes nothing, and
    /// sees each partition up to the durable end the ledger recorded when it was read
    /// (unflushed or torn tails are ignored, not cut). An open that fails in a way the
    /// writer's concurrent changes can cause (a segment gone or cut under the read) is
    /// tried again, up to a few times. [`Log::refresh`] catches up with
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
}
