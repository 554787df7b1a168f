//! External consumer groups (`groups.d`): commits from a read-only open (a second handle
//! here, and a real second process: this test binary run again as a child), what the
//! writer's `groups()`, retention and disk budget make of them, the one-consumer lock,
//! reset and deletion.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use cdc_log::{Log, LogError, LogOptions, NewRecord, StartAt, TopicConfig};
use common::open;

/// Closed segments of old records (timestamp 0): time retention (1 s) would drop all but
/// the active one.
fn old_topic(log: &Log, n: u32) {
    let t = log
        .create_topic(
            "t",
            TopicConfig {
                partitions: 1,
                segment_bytes: 1024,
                retention_ms: Some(1000),
                ..TopicConfig::default()
            },
        )
        .unwrap();
    for i in 0..n {
        t.append(
            0,
            &[NewRecord::new(Some(&i.to_be_bytes()), Some(&[7u8; 200]), 0)],
        )
        .unwrap();
    }
    log.flush(None).unwrap();
}

fn log_start(log: &Log) -> u64 {
    log.describe("t").unwrap().partitions[0].log_start_offset
}

#[test]
fn a_read_only_commit_is_seen_by_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let w = open(dir.path());
    old_topic(&w, 10);
    let ro = Log::open_read_only(dir.path()).unwrap();
    // A read-only log refuses the writer's store, not an external commit.
    assert!(matches!(
        ro.commit("g", "t", 0, 1),
        Err(LogError::ReadOnly(_))
    ));
    ro.commit_external("sink/search", true, &[("t", 0, 4)])
        .unwrap();
    assert_eq!(ro.committed("sink/search", "t", 0), Some(4));
    assert_eq!(w.committed("sink/search", "t", 0), Some(4));
    let g = w.groups();
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!(
        (g[0].group.as_str(), g[0].committed, g[0].lag, g[0].protect),
        ("sink/search", 4, 6, Some(true))
    );
    // The name is escaped into one safe file name.
    let files: Vec<String> = std::fs::read_dir(dir.path().join("groups.d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        files.contains(&"sink%2Fsearch.group".to_string()),
        "{files:?}"
    );
    // Later commits move it; the view sees the writer's own groups on refresh too.
    ro.commit_external("sink/search", true, &[("t", 0, 9)])
        .unwrap();
    assert_eq!(w.committed("sink/search", "t", 0), Some(9));
    w.commit("inproc", "t", 0, 2).unwrap();
    ro.refresh().unwrap();
    let names: Vec<_> = ro.groups().into_iter().map(|g| g.group).collect();
    assert_eq!(names, ["inproc", "sink/search"]);
    // Unknown topics and partitions are refused.
    assert!(ro.commit_external("x", true, &[("nope", 0, 1)]).is_err());
    assert!(ro.commit_external("x", true, &[("t", 5, 1)]).is_err());
}

#[test]
fn a_protecting_group_holds_back_time_retention_and_an_ignored_one_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let w = open(dir.path());
    old_topic(&w, 40);
    let segments = w.describe("t").unwrap().partitions[0].segments;
    assert!(segments > 4, "{segments}");
    let ro = Log::open_read_only(dir.path()).unwrap();
    ro.commit_external("ignored", false, &[("t", 0, 0)])
        .unwrap();
    ro.commit_external("kept", true, &[("t", 0, 10)]).unwrap();

    w.enforce_retention().unwrap();
    let start = log_start(&w);
    assert!(
        start > 0 && start <= 10,
        "deleted only what `kept` read: {start}"
    );
    assert!(w.metrics().retention_held_segments > 0);

    // `kept` reads everything: retention goes on, the gauge drops to 0.
    ro.commit_external("kept", true, &[("t", 0, 40)]).unwrap();
    w.enforce_retention().unwrap();
    let d = &w.describe("t").unwrap().partitions[0];
    assert_eq!(d.segments, 1, "only the active segment is left");
    assert_eq!(w.metrics().retention_held_segments, 0);
    // `ignored` was left below the log start.
    assert!(w.committed("ignored", "t", 0).unwrap() < d.log_start_offset);

    // Turning protect off releases what the group held.
    let dir2 = tempfile::tempdir().unwrap();
    let w2 = open(dir2.path());
    old_topic(&w2, 40);
    w2.commit_external("g", true, &[("t", 0, 0)]).unwrap();
    w2.enforce_retention().unwrap();
    assert_eq!(log_start(&w2), 0);
    w2.commit_external("g", false, &[("t", 0, 0)]).unwrap();
    w2.enforce_retention().unwrap();
    assert!(log_start(&w2) > 0);
}

#[test]
fn the_disk_budget_counts_protecting_groups_only() {
    let dir = tempfile::tempdir().unwrap();
    let w = Log::open(
        dir.path(),
        LogOptions {
            disk_budget_bytes: Some(8 * 1024),
            ..LogOptions::default()
        },
    )
    .unwrap();
    let t = w.create_topic("t", common::small_topic(1)).unwrap();
    let ro = Log::open_read_only(dir.path()).unwrap();
    ro.commit_external("ignored", false, &[("t", 0, 0)])
        .unwrap();
    ro.commit_external("kept", true, &[("t", 0, 0)]).unwrap();
    let mut appended = 0u64;
    let err = loop {
        match t.append(0, &[NewRecord::new(Some(b"k"), Some(&[1u8; 200]), 0)]) {
            Ok(_) => {
                w.flush(None).unwrap();
                appended += 1;
            }
            Err(e) => break e,
        }
        assert!(appended < 1000, "the budget must fill");
    };
    assert!(matches!(err, LogError::BudgetExhausted { .. }), "{err}");
    assert_eq!(log_start(&w), 0, "nothing `kept` has not read was deleted");
    // `kept` (in another handle, as another process would) reads on: room again.
    ro.refresh().unwrap();
    ro.commit_external("kept", true, &[("t", 0, appended)])
        .unwrap();
    assert!(w.wait_for_budget(Duration::from_secs(2)));
    assert!(log_start(&w) > 0);
}

#[test]
fn one_consumer_per_group_and_reset_or_delete_only_while_none_runs() {
    let dir = tempfile::tempdir().unwrap();
    let w = open(dir.path());
    old_topic(&w, 10);
    let ro = Log::open_read_only(dir.path()).unwrap();
    let held = ro.lock_group("sink").unwrap();
    // A second consumer of the group is refused, naming the group and the holder.
    let e = w.lock_group("sink").unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, LogError::GroupLocked { .. }), "{msg}");
    assert!(
        msg.contains("\"sink\"") && msg.contains(&std::process::id().to_string()),
        "{msg}"
    );
    // The holder commits.
    ro.commit_external("sink", true, &[("t", 0, 3)]).unwrap();
    // Reset and deletion refuse while it runs, and change nothing.
    assert!(matches!(
        ro.reset_group("sink", "t", StartAt::Earliest),
        Err(LogError::GroupLocked { .. })
    ));
    assert!(matches!(
        w.delete_group("sink"),
        Err(LogError::GroupLocked { .. })
    ));
    assert_eq!(w.committed("sink", "t", 0), Some(3));
    drop(held);
    // Stopped: a read-only log (the CLI while `cdc run` writes) resets and deletes it.
    assert_eq!(
        ro.reset_group("sink", "t", StartAt::Latest).unwrap(),
        vec![(0, 10)]
    );
    assert_eq!(w.committed("sink", "t", 0), Some(10));
    assert_eq!(w.groups()[0].protect, Some(true), "reset keeps protect");
    assert!(ro.delete_group("sink").unwrap());
    assert_eq!(w.committed("sink", "t", 0), None);
    assert!(w.groups().is_empty());
    assert!(!ro.delete_group("sink").unwrap());
    // The lock is free again for a new consumer.
    drop(w.lock_group("sink").unwrap());
}

/// The child half of [`a_second_process_commits_and_holds_the_lock`]: opens the log
/// read-only, locks and commits, says so, and holds the lock until stdin closes.
#[test]
fn child_process_consumer() {
    let Ok(dir) = std::env::var("CDC_LOG_TEST_CHILD_DIR") else {
        return;
    };
    let ro = Log::open_read_only(&dir).unwrap();
    let _lock = ro.lock_group("remote").unwrap();
    ro.commit_external("remote", true, &[("t", 0, 7)]).unwrap();
    println!("READY {}", std::process::id());
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

#[test]
fn a_second_process_commits_and_holds_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let w = open(dir.path());
    old_topic(&w, 40);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process_consumer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CDC_LOG_TEST_CHILD_DIR", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let pid = loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the child ended early"
        );
        // The harness may print "test child_process_consumer ... " before it on the line.
        if let Some((_, p)) = line.trim().split_once("READY ") {
            break p.to_string();
        }
    };
    assert_eq!(pid, child.id().to_string());
    // The writer sees the other process's commit, and retention keeps what it has not read.
    assert_eq!(w.committed("remote", "t", 0), Some(7));
    w.enforce_retention().unwrap();
    assert!(log_start(&w) <= 7);
    assert!(w.metrics().retention_held_segments > 0);
    // Its lock refuses a consumer here, naming its pid; reset refuses too.
    let e = w.lock_group("remote").unwrap_err().to_string();
    assert!(e.contains(&pid), "{e}");
    assert!(w.commit_external("remote", true, &[("t", 0, 8)]).is_err());
    assert!(w.reset_group("remote", "t", StartAt::Latest).is_err());
    // The child ends: the kernel drops its lock.
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    drop(w.lock_group("remote").unwrap());
}
