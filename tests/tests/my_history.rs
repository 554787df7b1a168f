//! The MySQL schema history against a real MariaDB and the embedded-log store: a snapshot
//! of `Schemas::load`, then DDL run on the server and recorded at the position
//! `SHOW MASTER STATUS` (and `@@gtid_binlog_pos`) gives after each statement; restoring at
//! every one of those positions — from a store reopened as after a restart — gives exactly
//! the schemas the server had then, by GTID set and by file position alike.

use std::sync::Arc;

use cdc_connector::history::LogHistoryStore;
use cdc_harness::MariaDbServer;
use cdc_schemas::{GtidSet, MySqlPosition};
use cdc_sources::filter::TableFilter;
use cdc_sources::mysql::history::SchemaHistory;
use cdc_sources::mysql::schema::Schemas;
use cdc_sources::mysql::table::MyTable;
use mysql_async::prelude::Queryable;
use mysql_async::Conn;

/// The server's binlog position now: the end of the last event written.
async fn position(conn: &mut Conn) -> MySqlPosition {
    let row: mysql_async::Row = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .unwrap()
        .expect("the binlog is on");
    let file: String = row.get(0).unwrap();
    let pos: u64 = row.get(1).unwrap();
    let gtid: String = conn
        .query_first("SELECT @@gtid_binlog_pos")
        .await
        .unwrap()
        .unwrap();
    MySqlPosition {
        file,
        pos,
        gtid_set: Some(if gtid.is_empty() {
            GtidSet::empty_mariadb()
        } else {
            gtid.parse().unwrap()
        }),
        ..Default::default()
    }
}

/// Each captured table with its default charset.
type Captured = Vec<(MyTable, Option<String>)>;

/// What must be restored: the captured tables and their default charsets (the loaded
/// state also knows every database of the server, which other tests create meanwhile).
fn captured(s: &Schemas) -> Captured {
    s.iter()
        .map(|t| {
            (
                t.clone(),
                s.table_charset(&t.database, &t.name).map(str::to_string),
            )
        })
        .collect()
}

#[tokio::test]
async fn restore_gives_the_schema_the_server_had_at_each_position() {
    let my = MariaDbServer::shared();
    let db = my.create_database().await.unwrap();
    let filter = TableFilter::new(&[format!("{db}.*")], &[]);
    let mut conn = my.root_conn().await.unwrap();
    conn.query_drop(format!("USE `{db}`")).await.unwrap();
    conn.query_drop(
        "CREATE TABLE t1 (id INT PRIMARY KEY, a VARCHAR(10) DEFAULT 'x') DEFAULT CHARSET=utf8mb4",
    )
    .await
    .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let p0 = position(&mut conn).await;
    let s0 = Schemas::load(&mut conn, &filter).await.unwrap();
    let statements = [
        "ALTER TABLE t1 ADD COLUMN b INT NOT NULL DEFAULT 5",
        "CREATE TABLE t2 (k BIGINT UNSIGNED NOT NULL, v TEXT, PRIMARY KEY (k))",
        "ALTER TABLE t1 MODIFY a VARCHAR(20) NOT NULL, ADD COLUMN c DATETIME(3) NULL AFTER id",
        "RENAME TABLE t2 TO t3",
        "ALTER TABLE t1 DROP COLUMN b, DROP PRIMARY KEY, ADD PRIMARY KEY (id, a)",
        "CREATE TABLE t4 (s CHAR(3)) DEFAULT CHARSET=latin1",
        "ALTER TABLE t4 CONVERT TO CHARACTER SET utf8mb4",
        "DROP TABLE t3",
        "ALTER TABLE t1 ADD COLUMN e ENUM('p','q') DEFAULT 'q', ALTER COLUMN a SET DEFAULT 'z'",
    ];
    // (position after the statement, what the server says then)
    let mut steps: Vec<(MySqlPosition, Captured)> = Vec::new();
    {
        let store = Arc::new(LogHistoryStore::open_dir(dir.path(), "my").unwrap());
        let mut h = SchemaHistory::open(store.clone(), &filter).unwrap();
        assert_eq!(h.restore(&p0).unwrap(), None);
        h.record_snapshot(&p0, &s0).unwrap();
        for sql in statements {
            conn.query_drop(sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            let p = position(&mut conn).await;
            h.record_ddl(&p, Some(&db), sql).unwrap();
            steps.push((
                p,
                captured(&Schemas::load(&mut conn, &filter).await.unwrap()),
            ));
        }
        store.log().close().unwrap();
    }
    // Consecutive positions differ (each DDL is a binlog group with its GTID), and so do
    // the schemas: a restore that missed or added a DDL is seen.
    for w in steps.windows(2) {
        assert!(w[0].0.pos != w[1].0.pos || w[0].0.file != w[1].0.file);
        assert_ne!(w[0].1, w[1].1);
    }
    assert_ne!(steps[0].1, captured(&s0));

    // A restart: the history from disk.
    let store = Arc::new(LogHistoryStore::open_dir(dir.path(), "my").unwrap());
    let mut h = SchemaHistory::open(store.clone(), &filter).unwrap();
    assert_eq!(h.records().len(), 1 + statements.len());
    let by_file = |p: &MySqlPosition| MySqlPosition {
        gtid_set: None,
        ..p.clone()
    };
    for resume in [p0.clone(), by_file(&p0)] {
        let r = h.restore(&resume).unwrap().expect("the snapshot is at p0");
        assert_eq!(captured(&r), captured(&s0));
    }
    for (i, (p, want)) in steps.iter().enumerate() {
        for resume in [p.clone(), by_file(p)] {
            let r = h.restore(&resume).unwrap().expect("restorable");
            assert_eq!(
                &captured(&r),
                want,
                "after `{}` at {}:{} (gtid {:?})",
                statements[i],
                resume.file,
                resume.pos,
                resume.gtid_set.as_ref().map(|g| g.to_string())
            );
        }
    }
    // Resumed at the second position, the stream reads the later DDLs again: recording
    // them again appends nothing.
    for (i, sql) in statements.iter().enumerate().skip(2) {
        h.record_ddl(&steps[i].0, Some(&db), sql).unwrap();
    }
    assert_eq!(h.records().len(), 1 + statements.len());
    store.log().close().unwrap();
    conn.disconnect().await.unwrap();
}
