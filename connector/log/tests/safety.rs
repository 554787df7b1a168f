//! Durable data is never deleted or hidden:
//! - a topic directory without `topic.conf` is removed on open only when the ledger holds
//!   no durable record of it; otherwise open refuses and deletes nothing;
//! - a damaged newest ledger slot is an error-level event with the truth in it (what was
//!   cut, where the source resumes) and a metric;
//! - `Log::close` in the middle of a long compaction (called on another thread, or run by
//!   the maintenance thread) stops it: nothing writes into the directory after `close`
//!   returns, and a reopen reads everything, in order; dropping the log without `close`
//!   stops the pass too, and releases the lock only after its threads stopped writing;
//! - consumer groups with reset policy `latest` start at the end.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cdc_log::{CleanupPolicy, Log, LogError, LogOptions, NewRecord, ResetPolicy, TopicConfig};
use common::{copy_dir, hundred_records, open, read_all, rec, small_topic};

// ---- a tracing subscriber that keeps the events (no extra dependency) ----

#[derive(Debug, Clone)]
struct Event {
    level: tracing::Level,
    message: String,
    fields: BTreeMap<String, String>,
}

#[derive(Default, Clone)]
struct Capture(Arc<Mutex<Vec<Event>>>);

struct Visitor<'a>(&'a mut Event);

impl tracing::field::Visit for Visitor<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let v = format!("{value:?}");
        if field.name() == "message" {
            self.0.message = v;
        } else {
            self.0.fields.insert(field.name().to_string(), v);
        }
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.0.message = value.to_string();
        } else {
            self.0
                .fields
                .insert(field.name().to_string(), value.to_string());
        }
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut e = Event {
            level: *event.metadata().level(),
            message: String::new(),
            fields: BTreeMap::new(),
        };
        event.record(&mut Visitor(&mut e));
        self.0.lock().unwrap().push(e);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Runs `f` with this thread's events captured.
fn capture<T>(f: impl FnOnce() -> T) -> (T, Vec<Event>) {
    let c = Capture::default();
    let out = tracing::subscriber::with_default(c.clone(), f);
    let events = c.0.lock().unwrap().clone();
    (out, events)
}

// ---- topic.conf missing ----

/// A log with topic `t` (2 partitions, records flushed) and topic `u`; closed.
fn log_with_durable_topic(dir: &Path) {
    let log = open(dir);
    let t = log.create_topic("t", small_topic(2)).unwrap();
    for i in 0..50u32 {
        t.append(i % 2, &[rec(&i.to_be_bytes(), b"v", i as i64)])
            .unwrap();
    }
    let u = log.create_topic("u", small_topic(1)).unwrap();
    u.append(0, &[rec(b"k", b"v", 0)]).unwrap();
    log.flush(Some(b"cp")).unwrap();
    log.close().unwrap();
}

fn tree(dir: &Path, out: &mut BTreeSet<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        out.insert(e.path());
        if e.file_type().unwrap().is_dir() {
            tree(&e.path(), out);
        }
    }
}

#[test]
fn missing_topic_conf_with_durable_records_is_refused_and_nothing_deleted() {
    let dir = tempfile::tempdir().unwrap();
    log_with_durable_topic(dir.path());
    let conf = dir.path().join("topics/t/topic.conf");
    let saved = fs::read(&conf).unwrap();
    fs::remove_file(&conf).unwrap();
    let mut before = BTreeSet::new();
    tree(dir.path(), &mut before);

    let (res, events) = capture(|| Log::open(dir.path(), LogOptions::default()));
    let err = match res {
        Err(e) => e,
        Ok(_) => panic!("open must refuse a durable topic without topic.conf"),
    };
    let msg = err.to_string();
    assert!(
        matches!(err, LogError::TopicConfigMissing { partitions: 2, .. }),
        "{msg}"
    );
    assert!(!err.is_transient(), "a definite error: {msg}");
    // Names the file, what is durable, and both ways out.
    assert!(msg.contains(&conf.display().to_string()), "{msg}");
    assert!(
        msg.contains("partition 0") && msg.contains("partition 1"),
        "{msg}"
    );
    assert!(msg.contains("partitions=2"), "{msg}");
    assert!(msg.contains("accept_damaged_tail"), "{msg}");
    assert!(events
        .iter()
        .any(|e| e.level == tracing::Level::ERROR && e.fields.contains_key("topic")));
    // Nothing was deleted (the lock file may have been created: it existed already).
    let mut after = BTreeSet::new();
    tree(dir.path(), &mut after);
    assert_eq!(
        before, after,
        "open deleted or created files before refusing"
    );
    // Not even with accept_damaged_tail: the data is there, only its config is missing.
    let opts = LogOptions {
        accept_damaged_tail: true,
        ..LogOptions::default()
    };
    assert!(matches!(
        Log::open(dir.path(), opts),
        Err(LogError::TopicConfigMissing { .. })
    ));

    // Repair 1: put topic.conf back: everything is there.
    fs::write(&conf, &saved).unwrap();
    let log = open(dir.path());
    assert_eq!(read_all(&log, "t", 0).len(), 25);
    assert_eq!(read_all(&log, "t", 1).len(), 25);
    log.close().unwrap();
    drop(log);

    // Repair 2: give the data up: move the directory away, open once with
    // accept_damaged_tail (which forgets the ledger entries), then normally.
    fs::remove_file(&conf).unwrap();
    let away = tempfile::tempdir().unwrap();
    fs::rename(dir.path().join("topics/t"), away.path().join("t")).unwrap();
    assert!(matches!(
        Log::open(dir.path(), LogOptions::default()),
        Err(LogError::DurableDataLost { .. })
    ));
    let log = Log::open(
        dir.path(),
        LogOptions {
            accept_damaged_tail: true,
            ..LogOptions::default()
        },
    )
    .unwrap();
    assert_eq!(log.topics(), vec!["u".to_string()]);
    log.close().unwrap();
    drop(log);
    let log = open(dir.path());
    assert_eq!(read_all(&log, "u", 0).len(), 1);
    // The name is free again.
    log.create_topic("t", small_topic(1)).unwrap();
}

#[test]
fn lost_ledger_and_topic_conf_is_refused_and_nothing_deleted() {
    let dir = tempfile::tempdir().unwrap();
    log_with_durable_topic(dir.path());
    fs::remove_file(dir.path().join("ledger")).unwrap();
    fs::remove_file(dir.path().join("topics/t/topic.conf")).unwrap();
    fs::remove_file(dir.path().join("topics/u/topic.conf")).unwrap();
    let mut before = BTreeSet::new();
    tree(dir.path(), &mut before);
    let err = Log::open(dir.path(), LogOptions::default())
        .err()
        .expect("open must refuse");
    assert!(
        matches!(err, LogError::CorruptFile { what: "ledger", .. }),
        "{err}"
    );
    let mut after = BTreeSet::new();
    tree(dir.path(), &mut after);
    assert_eq!(before, after);
}

#[test]
fn interrupted_creation_without_durable_records_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    log_with_durable_topic(dir.path());
    // A creation a crash interrupted: partition directories, a segment, no topic.conf,
    // no ledger entry.
    let stale = dir.path().join("topics/half");
    fs::create_dir_all(stale.join("0")).unwrap();
    fs::write(stale.join("0/00000000000000000000.log"), b"").unwrap();
    // A topic created but never flushed: its ledger entries (durable end 0) were never
    // written either; same case.
    {
        let log = open(dir.path());
        let n = log.create_topic("never-flushed", small_topic(1)).unwrap();
        n.append(0, &[rec(b"k", b"v", 0)]).unwrap();
        log.close().unwrap();
    }
    fs::remove_file(dir.path().join("topics/never-flushed/topic.conf")).unwrap();

    let log = open(dir.path());
    assert!(!stale.exists(), "interrupted creation not cleaned up");
    assert!(!dir.path().join("topics/never-flushed").exists());
    assert_eq!(log.topics(), vec!["t".to_string(), "u".to_string()]);
    assert_eq!(read_all(&log, "t", 0).len(), 25);
}

// ---- a damaged newest ledger slot ----

/// (slot size, [(slot start, sequence)]) of a format-2 ledger file.
fn ledger_slots(buf: &[u8]) -> (usize, [(usize, u64); 2]) {
    let slot = u32::from_be_bytes(buf[8..12].try_into().unwrap()) as usize;
    let at = |i: usize| 4096 + i * slot;
    let seq = |i: usize| u64::from_be_bytes(buf[at(i)..at(i) + 8].try_into().unwrap());
    (slot, [(at(0), seq(0)), (at(1), seq(1))])
}

/// Topic `t`, one partition: 40 records flushed with checkpoint "first", 25 more flushed
/// with checkpoint "second". Closed.
fn two_flushes(dir: &Path) {
    let log = open(dir);
    let t = log.create_topic("t", small_topic(1)).unwrap();
    for i in 0..40u32 {
        t.append(0, &[rec(&i.to_be_bytes(), b"value", i as i64)])
            .unwrap();
    }
    log.flush(Some(b"first")).unwrap();
    for i in 40..65u32 {
        t.append(0, &[rec(&i.to_be_bytes(), b"value", i as i64)])
            .unwrap();
    }
    log.flush(Some(b"second")).unwrap();
    log.close().unwrap();
}

/// [`two_flushes`] into `dir`, then one bit flipped `at` bytes into the newest (or the
/// older) ledger slot; the ledger's bytes as written and the damaged slot's index.
fn damage_ledger_slot(dir: &Path, newest: bool, at: usize) -> (Vec<u8>, usize) {
    two_flushes(dir);
    let path = dir.join("ledger");
    let mut buf = fs::read(&path).unwrap();
    let (_, slots) = ledger_slots(&buf);
    let first_is_newest = slots[0].1 > slots[1].1;
    let slot = if first_is_newest == newest { 0 } else { 1 };
    buf[slots[slot].0 + at] ^= 0x01;
    fs::write(&path, &buf).unwrap();
    (buf, slot)
}

#[test]
fn damaged_newest_ledger_slot_is_a_loud_event_with_the_truth() {
    let dir = tempfile::tempdir().unwrap();
    // One flipped bit in the body (the 'o' of the checkpoint "second": sequence 8 bytes,
    // length 4, checkpoint flag 1 and length 4, then the bytes): the checksum fails, the
    // bytes still parse.
    let (buf, newest) = damage_ledger_slot(dir.path(), true, 12 + 5 + 3);
    let path = dir.path().join("ledger");

    // A read-only open (`cdc log` beside a live writer, whose in-place slot write it may
    // race) uses the older slot quietly and changes nothing.
    let (ro, events) = capture(|| Log::open_read_only(dir.path()).unwrap());
    assert_eq!(ro.checkpoint().as_deref(), Some(&b"first"[..]));
    assert_eq!(ro.metrics().ledger_slot_fallbacks, 0);
    assert!(!events.iter().any(|e| e.level == tracing::Level::ERROR));
    drop(ro);
    assert_eq!(fs::read(&path).unwrap(), buf);

    let (log, events) = capture(|| open(dir.path()));
    // The state is the older slot's: checkpoint "first", 40 records, gapless.
    assert_eq!(log.checkpoint().as_deref(), Some(&b"first"[..]));
    let got = read_all(&log, "t", 0);
    assert_eq!(got.len(), 40);
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.offset, i as u64);
        assert_eq!(r.key.as_deref(), Some(&(i as u32).to_be_bytes()[..]));
    }
    // The metric.
    let m = log.metrics();
    assert_eq!(m.ledger_slot_fallbacks, 1);
    assert_eq!(m.ledger_fallback_cut_records, 25);
    // The events: error level, the damaged slot, the resume point, what was cut.
    let errors: Vec<&Event> = events
        .iter()
        .filter(|e| e.level == tracing::Level::ERROR)
        .collect();
    let slot = errors
        .iter()
        .find(|e| e.message.contains("newest ledger slot is damaged"))
        .unwrap_or_else(|| panic!("no slot event in {events:#?}"));
    assert_eq!(slot.fields["resume_checkpoint"], "first");
    assert_eq!(slot.fields["damaged_slot"], newest.to_string());
    assert!(slot.fields["reason"].contains("checksum"), "{slot:?}");
    // The damaged slot's checkpoint, flipped bit and all: "second" with 'o' -> 'n'.
    assert!(slot.fields["damaged_slot_checkpoint"].contains("secnnd"));
    let part = errors
        .iter()
        .find(|e| e.fields.get("cut_records").map(String::as_str) == Some("25"))
        .unwrap_or_else(|| panic!("no partition event in {events:#?}"));
    assert_eq!(part.fields["topic"], "t");
    assert_eq!(part.fields["cut_from"], "40");
    assert_eq!(part.fields["cut_to"], "65");
    assert_eq!(part.fields["damaged_slot_durable_end"], "Some(65)");
    let summary = errors
        .iter()
        .find(|e| e.message.contains("recovered from the older ledger slot"))
        .unwrap_or_else(|| panic!("no summary event in {events:#?}"));
    assert_eq!(summary.fields["cut_records"], "25");
    assert_eq!(summary.fields["resume_checkpoint"], "first");
    // Never the reassuring line.
    assert!(
        !events
            .iter()
            .any(|e| e.message.contains("nothing durable is lost")),
        "{events:#?}"
    );
    log.close().unwrap();
    drop(log);

    // The open wrote the state it used over the damaged slot: the next open is quiet.
    let (log, events) = capture(|| open(dir.path()));
    assert_eq!(log.metrics().ledger_slot_fallbacks, 0);
    assert!(!events.iter().any(|e| e.level == tracing::Level::ERROR));
    assert_eq!(log.checkpoint().as_deref(), Some(&b"first"[..]));
}

#[test]
fn damaged_older_ledger_slot_is_not_a_fallback() {
    let dir = tempfile::tempdir().unwrap();
    damage_ledger_slot(dir.path(), false, 12 + 5);
    let (log, events) = capture(|| open(dir.path()));
    assert_eq!(log.checkpoint().as_deref(), Some(&b"second"[..]));
    assert_eq!(read_all(&log, "t", 0).len(), 65);
    assert_eq!(log.metrics().ledger_slot_fallbacks, 0);
    assert!(!events.iter().any(|e| e.level == tracing::Level::ERROR));
}

// ---- close (and drop) in the middle of a compaction ----

const KEYS: u32 = 40;

fn compacted_config() -> TopicConfig {
    TopicConfig {
        partitions: 1,
        segment_bytes: 1024,
        retention_ms: None,
        segment_ms: None,
        cleanup_policy: CleanupPolicy::COMPACT,
        compression: cdc_log::Compression::None,
        ..TopicConfig::default()
    }
}

fn value(i: u32) -> Vec<u8> {
    let mut v = i.to_be_bytes().to_vec();
    v.extend(std::iter::repeat_n((i % 251) as u8, 90));
    v
}

/// A compacted topic `t` of `n` records over `KEYS` keys in segments of 1 KiB (about
/// `n / 9` segments), flushed; returns the log (open, with `options`).
fn many_segments(dir: &Path, n: u32, options: LogOptions) -> Log {
    {
        let log = open(dir);
        let t = log.create_topic("t", compacted_config()).unwrap();
        for i in 0..n {
            let k = (i % KEYS).to_be_bytes();
            let v = value(i);
            t.append(0, &[NewRecord::new(Some(&k), Some(&v), i as i64)])
                .unwrap();
            if i % 500 == 499 {
                log.flush(None).unwrap();
            }
        }
        log.flush(Some(b"written")).unwrap();
        log.close().unwrap();
    }
    Log::open(dir, options).unwrap()
}

/// Every file under `dir` with its inode, size and modification time.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, u64, i64, i64)> {
    let mut paths = BTreeSet::new();
    tree(dir, &mut paths);
    paths
        .into_iter()
        .filter_map(|p| {
            let m = fs::symlink_metadata(&p).ok()?;
            Some((p, (m.ino(), m.len(), m.mtime(), m.mtime_nsec())))
        })
        .collect()
}

fn segment_inodes(pdir: &Path) -> BTreeMap<String, u64> {
    fs::read_dir(pdir)
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().to_string_lossy().to_string();
            name.ends_with(".log")
                .then(|| (name, e.metadata().unwrap().ino()))
        })
        .collect()
}

/// Waits until the cleaner has swapped at least one segment (a `.log` file got a new
/// inode): the pass is under way.
fn wait_for_first_swap(pdir: &Path, before: &BTreeMap<String, u64>) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let now = segment_inodes(pdir);
        if before
            .iter()
            .any(|(n, ino)| now.get(n).is_some_and(|i| i != ino))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "compaction never swapped a segment"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// What the log holds after an uninterrupted compaction of a copy of `dir`.
fn compacted_copy(dir: &Path) -> Vec<(u64, Vec<u8>)> {
    let copy = tempfile::tempdir().unwrap();
    copy_dir(dir, copy.path());
    let _ = fs::remove_file(copy.path().join(".lock"));
    let log = open(copy.path());
    log.compact("t").unwrap();
    read_all(&log, "t", 0)
        .into_iter()
        .map(|r| (r.offset, r.value.unwrap().to_vec()))
        .collect()
}

/// After an interrupted compaction: in order, each record as written, nothing the full
/// compaction keeps is missing; then a compaction to the end gives exactly its result.
fn check_after_interruption(dir: &Path, n: u32, full: &[(u64, Vec<u8>)]) {
    let log = open(dir);
    let got = read_all(&log, "t", 0);
    let mut last = None;
    for r in &got {
        assert!(last.is_none_or(|l| r.offset > l), "offsets out of order");
        last = Some(r.offset);
        assert!(r.offset < n as u64);
        assert_eq!(r.value.as_deref(), Some(&value(r.offset as u32)[..]));
        assert_eq!(
            r.key.as_deref(),
            Some(&((r.offset as u32) % KEYS).to_be_bytes()[..])
        );
    }
    let offsets: BTreeSet<u64> = got.iter().map(|r| r.offset).collect();
    for (o, _) in full {
        assert!(offsets.contains(o), "record {o} lost");
    }
    assert_eq!(
        log.describe("t").unwrap().partitions[0].high_watermark,
        n as u64
    );
    log.verify("t").unwrap();
    log.compact("t").unwrap();
    let again: Vec<(u64, Vec<u8>)> = read_all(&log, "t", 0)
        .into_iter()
        .map(|r| (r.offset, r.value.unwrap().to_vec()))
        .collect();
    assert_eq!(
        again, full,
        "finishing the compaction differs from one full run"
    );
}

/// After a while (300 ms, for a stray writer to show), the files under `dir` are still
/// `before` (else fails with `what`) and partition `pdir` holds no `.cleaned` file.
fn unchanged_after(
    dir: &Path,
    pdir: &Path,
    before: &BTreeMap<PathBuf, (u64, u64, i64, i64)>,
    what: &str,
) {
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(*before, snapshot(dir), "{what}");
    no_cleaned_files(pdir);
}

fn no_cleaned_files(pdir: &Path) {
    for e in fs::read_dir(pdir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().to_string();
        assert!(!name.ends_with(".cleaned"), "{name} left behind");
    }
}

const LONG: u32 = 9_000; // about 1000 segments

#[test]
fn close_in_the_middle_of_a_compaction_called_on_another_thread() {
    let dir = tempfile::tempdir().unwrap();
    let log = many_segments(dir.path(), LONG, LogOptions::default());
    let full = compacted_copy(dir.path());
    let pdir = dir.path().join("topics/t/0");
    let before = segment_inodes(&pdir);
    assert!(before.len() > 800, "{} segments", before.len());
    let worker = {
        let log = log.clone();
        std::thread::spawn(move || log.compact("t"))
    };
    wait_for_first_swap(&pdir, &before);
    log.close().unwrap();
    let at_close = snapshot(dir.path());
    let result = worker.join().unwrap();
    assert!(
        matches!(result, Err(LogError::Closed(_))),
        "the pass was not stopped: {result:?}"
    );
    unchanged_after(
        dir.path(),
        &pdir,
        &at_close,
        "files written after close returned",
    );
    // The old handle refuses writes; the directory is free although it is alive.
    assert!(matches!(log.compact("t"), Err(LogError::Closed(_))));
    assert!(matches!(
        log.commit("g", "t", 0, 1),
        Err(LogError::Closed(_))
    ));
    check_after_interruption(dir.path(), LONG, &full);
    drop(log);
}

#[test]
fn close_in_the_middle_of_a_maintenance_thread_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let opts = LogOptions {
        maintenance_interval: Some(Duration::from_millis(5)),
        ..LogOptions::default()
    };
    let pdir = dir.path().join("topics/t/0");
    // Built with maintenance off; the inodes are read before the thread can start.
    let log = many_segments(dir.path(), LONG, LogOptions::default());
    let full = compacted_copy(dir.path());
    let before = segment_inodes(&pdir);
    log.close().unwrap();
    drop(log);
    let log = Log::open(dir.path(), opts).unwrap();
    wait_for_first_swap(&pdir, &before);
    log.close().unwrap();
    let at_close = snapshot(dir.path());
    unchanged_after(
        dir.path(),
        &pdir,
        &at_close,
        "files written after close returned",
    );
    // Reopened while the closed handle is still alive.
    check_after_interruption(dir.path(), LONG, &full);
    drop(log);
}

#[test]
fn drop_without_close_stops_the_pass_and_keeps_the_lock_until_then() {
    let dir = tempfile::tempdir().unwrap();
    let n = 4_000;
    let pdir = dir.path().join("topics/t/0");
    let log = many_segments(dir.path(), n, LogOptions::default());
    let full = compacted_copy(dir.path());
    let before = segment_inodes(&pdir);
    log.close().unwrap();
    drop(log);
    let log = Log::open(
        dir.path(),
        LogOptions {
            maintenance_interval: Some(Duration::from_millis(5)),
            ..LogOptions::default()
        },
    )
    .unwrap();
    wait_for_first_swap(&pdir, &before);
    drop(log);
    // The lock is free only once nothing of the dropped log writes any more.
    let deadline = Instant::now() + Duration::from_secs(300);
    let reopened = loop {
        match Log::open(dir.path(), LogOptions::default()) {
            Ok(l) => break l,
            Err(LogError::Locked { .. }) => {
                assert!(Instant::now() < deadline, "the lock was never released");
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => panic!("reopen: {e}"),
        }
    };
    let at_open = snapshot(dir.path());
    unchanged_after(dir.path(), &pdir, &at_open, "a dropped log still writes");
    // The pass stopped when the last handle went, it did not run to its end.
    assert!(
        read_all(&reopened, "t", 0).len() > full.len(),
        "the dropped log's compaction ran to its end"
    );
    drop(reopened);
    check_after_interruption(dir.path(), n, &full);
}

// ---- reset policy `latest` ----

#[test]
fn latest_reset_policy_starts_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let (log, t) = hundred_records(dir.path());

    // A group with no committed offset starts at the high watermark and is registered
    // there.
    let mut c = log.consumer("new", "t", 0, ResetPolicy::Latest).unwrap();
    assert_eq!(log.committed("new", "t", 0), Some(100));
    assert!(c.poll(1 << 20).unwrap().is_empty());
    t.append(0, &[rec(b"after", b"x", 100)]).unwrap();
    log.flush(None).unwrap();
    let got = c.poll(1 << 20).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].offset, 100);
    assert_eq!(got[0].key.as_deref(), Some(&b"after"[..]));

    // A committed offset below the log start (retention moved past it): `latest` resets
    // to the end, skipping what is left.
    log.commit("old", "t", 0, 3).unwrap();
    assert!(log.enforce_retention().unwrap().deleted_segments > 0);
    let start = log.describe("t").unwrap().partitions[0].log_start_offset;
    assert!(start > 3);
    let mut old = log.consumer("old", "t", 0, ResetPolicy::Latest).unwrap();
    assert!(old.poll(1 << 20).unwrap().is_empty());
    t.append(0, &[rec(b"later", b"y", 101)]).unwrap();
    log.flush(None).unwrap();
    let got = old.poll(1 << 20).unwrap();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].offset, 101);
    // `earliest` for comparison: from the log start.
    log.commit("early", "t", 0, 3).unwrap();
    let mut early = log
        .consumer("early", "t", 0, ResetPolicy::Earliest)
        .unwrap();
    assert_eq!(early.poll(1 << 20).unwrap()[0].offset, start);
}
