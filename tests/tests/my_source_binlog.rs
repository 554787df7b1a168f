//! The binlog connection of the MySQL / MariaDB source against a real MariaDB: with the
//! capability announced the server sends its own GTID events (and positions by GTID
//! state); a replica that does not announce it gets them rewritten into `BEGIN` queries.

use cdc_harness::{passwords, MariaDbServer};
use cdc_sources::mysql::binlog::{self, BinlogStart, Flavor, Next, MARIADB_GTID_EVENT};
use cdc_sources::mysql::MySqlEndpoint;
use futures_util::StreamExt;
use mysql_async::binlog::events::{Event, EventData};
use mysql_async::prelude::Queryable;
use mysql_async::BinlogStreamRequest;
use std::time::Duration;

async fn master_status(my: &MariaDbServer) -> (String, u64, String) {
    let mut c = my.root_conn().await.unwrap();
    let row: mysql_async::Row = c.query_first("SHOW MASTER STATUS").await.unwrap().unwrap();
    let file: String = row.get(0).unwrap();
    let pos: u64 = row.get(1).unwrap();
    let gtid: String = c
        .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (file.as_str(), pos))
        .await
        .unwrap()
        .unwrap();
    (file, pos, gtid)
}

fn endpoint(my: &MariaDbServer) -> MySqlEndpoint {
    let url = format!(
        "{}?sslmode=disable",
        my.url("cdc", passwords::MARIADB_CDC, "")
    );
    MySqlEndpoint::from_url(&url, None).unwrap()
}

/// (event type, query text of query events) up to and including the first XID.
fn summary(ev: &Event) -> (u8, Option<String>) {
    let ty = ev.header().event_type_raw();
    let q = match ev.read_data() {
        Ok(Some(EventData::QueryEvent(q))) => Some(q.query().to_string()),
        _ => None,
    };
    (ty, q)
}

const XID: u8 = 16;

#[tokio::test(flavor = "multi_thread")]
async fn our_connection_gets_mariadb_gtid_events_and_positions_by_them() {
    let my = MariaDbServer::shared();
    let db = my.create_database().await.unwrap();
    my.execute(&format!("CREATE TABLE {db}.t (id int PRIMARY KEY)"))
        .await
        .unwrap();
    let (file, pos, gtid) = master_status(my).await;
    my.execute(&format!("INSERT INTO {db}.t VALUES (1)"))
        .await
        .unwrap();
    for (name, start) in [
        (
            "file+pos",
            BinlogStart {
                file: file.clone(),
                pos,
                gtid_set: None,
            },
        ),
        (
            "gtid",
            BinlogStart {
                file: String::new(),
                pos: 4,
                gtid_set: Some(gtid.parse().unwrap()),
            },
        ),
    ] {
        let mut conn = binlog::open(
            &endpoint(my),
            3_900_001,
            Flavor::MariaDb,
            &start,
            Duration::from_secs(1),
        )
        .await
        .unwrap();
        let mut seen = Vec::new();
        loop {
            let Next::Event(ev) = conn.next().await.unwrap() else {
                panic!("stream ended")
            };
            let s = summary(&ev);
            if s.0 == MARIADB_GTID_EVENT {
                let g = binlog::parse_gtid_event(ev.data(), ev.header().server_id()).unwrap();
                assert!(!g.standalone());
                // The first group after the start is the insert, the next GTID.
                let want: cdc_schemas::gtid::MariaGtid = gtid.parse().unwrap();
                assert_eq!(
                    (g.gtid.domain, g.gtid.seq),
                    (want.domain, want.seq + 1),
                    "{name}"
                );
            }
            let done = s.0 == XID;
            seen.push(s);
            if done {
                break;
            }
        }
        assert!(
            seen.iter().any(|(t, _)| *t == MARIADB_GTID_EVENT),
            "{name}: {seen:?}"
        );
        assert!(
            !seen.iter().any(|(_, q)| q.as_deref() == Some("BEGIN")),
            "{name}: {seen:?}"
        );
        let _ = conn.stream.close().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_capability_gtid_events_become_begin_queries() {
    let my = MariaDbServer::shared();
    let db = my.create_database().await.unwrap();
    my.execute(&format!("CREATE TABLE {db}.t (id int PRIMARY KEY)"))
        .await
        .unwrap();
    let (file, pos, _) = master_status(my).await;
    my.execute(&format!("INSERT INTO {db}.t VALUES (1)"))
        .await
        .unwrap();
    let conn = endpoint(my).connect().await.unwrap();
    let mut stream = conn
        .get_binlog_stream(
            BinlogStreamRequest::new(3_900_002)
                .with_filename(file.as_bytes())
                .with_pos(pos),
        )
        .await
        .unwrap();
    let mut seen = Vec::new();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let s = summary(&ev);
        let done = s.0 == XID;
        seen.push(s);
        if done {
            break;
        }
    }
    assert!(
        !seen.iter().any(|(t, _)| *t == MARIADB_GTID_EVENT),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|(_, q)| q.as_deref() == Some("BEGIN")),
        "{seen:?}"
    );
    let _ = stream.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_stream_gets_heartbeats() {
    let my = MariaDbServer::shared();
    let (file, pos, _) = master_status(my).await;
    let start = BinlogStart {
        file,
        pos,
        gtid_set: None,
    };
    let mut conn = binlog::open(
        &endpoint(my),
        3_900_003,
        Flavor::MariaDb,
        &start,
        Duration::from_millis(200),
    )
    .await
    .unwrap();
    // The read timeout (three periods and a margin) would fail this loop if the server
    // sent nothing while idle.
    let mut heartbeats = 0;
    while heartbeats < 3 {
        let Next::Event(ev) = conn.next().await.unwrap() else {
            panic!("stream ended")
        };
        if matches!(ev.read_data(), Ok(Some(EventData::HeartbeatEvent))) {
            heartbeats += 1;
        }
    }
    let _ = conn.stream.close().await;
}
