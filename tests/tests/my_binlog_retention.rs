//! Binlog retention (`cdc_sources::mysql::retention`) against real MariaDB servers: what
//! the server still has, whether a position is retained (by file:pos and by GTID, in two
//! replication domains), what a purge lost, the watch's gauges, and the privilege the
//! check needs. Servers that get `PURGE BINARY LOGS` are private to their test.

use cdc_harness::passwords::{MARIADB_APP as APP_PASSWORD, MARIADB_CDC as CDC_PASSWORD};
use cdc_harness::{MariaDbOptions, MariaDbServer};
use cdc_schemas::metrics::Metrics;
use cdc_schemas::MySqlPosition;
use cdc_sources::mysql::retention::{
    inspect, margin, Expiry, Flavor, RetentionError, RetentionWatch, ServerGtids,
};
use mysql_async::prelude::Queryable;
use mysql_async::Conn;

async fn connect(my: &MariaDbServer, user: &str, password: &str) -> Conn {
    Conn::from_url(my.url(user, password, "")).await.unwrap()
}

/// The current file and position, as root.
async fn master_status(root: &mut Conn) -> (String, u64) {
    let row: mysql_async::Row = root
        .query_first("SHOW MASTER STATUS")
        .await
        .unwrap()
        .unwrap();
    (row.get(0).unwrap(), row.get(1).unwrap())
}

/// The MariaDB GTID position at file:pos (what the source records).
async fn gtid_pos(root: &mut Conn, file: &str, pos: u64) -> String {
    let g: Option<Option<String>> = root
        .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (file, pos))
        .await
        .unwrap();
    g.flatten().unwrap_or_default()
}

/// `PURGE BINARY LOGS TO file`, retried until it took: MariaDB keeps a file until its
/// transactions are durable in InnoDB (the binlog checkpoint), which lags a moment.
async fn purge_to(root: &mut Conn, file: &str) {
    for _ in 0..100 {
        root.query_drop(format!("PURGE BINARY LOGS TO '{file}'"))
            .await
            .unwrap();
        let first: Option<mysql_async::Row> = root.query_first("SHOW BINARY LOGS").await.unwrap();
        if first.and_then(|r| r.get::<String, _>(0)).as_deref() == Some(file) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("the server kept the binlog files before {file}");
}

fn position(file: &str, pos: u64, gtid: Option<&str>) -> MySqlPosition {
    MySqlPosition {
        file: file.into(),
        pos,
        gtid_set: gtid.map(|g| g.parse().unwrap()),
        ..Default::default()
    }
}

async fn setup_table(root: &mut Conn) -> String {
    root.query_drop("CREATE DATABASE ret").await.unwrap();
    root.query_drop("CREATE TABLE ret.t (id INT PRIMARY KEY, note TEXT)")
        .await
        .unwrap();
    "ret.t".into()
}

#[tokio::test]
async fn file_positions_retained_then_purged() {
    let my = MariaDbServer::start(MariaDbOptions::default().arg("--expire-logs-days=1")).unwrap();
    let mut root = my.root_conn().await.unwrap();
    let t = setup_table(&mut root).await;
    root.query_drop(format!("INSERT INTO {t} VALUES (1, 'one')"))
        .await
        .unwrap();
    root.query_drop("FLUSH BINARY LOGS").await.unwrap();
    // Our position: the start of the second file's first transaction.
    let (second, pos) = master_status(&mut root).await;
    for i in 2..10 {
        root.query_drop(format!("INSERT INTO {t} VALUES ({i}, REPEAT('x', 1000))"))
            .await
            .unwrap();
    }
    root.query_drop("FLUSH BINARY LOGS").await.unwrap();
    root.query_drop(format!("INSERT INTO {t} VALUES (10, 'ten')"))
        .await
        .unwrap();
    root.query_drop("FLUSH BINARY LOGS").await.unwrap();
    root.query_drop(format!("INSERT INTO {t} VALUES (11, 'eleven')"))
        .await
        .unwrap();

    let mut cdc = connect(&my, "cdc", CDC_PASSWORD).await;
    let server = inspect(&mut cdc).await.unwrap();
    assert_eq!(server.flavor, Flavor::MariaDb);
    assert_eq!(server.retention.expire_seconds, Some(86_400));
    assert!(server.retention.max_binlog_size > 0);
    assert!(matches!(server.gtids, ServerGtids::MariaDb { .. }));
    let names: Vec<&str> = server.files.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert_eq!(names[1], second);
    let (current, current_pos) = master_status(&mut root).await;
    // (MariaDB may append a Binlog_checkpoint event at any moment: positions only grow.)
    assert_eq!(server.current_file, current);
    assert!(server.current_pos <= current_pos);
    assert_eq!(names[3], current);

    let ours = position(&second, pos, None);
    let m = margin(&server, &ours);
    assert!(m.retained && m.purged.is_none(), "{m:?}");
    assert_eq!((m.files_before, m.files_ahead), (1, 3));
    let size = |i: usize| server.files[i].size;
    assert_eq!(m.bytes_before, size(0) + pos);
    assert_eq!(m.bytes_ahead, size(1) - pos + size(2) + server.current_pos);
    // The second file was closed before anyone watched: its age is not known.
    assert_eq!(m.expires_in, Expiry::Unknown);
    // The current file lasts at least one retention period.
    assert_eq!(
        margin(&server, &position(&current, 4, None)).expires_in,
        Expiry::In(86_400)
    );

    // The watch learns a rotation's time from two checks around it.
    let metrics = Metrics::default();
    let mut watch = RetentionWatch::new(&metrics);
    let at_current = position(&current, current_pos, None);
    let m = watch.check(&mut cdc, &at_current).await.unwrap();
    assert!(m.retained);
    assert_eq!(watch.threshold_seconds, Some(3600));
    assert_eq!(watch.metrics.files_retained.get(), 4);
    assert_eq!(watch.metrics.behind_files.get(), 1);
    assert_eq!(watch.metrics.behind_bytes.get(), m.bytes_ahead);
    assert!(m.bytes_ahead < 1000, "{m:?}");
    assert_eq!(watch.metrics.margin_alarm.get(), 0);
    assert_eq!(watch.metrics.expire_seconds.get(), 86_400);
    root.query_drop("FLUSH BINARY LOGS").await.unwrap();
    let m = watch.check(&mut cdc, &at_current).await.unwrap();
    match m.expires_in {
        Expiry::In(s) => assert!(s > 0 && s <= 86_400, "{s}"),
        other => panic!("the rotation was seen, the margin should be known: {other:?}"),
    }
    assert_eq!(watch.metrics.margin_known.get(), 1);
    assert_eq!(watch.metrics.files_retained.get(), 5);
    assert_eq!(watch.metrics.behind_files.get(), 2);

    // A file closed before the watch started: its successor's creation time says.
    let m = watch.check(&mut cdc, &ours).await.unwrap();
    match m.expires_in {
        Expiry::In(s) => assert!(s > 0 && s <= 86_400, "{s}"),
        other => panic!("the age of {second} should have been read: {other:?}"),
    }
    assert_eq!(watch.metrics.behind_files.get(), 4);
    assert_eq!(watch.metrics.margin_alarm.get(), 0);
    // Move this session's clock (which inspect reads) 23.5 hours on: half an hour left,
    // below the one-hour threshold. Then back: the alarm clears.
    cdc.query_drop("SET @@session.timestamp = UNIX_TIMESTAMP() + 84600")
        .await
        .unwrap();
    let m = watch.check(&mut cdc, &ours).await.unwrap();
    assert!(matches!(m.expires_in, Expiry::In(s) if s < 3600), "{m:?}");
    assert!(m.retained);
    assert_eq!(watch.metrics.margin_alarm.get(), 1);
    cdc.query_drop("SET @@session.timestamp = DEFAULT")
        .await
        .unwrap();
    watch.check(&mut cdc, &ours).await.unwrap();
    assert_eq!(watch.metrics.margin_alarm.get(), 0);

    // Purge up to the third file: our position's file is gone.
    let third = names[2].to_string();
    purge_to(&mut root, &third).await;
    let server = inspect(&mut cdc).await.unwrap();
    assert_eq!(server.files[0].name, third);
    let m = margin(&server, &ours);
    assert!(!m.retained);
    let p = m.purged.expect("purged");
    assert_eq!(p.lost_files, vec![second.clone()]);
    let text = p.to_string();
    assert!(
        text.contains(&format!("{second}:{pos}"))
            && text.contains(&third)
            && text.contains("when_needed"),
        "{text}"
    );
    // The watch says so too, and alarms.
    watch.check(&mut cdc, &ours).await.unwrap();
    assert_eq!(watch.metrics.purged.get(), 1);
    assert_eq!(watch.metrics.margin_alarm.get(), 1);
    let mut out = String::new();
    metrics.render(&mut out);
    assert!(out.contains("cdc_mysql_binlog_purged 1"), "{out}");
}

#[tokio::test]
async fn gtid_positions_in_two_domains() {
    let my = MariaDbServer::start(MariaDbOptions::default()).unwrap();
    let mut root = my.root_conn().await.unwrap();
    let mut dom2 = my.root_conn().await.unwrap();
    dom2.query_drop("SET SESSION gtid_domain_id = 2")
        .await
        .unwrap();
    let t = setup_table(&mut root).await;
    root.query_drop(format!("INSERT INTO {t} VALUES (1, 'd0')"))
        .await
        .unwrap();
    dom2.query_drop(format!("INSERT INTO {t} VALUES (2, 'd2')"))
        .await
        .unwrap();
    let (file, pos) = master_status(&mut root).await;
    // An old position: both domains as of now.
    let old = gtid_pos(&mut root, &file, pos).await;
    assert!(old.contains("2-"), "{old}");

    // More in both domains, then in domain 2 only, rotating in between.
    root.query_drop(format!("INSERT INTO {t} VALUES (3, 'd0')"))
        .await
        .unwrap();
    root.query_drop("FLUSH BINARY LOGS").await.unwrap();
    let (mid_file, mid_pos) = master_status(&mut root).await;
    let mid = gtid_pos(&mut root, &mid_file, mid_pos).await;
    dom2.query_drop(format!("INSERT INTO {t} VALUES (4, 'd2')"))
        .await
        .unwrap();
    root.query_drop("FLUSH BINARY LOGS").await.unwrap();
    let (new_file, new_pos) = master_status(&mut root).await;
    let new = gtid_pos(&mut root, &new_file, new_pos).await;
    purge_to(&mut root, &new_file).await;

    let mut cdc = connect(&my, "cdc", CDC_PASSWORD).await;
    let server = inspect(&mut cdc).await.unwrap();
    assert_eq!(server.files.len(), 1);
    let ServerGtids::MariaDb {
        oldest,
        binlog_state,
    } = &server.gtids
    else {
        panic!("{:?}", server.gtids)
    };
    // The oldest file's GTID list is the state the server was in when it started it.
    let oldest_text: Vec<String> = oldest.values().map(|g| g.to_string()).collect();
    assert_eq!(oldest_text.join(","), new, "binlog state {binlog_state}");

    // The old position lost transactions in both domains.
    let m = margin(&server, &position(&file, pos, Some(&old)));
    let p = m.purged.expect("purged");
    let lost = p.lost_gtids.clone().unwrap();
    assert!(
        lost.contains("domain 0") && lost.contains("domain 2"),
        "{lost}"
    );
    assert!(p.to_string().contains("when_needed"));
    // The middle one is caught up in domain 0, behind in domain 2.
    let m = margin(&server, &position(&mid_file, mid_pos, Some(&mid)));
    let lost = m.purged.expect("purged").lost_gtids.unwrap();
    assert!(
        lost.contains("domain 2") && !lost.contains("domain 0"),
        "{lost}"
    );
    // A position that never saw domain 2 lost all of it.
    let d0_only: String = mid.split(',').filter(|g| g.starts_with("0-")).collect();
    let m = margin(&server, &position(&mid_file, mid_pos, Some(&d0_only)));
    let lost = m.purged.expect("purged").lost_gtids.unwrap();
    assert!(lost.contains("domain 2 seq 1 to"), "{lost}");
    // Up to date by GTID: retained, whatever the file (the source resumes by GTID).
    let m = margin(&server, &position(&file, pos, Some(&new)));
    assert!(m.retained, "{m:?}");
    let m = margin(&server, &position(&new_file, new_pos, Some(&new)));
    assert!(m.retained);
    // (MariaDB writes a Binlog_checkpoint event after the purge: measure from the server.)
    assert_eq!(
        (m.files_before, m.files_ahead, m.bytes_ahead),
        (0, 1, server.current_pos - new_pos)
    );
    // No expiry on this server.
    assert_eq!(m.expires_in, Expiry::Never);
}

#[tokio::test]
async fn the_check_needs_binlog_monitor() {
    let my = MariaDbServer::shared();
    let mut cdc = connect(my, "cdc", CDC_PASSWORD).await;
    let server = inspect(&mut cdc).await.unwrap();
    assert!(!server.files.is_empty());
    assert_eq!(server.retention.expire_seconds, None);
    let metrics = Metrics::default();
    let mut watch = RetentionWatch::new(&metrics);
    let at = position(&server.current_file, server.current_pos, None);
    let m = watch.check(&mut cdc, &at).await.unwrap();
    assert_eq!(m.expires_in, Expiry::Never);
    assert_eq!(watch.threshold_seconds, None, "no expiry, no time alarm");
    assert_eq!(watch.metrics.margin_alarm.get(), 0);

    let mut app = connect(my, "app", APP_PASSWORD).await;
    let e = inspect(&mut app).await.unwrap_err();
    assert!(!e.is_transient(), "{e}");
    assert!(
        matches!(
            &e,
            RetentionError::Privilege {
                grant: "BINLOG MONITOR",
                ..
            }
        ),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains("GRANT BINLOG MONITOR ON *.* TO 'app'@"),
        "{text}"
    );
}
