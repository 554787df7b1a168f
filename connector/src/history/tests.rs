//! The history store over a real embedded log in a temp dir: nothing deletes its records
//! (full disk budget, retention and maintenance running, a group that read everything),
//! and the MySQL history's restore / dedupe / ordering over it.

use std::sync::Arc;
use std::time::Duration;

use cdc_log::{CleanupPolicy, Log, LogOptions, NewRecord, TopicConfig};
use cdc_schemas::MySqlPosition;
use cdc_sources::filter::TableFilter;
use cdc_sources::history::SchemaHistoryStore;
use cdc_sources::mysql::history::{HistoryRecord, SchemaHistory};
use cdc_sources::mysql::schema::{Flavor, Schemas};
use cdc_sources::mysql::table::{MyColumn, MyTable};

use super::*;

#[test]
fn nothing_deletes_history_records_under_a_full_budget_with_retention_running() {
    let dir = tempfile::tempdir().unwrap();
    let small_segments = TopicConfig {
        segment_bytes: 1024,
        compression: cdc_log::Compression::None,
        ..topic_config()
    };
    let record = |i: usize| format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(300)).into_bytes();
    // Written with no budget: many closed segments of history, and a control topic that
    // retention and budget relief may trim.
    {
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        log.create_topic(TOPIC, small_segments.clone()).unwrap();
        let store = LogHistoryStore::open(log.clone(), "c1").unwrap();
        for i in 0..100 {
            store.append(&record(i)).unwrap();
        }
        let data = log
            .create_topic(
                "data",
                TopicConfig {
                    segment_bytes: 1024,
                    retention_ms: Some(1),
                    cleanup_policy: CleanupPolicy::DELETE,
                    ..TopicConfig::default()
                },
            )
            .unwrap();
        let old = cdc_log::now_ms() - 60_000;
        for i in 0..100 {
            let v = record(i);
            data.append(0, &[NewRecord::new(Some(b"k"), Some(&v), old)])
                .unwrap();
        }
        log.flush(None).unwrap();
        log.close().unwrap();
    }
    // Reopened with a disk budget far below what it holds, maintenance every 5 ms, and a
    // group that has read both topics to their ends.
    let log = Log::open(
        dir.path(),
        LogOptions {
            disk_budget_bytes: Some(4096),
            maintenance_interval: Some(Duration::from_millis(5)),
            recycle_segments: 0,
            ..LogOptions::default()
        },
    )
    .unwrap();
    let before = log.describe(TOPIC).unwrap().partitions[0].clone();
    assert!(before.segments > 10, "{before:?}");
    for t in [TOPIC, "data"] {
        let hw = log.describe(t).unwrap().partitions[0].high_watermark;
        log.commit("sink", t, 0, hw).unwrap();
    }
    log.run_maintenance().unwrap();
    // Budget relief runs when the budget is checked.
    assert!(!log.wait_for_budget(Duration::ZERO));
    log.run_maintenance().unwrap();
    let data = log.describe("data").unwrap().partitions[0].clone();
    assert!(
        data.log_start_offset > 0,
        "the control topic was trimmed: {data:?}"
    );
    let after = log.describe(TOPIC).unwrap().partitions[0].clone();
    assert_eq!(after.log_start_offset, 0, "{after:?}");
    assert_eq!(after.segments, before.segments);
    let store = LogHistoryStore::open(log.clone(), "c1").unwrap();
    let all = store.load().unwrap();
    assert_eq!(all.len(), 100);
    for (i, r) in all.iter().enumerate() {
        assert_eq!(r, &record(i));
    }
    // A full budget refuses a new history record (transient) rather than make room by
    // deleting any.
    let e = store.append(b"{}").unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert_eq!(
        log.describe(TOPIC).unwrap().partitions[0].log_start_offset,
        0
    );
    log.close().unwrap();
}

#[test]
fn a_topic_that_may_delete_is_refused_and_names_filter_records() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    log.create_topic(TOPIC, TopicConfig::default()).unwrap();
    let e = LogHistoryStore::open(log.clone(), "c1").err().unwrap();
    assert!(!e.is_transient());
    assert!(e.to_string().contains("cleanup.policy=none"), "{e}");
    log.close().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let a = LogHistoryStore::open_dir(dir.path(), "a").unwrap();
    a.append(b"1").unwrap();
    let b = LogHistoryStore::open(a.log().clone(), "b").unwrap();
    b.append(b"2").unwrap();
    a.append(b"3").unwrap();
    assert_eq!(a.load().unwrap(), vec![b"1".to_vec(), b"3".to_vec()]);
    assert_eq!(b.load().unwrap(), vec![b"2".to_vec()]);
    a.log().close().unwrap();
    // Durable: a new process reads the same.
    let a = LogHistoryStore::open_dir(dir.path(), "a").unwrap();
    assert_eq!(a.load().unwrap(), vec![b"1".to_vec(), b"3".to_vec()]);
}

fn col(name: &str, ty: &str, nullable: bool) -> MyColumn {
    MyColumn {
        name: name.into(),
        data_type: ty.split('(').next().unwrap().into(),
        column_type: ty.into(),
        charset: None,
        nullable,
        default: None,
        generated: false,
    }
}

fn base_schemas() -> Schemas {
    let mut s = Schemas::new(Flavor::MariaDb);
    s.set_default_charset("d", "utf8mb4");
    s.insert(MyTable {
        database: "d".into(),
        name: "t".into(),
        columns: vec![col("id", "int(11)", false)],
        key: vec!["id".into()],
    });
    s
}

fn filter() -> TableFilter {
    TableFilter::new(&["d.*".into()], &[])
}

fn pos(file: &str, p: u64, gtid: Option<&str>) -> MySqlPosition {
    MySqlPosition {
        file: file.into(),
        pos: p,
        gtid_set: gtid.map(|g| g.parse().unwrap()),
        ..Default::default()
    }
}

/// (position, DDL) steps after a snapshot, and the schemas after each.
fn steps(gtid: bool) -> (MySqlPosition, Vec<(MySqlPosition, &'static str)>) {
    let g = |s: &'static str| gtid.then_some(s);
    let start = pos("b.000001", 100, g("0-1-10"));
    let ddl = vec![
        (
            pos("b.000001", 200, g("0-1-11")),
            "ALTER TABLE t ADD COLUMN a INT",
        ),
        (
            pos("b.000001", 300, g("0-1-12")),
            "ALTER TABLE d.t ADD COLUMN b VARCHAR(10) NOT NULL",
        ),
        (
            pos("b.000002", 150, g("0-1-13")),
            "ALTER TABLE t DROP COLUMN a",
        ),
        (
            pos("b.000002", 400, g("0-1-14")),
            "CREATE TABLE u (k BIGINT PRIMARY KEY)",
        ),
    ];
    (start, ddl)
}

fn expected(ddl: &[(MySqlPosition, &'static str)], upto: usize) -> Schemas {
    let mut s = base_schemas();
    for (_, sql) in &ddl[..upto] {
        s.apply_ddl(Some("d"), sql, &filter()).unwrap();
    }
    s
}

fn restore_and_dedupe(gtid: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (start, ddl) = steps(gtid);
    {
        let store = Arc::new(LogHistoryStore::open_dir(dir.path(), "c").unwrap());
        let mut h = SchemaHistory::open(store.clone(), &filter()).unwrap();
        assert!(h.is_empty());
        assert_eq!(h.restore(&start).unwrap(), None);
        h.record_snapshot(&start, &base_schemas()).unwrap();
        // The same snapshot again (a stream that starts twice with no history): no-op.
        h.record_snapshot(&start, &base_schemas()).unwrap();
        assert_eq!(h.records().len(), 1);
        for (p, sql) in &ddl {
            h.record_ddl(p, Some("d"), sql).unwrap();
        }
        store.log().close().unwrap();
    }
    // A restart: the history is read back from disk.
    let store = Arc::new(LogHistoryStore::open_dir(dir.path(), "c").unwrap());
    let mut h = SchemaHistory::open(store.clone(), &filter()).unwrap();
    assert_eq!(h.records().len(), 1 + ddl.len());
    // Before the snapshot: nothing to restore from.
    assert_eq!(
        h.restore(&pos("b.000001", 50, gtid.then_some("0-1-9")))
            .unwrap(),
        None
    );
    assert_eq!(h.restore(&start).unwrap(), Some(base_schemas()));
    for i in 0..ddl.len() {
        // At the DDL's own position: it is included; just before the next: still.
        assert_eq!(
            h.restore(&ddl[i].0).unwrap().unwrap(),
            expected(&ddl, i + 1),
            "at DDL {i}"
        );
    }
    // Resumed at DDL 1, the stream reads DDLs 2.. again: recording them is a no-op.
    for (p, sql) in &ddl[1..] {
        h.record_ddl(p, Some("d"), sql).unwrap();
    }
    assert_eq!(h.records().len(), 1 + ddl.len());
    // Duplicates in the store itself (a failed append that became durable later) are
    // applied once.
    let dir2 = tempfile::tempdir().unwrap();
    let store2 = Arc::new(LogHistoryStore::open_dir(dir2.path(), "c").unwrap());
    let rec = |r: HistoryRecord| serde_json::to_vec(&r).unwrap();
    store2
        .append(&rec(HistoryRecord::Snapshot {
            position: start.clone(),
            schemas: base_schemas(),
        }))
        .unwrap();
    for (i, (p, sql)) in ddl.iter().enumerate() {
        for _ in 0..if i == 1 { 3 } else { 1 } {
            store2
                .append(&rec(HistoryRecord::Ddl {
                    position: p.clone(),
                    current_db: Some("d".into()),
                    sql: sql.to_string(),
                }))
                .unwrap();
        }
    }
    let h2 = SchemaHistory::open(store2.clone(), &filter()).unwrap();
    assert_eq!(h2.records().len(), 1 + ddl.len() + 2);
    for i in 0..ddl.len() {
        assert_eq!(
            h2.restore(&ddl[i].0).unwrap().unwrap(),
            expected(&ddl, i + 1),
            "dup at {i}"
        );
    }
    store.log().close().unwrap();
    store2.log().close().unwrap();
}

#[test]
fn restore_and_dedupe_by_file_position() {
    restore_and_dedupe(false);
}

#[test]
fn restore_and_dedupe_by_gtid_set() {
    restore_and_dedupe(true);
}

#[test]
fn a_later_snapshot_starts_over_and_a_renumbered_binlog_restores_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(LogHistoryStore::open_dir(dir.path(), "c").unwrap());
    let mut h = SchemaHistory::open(store.clone(), &filter()).unwrap();
    let (start, ddl) = steps(false);
    h.record_snapshot(&start, &base_schemas()).unwrap();
    for (p, sql) in &ddl {
        h.record_ddl(p, Some("d"), sql).unwrap();
    }
    // RESET MASTER: numbering restarts; the source snapshots again (another state).
    let mut fresh = base_schemas();
    fresh
        .apply_ddl(Some("d"), "ALTER TABLE t ADD COLUMN z DATE", &filter())
        .unwrap();
    let restarted = pos("b.000001", 40, None);
    h.record_snapshot(&restarted, &fresh).unwrap();
    let after = pos("b.000001", 90, None);
    h.record_ddl(&after, Some("d"), "ALTER TABLE t ADD COLUMN y INT")
        .unwrap();
    let mut want = fresh.clone();
    want.apply_ddl(Some("d"), "ALTER TABLE t ADD COLUMN y INT", &filter())
        .unwrap();
    assert_eq!(h.restore(&pos("b.000001", 90, None)).unwrap(), Some(want));
    assert_eq!(h.restore(&pos("b.000001", 60, None)).unwrap(), Some(fresh));
    // Positions of the old numbering past the new snapshot's restore from the newest
    // snapshot (documented: those positions cannot be streamed from any more).
    assert!(h.restore(&ddl[3].0).unwrap().is_some());
    store.log().close().unwrap();
}

#[test]
fn a_record_that_is_not_history_is_a_definite_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(LogHistoryStore::open_dir(dir.path(), "c").unwrap());
    store.append(b"not json").unwrap();
    let e = SchemaHistory::open(store.clone(), &filter()).err().unwrap();
    assert!(!e.is_transient(), "{e}");
    store.log().close().unwrap();
}
