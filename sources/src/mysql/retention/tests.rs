use std::collections::BTreeMap;

use cdc_schemas::gtid::GtidSet;
use cdc_schemas::metrics::Metrics;
use cdc_schemas::MySqlPosition;

use super::inspect::{effective_expiry, max_per_domain, quote_account};
use super::margin::mysql_minus;
use super::*;

const U1: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";

fn server(files: &[(&str, u64)], gtids: ServerGtids, expire: Option<u64>) -> ServerBinlogs {
    let last = files.last().unwrap();
    ServerBinlogs {
        flavor: Flavor::MariaDb,
        version: "10.11.0-MariaDB".into(),
        account: "cdc@%".into(),
        now: 1_000_000,
        files: files
            .iter()
            .map(|&(n, s)| BinlogFile {
                name: n.into(),
                size: s,
                closed_after: None,
            })
            .collect(),
        current_file: last.0.into(),
        current_pos: last.1,
        gtids,
        retention: RetentionSettings {
            expire_seconds: expire,
            max_binlog_size: 1 << 30,
        },
    }
}

fn at(file: &str, p: u64, gtid: Option<&str>) -> MySqlPosition {
    MySqlPosition {
        file: file.into(),
        pos: p,
        gtid_set: gtid.map(|g| g.parse().unwrap()),
        ..Default::default()
    }
}

const FILES: &[(&str, u64)] = &[("b.000002", 1000), ("b.000003", 2000), ("b.000004", 500)];

#[test]
fn retained_by_file_counts_both_sides() {
    let s = server(FILES, ServerGtids::None, None);
    let m = margin(&s, &at("b.000003", 300, None));
    assert!(m.retained && m.purged.is_none());
    assert_eq!((m.files_ahead, m.files_before), (2, 1));
    assert_eq!(m.bytes_ahead, 1700 + 500);
    assert_eq!(m.bytes_before, 1000 + 300);
    assert_eq!(m.expires_in, Expiry::Never);
}

#[test]
fn purged_by_file_names_the_lost_files() {
    let s = server(FILES, ServerGtids::None, Some(86_400));
    let m = margin(&s, &at("b.000000", 4, None));
    let p = m.purged.expect("purged");
    assert!(!m.retained);
    assert_eq!(p.lost_files, vec!["b.000000", "b.000001"]);
    assert_eq!(m.expires_in, Expiry::In(0));
    assert_eq!((m.files_ahead, m.bytes_ahead), (3, 3500));
    let text = p.to_string();
    assert!(
        text.contains("b.000000:4") && text.contains("b.000002") && text.contains("when_needed"),
        "{text}"
    );
    // A file after the newest: the binlog was reset.
    let m = margin(&s, &at("b.000009", 4, None));
    assert!(m.purged.unwrap().lost.contains("reset"));
}

#[test]
fn mariadb_gtids_decide() {
    let mut oldest = BTreeMap::new();
    oldest.insert(0, "0-1-10".parse().unwrap());
    oldest.insert(2, "2-1-3".parse().unwrap());
    let g = ServerGtids::MariaDb {
        binlog_state: "0-1-20,2-1-5".into(),
        oldest,
    };
    let s = server(FILES, g, None);
    // At or past the oldest GTIDs in both domains: retained, even from a purged file.
    let m = margin(&s, &at("b.000001", 4, Some("0-1-10,2-1-4")));
    assert!(m.retained, "{m:?}");
    assert_eq!(m.files_ahead, 3);
    // Behind in domain 2.
    let m = margin(&s, &at("b.000003", 4, Some("0-1-12,2-1-1")));
    let p = m.purged.expect("purged");
    assert_eq!(
        p.lost_gtids.as_deref(),
        Some("domain 2 seq 2 to 3 (up to 2-1-3)")
    );
    assert!(p.lost_files.is_empty());
    // A domain the position never saw, which the server purged part of.
    let m = margin(&s, &at("b.000003", 4, Some("0-1-12")));
    assert!(m.purged.unwrap().lost.contains("domain 2 seq 1 to 3"));
}

#[test]
fn mysql_gtids_decide() {
    let purged: GtidSet = format!("{U1}:1-10").parse().unwrap();
    let g = ServerGtids::MySql {
        executed: format!("{U1}:1-50").parse().unwrap(),
        purged,
    };
    let s = server(FILES, g, None);
    assert!(margin(&s, &at("b.000003", 4, Some(&format!("{U1}:1-20")))).retained);
    let m = margin(&s, &at("b.000003", 4, Some(&format!("{U1}:1-3:6-7"))));
    assert_eq!(
        m.purged.unwrap().lost_gtids.as_deref(),
        Some(format!("{U1}:4-5:8-10").as_str())
    );
    // A file:pos-only position against a GTID server: by file; an empty set too.
    assert!(margin(&s, &at("b.000003", 4, None)).retained);
    assert!(margin(&s, &at("b.000003", 4, Some(""))).retained);
    assert!(!margin(&s, &at("b.000001", 4, Some(""))).retained);
}

#[test]
fn minus() {
    let a: GtidSet = format!("{U1}:1-10:20-30").parse().unwrap();
    let b: GtidSet = format!("{U1}:1-2:5:9-21:30").parse().unwrap();
    assert_eq!(
        mysql_minus(&a, &b).to_string(),
        format!("{U1}:3-4:6-8:22-29")
    );
    assert!(mysql_minus(&a, &a).is_empty());
    assert_eq!(mysql_minus(&a, &GtidSet::empty_mysql()), a);
}

#[test]
fn expiry_from_tracked_rotations() {
    let mut s = server(FILES, ServerGtids::None, Some(86_400));
    // The current file: a full retention period at least.
    assert_eq!(
        margin(&s, &at("b.000004", 4, None)).expires_in,
        Expiry::In(86_400)
    );
    // A closed file of unknown age.
    assert_eq!(
        margin(&s, &at("b.000003", 4, None)).expires_in,
        Expiry::Unknown
    );

    let metrics = Metrics::default();
    let mut w = RetentionWatch::new(&metrics);
    // First check: b.000004 current. Then two rotations within one interval.
    w.track(&mut s);
    let mut later = server(
        &[
            ("b.000002", 1000),
            ("b.000003", 2000),
            ("b.000004", 700),
            ("b.000005", 10),
            ("b.000006", 5),
        ],
        ServerGtids::None,
        Some(86_400),
    );
    later.now = s.now + 60;
    w.track(&mut later);
    let closed: Vec<Option<i64>> = later.files.iter().map(|f| f.closed_after).collect();
    assert_eq!(closed, vec![None, None, Some(s.now), Some(s.now), None]);
    // Closed after the first check, 60 s ago: 86 400 - 60 left at the earliest.
    assert_eq!(
        margin(&later, &at("b.000004", 4, None)).expires_in,
        Expiry::In(86_340)
    );
    // A day later it may go at any rotation.
    later.now += 86_400;
    assert_eq!(
        margin(&later, &at("b.000004", 4, None)).expires_in,
        Expiry::In(0)
    );
}

#[test]
fn thresholds_and_settings() {
    assert_eq!(RetentionWatch::threshold_for(Some(7 * 86_400)), Some(3600));
    assert_eq!(RetentionWatch::threshold_for(Some(6000)), Some(600));
    assert_eq!(RetentionWatch::threshold_for(None), None);
    assert_eq!(effective_expiry(Some(0), Some(1.0), None), Some(86_400));
    assert_eq!(effective_expiry(Some(60), Some(1.0), None), Some(60));
    assert_eq!(effective_expiry(Some(0), Some(0.0), None), None);
    assert_eq!(effective_expiry(Some(60), None, Some(false)), None);
    assert_eq!(
        max_per_domain("0-1-5, 0-2-7,2-1-3")
            .unwrap()
            .values()
            .map(|g| g.to_string())
            .collect::<Vec<_>>(),
        vec!["0-2-7", "2-1-3"]
    );
    assert!(max_per_domain("").unwrap().is_empty());
    assert_eq!(quote_account("cdc@%"), "'cdc'@'%'");
}

#[test]
fn watch_alarms_once_and_recovers() {
    let metrics = Metrics::default();
    let mut w = RetentionWatch::new(&metrics);
    let s = server(FILES, ServerGtids::None, Some(86_400));
    let purged = margin(&s, &at("b.000001", 4, None));
    w.observe(&s, &at("b.000001", 4, None), &purged);
    assert!(w.alarmed);
    assert_eq!(w.metrics.margin_alarm.get(), 1);
    assert_eq!(w.metrics.purged.get(), 1);
    let ok = margin(&s, &at("b.000004", 4, None));
    w.observe(&s, &at("b.000004", 4, None), &ok);
    assert!(!w.alarmed);
    assert_eq!(w.metrics.margin_seconds.get(), 86_400);
    assert_eq!(w.metrics.behind_bytes.get(), 496);
    assert_eq!(w.metrics.files_retained.get(), 3);
    let mut out = String::new();
    metrics.render(&mut out);
    assert!(
        out.contains("cdc_mysql_binlog_margin_seconds 86400"),
        "{out}"
    );
}
