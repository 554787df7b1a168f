//! The Postgres streaming-replication client and pgoutput decoder against a real server:
//! authentication and TLS, replication commands, slot snapshots, decoding of every
//! message kind with correct LSNs, confirmed-flush feedback (only durable positions, and
//! the idle rule), streamed large transactions, feedback under backpressure (the
//! wal_sender_timeout livelock) and lossless values for the built-in types.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_harness::{passwords, PgOptions, PgServer};
use cdc_schemas::{Checkpoint, PgPosition, SourcePosition};
use cdc_schemas::{ColumnType, Lsn, Value};
use cdc_sources::postgres::conn::PgConnectErrorKind;
use cdc_sources::postgres::pgoutput::{OldTuple, PgOutputDecoder, PgOutputMessage};
use cdc_sources::postgres::protocol::XLogData;
use cdc_sources::postgres::relation::{load_types, RelationCache, StaticTypeResolver};
use cdc_sources::postgres::replication::{
    max_proto_version, CreateSlotOptions, ReplicationConnection, ReplicationError,
    ReplicationStream, SlotSnapshot, StreamOptions,
};
use cdc_sources::postgres::PgEndpoint;
use cdc_sources::{Durable, DurablePublisher};

fn endpoint(pg: &PgServer, user: &str, pw: &str, db: &str, query: &str) -> PgEndpoint {
    PgEndpoint::from_url(&format!("{}?{query}", pg.url(user, pw, db)), None).unwrap()
}

fn cdc(pg: &PgServer, db: &str) -> PgEndpoint {
    endpoint(pg, "cdc", passwords::PG_CDC, db, "sslmode=disable")
}

async fn client(pg: &PgServer, db: &str) -> tokio_postgres::Client {
    cdc(pg, db).connect().await.unwrap()
}

/// A fresh database with `sql` run in it as `cdc` (the owner).
async fn database(pg: &PgServer, sql: &str) -> String {
    let db = pg.create_database().await.unwrap();
    client(pg, &db).await.batch_execute(sql).await.unwrap();
    db
}

async fn confirmed_flush(pg: &PgServer, slot: &str) -> Lsn {
    let c = pg.superuser_client("postgres").await.unwrap();
    let row = c
        .query_one(
            "SELECT coalesce(confirmed_flush_lsn, '0/0')::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap();
    row.get::<_, String>(0).parse().unwrap()
}

async fn eventually<F, Fut>(timeout: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if f().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads and decodes messages, keeping the relation cache current.
struct Reader {
    stream: ReplicationStream,
    decoder: PgOutputDecoder,
    cache: RelationCache,
}

impl Reader {
    fn new(stream: ReplicationStream) -> Self {
        Reader {
            stream,
            decoder: PgOutputDecoder::new(),
            cache: RelationCache::new(),
        }
    }

    async fn next(&mut self) -> (XLogData, PgOutputMessage) {
        let x = tokio::time::timeout(Duration::from_secs(30), self.stream.next_message())
            .await
            .expect("no message within 30 s")
            .expect("stream error")
            .expect("stream ended");
        let m = self
            .decoder
            .decode_next(&x.data)
            .unwrap_or_else(|e| panic!("{e}"));
        match &m {
            PgOutputMessage::Relation(r) => {
                self.cache.apply_relation(r);
            }
            PgOutputMessage::Type(t) => self.cache.apply_type(t),
            _ => {}
        }
        (x, m)
    }

    /// Messages up to and including the next Commit (or Stream Commit / top-level Stream
    /// Abort).
    async fn transaction(&mut self) -> Vec<(XLogData, PgOutputMessage)> {
        let mut v = Vec::new();
        loop {
            let (x, m) = self.next().await;
            let end = match &m {
                PgOutputMessage::Commit(_) | PgOutputMessage::StreamCommit(_) => true,
                PgOutputMessage::StreamAbort(a) => a.xid == a.subxid,
                _ => false,
            };
            v.push((x, m));
            if end {
                return v;
            }
        }
    }
}

fn fast_feedback() -> StreamOptions {
    StreamOptions {
        status_interval: Duration::from_millis(100),
        ..StreamOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn authenticates_with_each_method_and_classifies_failures() {
    let pg = PgServer::shared();
    let db = pg.create_database().await.unwrap();
    for (user, pw) in [
        ("cdc", passwords::PG_CDC),
        ("cdc_md5", passwords::PG_CDC_MD5),
        ("cdc_trust", ""),
    ] {
        let mut c = ReplicationConnection::connect(&endpoint(pg, user, pw, &db, "sslmode=disable"))
            .await
            .unwrap_or_else(|e| panic!("{user}: {e}"));
        assert!(!c.is_tls());
        let id = c.identify_system().await.unwrap();
        assert_eq!(id.dbname.as_deref(), Some(db.as_str()));
        assert!(id.timeline >= 1 && id.xlogpos > Lsn::ZERO);
        assert!(!id.systemid.is_empty());
        assert_eq!(c.server_version_num() / 10000, pg.major_version());
        let r = c.simple_query("SHOW server_version").await.unwrap();
        assert!(r[0]
            .get(0, "server_version")
            .unwrap()
            .starts_with(&pg.major_version().to_string()));
        let r = c
            .simple_query("SELECT 1 AS one, NULL::text AS nothing")
            .await
            .unwrap();
        assert_eq!(
            (r[0].get(0, "one"), r[0].get(0, "nothing")),
            (Some("1"), None)
        );
        // The session settings the value parser relies on.
        let r = c
            .simple_query("SELECT current_setting('TimeZone') AS tz, current_setting('IntervalStyle') AS st, current_setting('extra_float_digits') AS efd")
            .await
            .unwrap();
        assert_eq!(r[0].get(0, "tz"), Some("UTC"));
        assert_eq!(r[0].get(0, "st"), Some("iso_8601"));
        assert_eq!(r[0].get(0, "efd"), Some("3"));
        // An SQL error is a server error with the SQLSTATE, and the connection survives.
        let e = c
            .simple_query("SELECT * FROM no_such_table")
            .await
            .unwrap_err();
        assert_eq!(e.sqlstate(), Some("42P01"), "{e}");
        assert!(!e.is_transient());
        c.identify_system().await.unwrap();
        c.close().await;
    }

    let connect_err = |ep: PgEndpoint| async move {
        match ReplicationConnection::connect(&ep).await {
            Err(ReplicationError::Connect(e)) => e,
            other => panic!("expected a connect error, got {other:?}"),
        }
    };
    let e = connect_err(endpoint(pg, "cdc", "wrong", &db, "sslmode=disable")).await;
    assert_eq!(e.kind, PgConnectErrorKind::Auth, "{e}");
    assert!(
        !e.is_transient() && e.to_string().contains("password"),
        "{e}"
    );
    let e = connect_err(endpoint(pg, "cdc", "", &db, "sslmode=disable")).await;
    assert_eq!(e.kind, PgConnectErrorKind::Auth, "{e}");
    // `app` has no REPLICATION attribute.
    let e = connect_err(endpoint(
        pg,
        "app",
        passwords::PG_APP,
        &db,
        "sslmode=disable",
    ))
    .await;
    assert_eq!(e.kind, PgConnectErrorKind::Auth, "{e}");
    assert!(e.fix.contains("REPLICATION"), "{e}");
    let e = connect_err(endpoint(
        pg,
        "cdc",
        passwords::PG_CDC,
        "no_such_db",
        "sslmode=disable",
    ))
    .await;
    assert_eq!(e.kind, PgConnectErrorKind::NoDatabase, "{e}");
    // Nothing listens: transient.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ep = PgEndpoint::from_url(
        &format!("postgres://cdc@127.0.0.1:{port}/x?sslmode=disable"),
        None,
    )
    .unwrap();
    let e = connect_err(ep).await;
    assert!(e.is_transient(), "{e}");
    // TLS required but the shared server has none; prefer falls back to plain.
    let e = connect_err(endpoint(
        pg,
        "cdc",
        passwords::PG_CDC,
        &db,
        "sslmode=require",
    ))
    .await;
    assert_eq!(e.kind, PgConnectErrorKind::Tls, "{e}");
    let c = ReplicationConnection::connect(&endpoint(
        pg,
        "cdc",
        passwords::PG_CDC,
        &db,
        "sslmode=prefer",
    ))
    .await
    .unwrap();
    assert!(!c.is_tls());
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_modes() {
    let pg = match PgServer::start(PgOptions::default().ssl(true)) {
        Ok(pg) => pg,
        // The relocatable Postgres 16 build used for the second version has no OpenSSL.
        Err(e) if format!("{e:#}").contains("without SSL support") => {
            eprintln!("skipping: {e:#}");
            return;
        }
        Err(e) => panic!("{e:#}"),
    };
    let db = pg.create_database().await.unwrap();
    let ca = pg.ca_cert_path().unwrap().display().to_string();
    for query in [
        "sslmode=require".to_string(),
        "sslmode=prefer".to_string(),
        format!("sslmode=verify-ca&sslrootcert={ca}"),
        format!("sslmode=verify-full&sslrootcert={ca}"),
    ] {
        let mut c =
            ReplicationConnection::connect(&endpoint(&pg, "cdc", passwords::PG_CDC, &db, &query))
                .await
                .unwrap_or_else(|e| panic!("{query}: {e}"));
        assert!(c.is_tls(), "{query}");
        c.identify_system().await.unwrap();
        // md5 over TLS too.
        let mut c = ReplicationConnection::connect(&endpoint(
            &pg,
            "cdc_md5",
            passwords::PG_CDC_MD5,
            &db,
            &query,
        ))
        .await
        .unwrap_or_else(|e| panic!("{query}: {e}"));
        c.identify_system().await.unwrap();
    }
    // By host name: the certificate names localhost.
    let ep = PgEndpoint::from_url(
        &format!(
            "postgres://cdc:{}@localhost:{}/{db}?sslmode=verify-full&sslrootcert={ca}",
            passwords::PG_CDC,
            pg.port()
        ),
        None,
    )
    .unwrap();
    if let Ok(c) = ReplicationConnection::connect(&ep).await {
        assert!(c.is_tls());
    }
    // Without the test CA the chain does not verify.
    match ReplicationConnection::connect(&endpoint(
        &pg,
        "cdc",
        passwords::PG_CDC,
        &db,
        "sslmode=verify-full",
    ))
    .await
    {
        Err(ReplicationError::Connect(e)) => {
            assert_eq!(e.kind, PgConnectErrorKind::Tls, "{e}");
            assert!(e.fix.contains("sslrootcert"), "{e}");
        }
        other => panic!("expected a TLS error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn slot_snapshot_stream_decode_and_feedback() {
    let pg = PgServer::shared();
    let db = database(
        pg,
        "CREATE TABLE t (id int PRIMARY KEY, v text);
         CREATE TABLE u (id int PRIMARY KEY);
         CREATE TABLE unpublished (id int);
         INSERT INTO t VALUES (1, 'before the slot');
         CREATE PUBLICATION pub FOR TABLE t, u;",
    )
    .await;
    let mut repl = ReplicationConnection::connect(&cdc(pg, &db)).await.unwrap();
    let before = repl.identify_system().await.unwrap().xlogpos;
    let slot = repl
        .create_slot("s_decode", &CreateSlotOptions::default())
        .await
        .unwrap();
    assert_eq!(slot.slot_name, "s_decode");
    assert_eq!(slot.output_plugin.as_deref(), Some("pgoutput"));
    assert!(slot.consistent_point >= before);
    let snapshot = slot.snapshot_name.clone().expect("exported snapshot");
    assert_eq!(confirmed_flush(pg, "s_decode").await, slot.consistent_point);

    // A change after the slot: streamed, and invisible to the exported snapshot.
    let c = client(pg, &db).await;
    c.execute("INSERT INTO t VALUES (2, 'after the slot')", &[])
        .await
        .unwrap();
    let snap_client = client(pg, &db).await;
    snap_client
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; SET TRANSACTION SNAPSHOT '{snapshot}'"
        ))
        .await
        .unwrap();
    let n: i64 = snap_client
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        n, 1,
        "the exported snapshot sees exactly the rows before the slot"
    );
    snap_client.batch_execute("COMMIT").await.unwrap();

    // A duplicate slot is a definite error with a fix.
    let mut other = ReplicationConnection::connect(&cdc(pg, &db)).await.unwrap();
    let e = other
        .create_slot("s_decode", &CreateSlotOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.sqlstate(), Some("42710"), "{e}");
    // Temporary slots without a snapshot; dropped with the connection or explicitly.
    let tmp = other
        .create_slot(
            "s_tmp",
            &CreateSlotOptions {
                temporary: true,
                snapshot: SlotSnapshot::Nothing,
                two_phase: false,
            },
        )
        .await
        .unwrap();
    assert!(tmp.snapshot_name.is_none());
    other.drop_slot("s_tmp", true).await.unwrap();
    let e = other.drop_slot("s_tmp", false).await.unwrap_err();
    assert_eq!(e.sqlstate(), Some("42704"), "{e}");

    let (durable_tx, durable_rx) = durable_at_start();
    let stream = repl
        .start(
            "s_decode",
            slot.consistent_point,
            &["pub"],
            &fast_feedback(),
            durable_rx,
        )
        .await
        .unwrap();
    assert_eq!(
        stream.proto_version(),
        max_proto_version(stream.server_version_num())
    );
    let feedback = stream.feedback();
    let mut r = Reader::new(stream);

    // Transaction 1: the insert made while the snapshot was being checked.
    let tx1 = r.transaction().await;
    let kinds: Vec<u8> = tx1.iter().map(|(_, m)| m.type_byte()).collect();
    assert_eq!(kinds, b"BRIC".to_vec());
    let PgOutputMessage::Begin(b1) = &tx1[0].1 else {
        panic!()
    };
    let PgOutputMessage::Commit(c1) = &tx1[3].1 else {
        panic!()
    };
    assert_eq!(b1.final_lsn, c1.commit_lsn);
    assert!(c1.end_lsn > c1.commit_lsn && c1.commit_lsn > slot.consistent_point);
    assert_eq!(
        tx1[3].0.wal_start, c1.end_lsn,
        "a Commit's XLogData starts at the end LSN"
    );
    let PgOutputMessage::Relation(rel) = &tx1[1].1 else {
        panic!()
    };
    assert_eq!((rel.namespace.as_str(), rel.name.as_str()), ("public", "t"));
    assert_eq!(
        rel.columns
            .iter()
            .map(|c| (c.name.as_str(), c.key, c.type_oid))
            .collect::<Vec<_>>(),
        vec![("id", true, 23), ("v", false, 25)]
    );
    let PgOutputMessage::Insert(ins) = &tx1[2].1 else {
        panic!()
    };
    assert_eq!(ins.relation_id, rel.id);
    assert_eq!(
        r.cache.decode_tuple(rel.id, &ins.new).unwrap().0,
        vec![Value::Int32(2), Value::Text("after the slot".into())]
    );
    let schema = r.cache.get(rel.id).unwrap().schema.clone();
    assert_eq!(schema.id.to_string(), "public.t");
    assert_eq!(schema.key, vec![0]);

    // Transaction 2: insert, update, key-changing update, delete, a transactional message.
    pg.execute(
        &db,
        "BEGIN;
         INSERT INTO t VALUES (3, 'x');
         UPDATE t SET v = 'y' WHERE id = 3;
         UPDATE t SET id = 4 WHERE id = 3;
         DELETE FROM t WHERE id = 4;
         SELECT pg_logical_emit_message(true, 'pfx', 'hello');
         COMMIT;",
    )
    .await
    .unwrap();
    let tx2 = r.transaction().await;
    let kinds: Vec<u8> = tx2.iter().map(|(_, m)| m.type_byte()).collect();
    assert_eq!(kinds, b"BIUUDMC".to_vec());
    let PgOutputMessage::Begin(b2) = &tx2[0].1 else {
        panic!()
    };
    let PgOutputMessage::Update(u1) = &tx2[2].1 else {
        panic!()
    };
    assert!(u1.old.is_none(), "key unchanged: no old tuple");
    assert_eq!(
        r.cache.decode_tuple(rel.id, &u1.new).unwrap().0,
        vec![Value::Int32(3), Value::Text("y".into())]
    );
    let PgOutputMessage::Update(u2) = &tx2[3].1 else {
        panic!()
    };
    let Some(OldTuple::Key(old)) = &u2.old else {
        panic!("{u2:?}")
    };
    assert_eq!(
        r.cache.decode_tuple(rel.id, old).unwrap().0,
        vec![Value::Int32(3), Value::Null]
    );
    let PgOutputMessage::Delete(d) = &tx2[4].1 else {
        panic!()
    };
    let OldTuple::Key(old) = &d.old else { panic!() };
    assert_eq!(
        r.cache.decode_tuple(rel.id, old).unwrap().0,
        vec![Value::Int32(4), Value::Null]
    );
    let PgOutputMessage::Message(msg) = &tx2[5].1 else {
        panic!()
    };
    assert!(msg.transactional);
    assert_eq!(
        (msg.prefix.as_str(), &msg.content[..]),
        ("pfx", &b"hello"[..])
    );
    // (Postgres reports a transactional message at its transaction's commit LSN.)
    assert!(msg.lsn > c1.end_lsn && msg.lsn <= b2.final_lsn);
    let PgOutputMessage::Commit(c2) = &tx2[6].1 else {
        panic!()
    };
    assert_eq!(b2.final_lsn, c2.commit_lsn);
    assert!(c2.commit_lsn > c1.end_lsn);
    // Change LSNs increase within the transaction.
    let lsns: Vec<Lsn> = tx2[1..5].iter().map(|(x, _)| x.wal_start).collect();
    assert!(lsns.windows(2).all(|w| w[0] < w[1]), "{lsns:?}");

    // Transaction 3: truncate of both tables (a Relation for u comes first).
    pg.execute(&db, "TRUNCATE t, u RESTART IDENTITY")
        .await
        .unwrap();
    let tx3 = r.transaction().await;
    let PgOutputMessage::Truncate(tr) = &tx3[tx3.len() - 2].1 else {
        panic!("{tx3:?}")
    };
    assert!(!tr.cascade && tr.restart_identity);
    let u_id = tx3
        .iter()
        .find_map(|(_, m)| match m {
            PgOutputMessage::Relation(r) if r.name == "u" => Some(r.id),
            _ => None,
        })
        .unwrap();
    let mut ids = tr.relation_ids.clone();
    ids.sort();
    let mut want = vec![rel.id, u_id];
    want.sort();
    assert_eq!(ids, want);
    let PgOutputMessage::Commit(c3) = &tx3.last().unwrap().1 else {
        panic!()
    };

    // A non-transactional message arrives on its own.
    pg.execute(&db, "SELECT pg_logical_emit_message(false, 'nt', 'now')")
        .await
        .unwrap();
    let (_, m) = r.next().await;
    let PgOutputMessage::Message(nt) = m else {
        panic!("{m:?}")
    };
    assert!(!nt.transactional && nt.prefix == "nt");

    // Feedback: nothing durable yet, so the slot must not move past the start.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(feedback.status().updates_sent > 0);
    assert_eq!(confirmed_flush(pg, "s_decode").await, slot.consistent_point);
    // Durable up to transaction 1 only: exactly that is confirmed.
    publish(&durable_tx, c1.end_lsn);
    assert!(
        eventually(Duration::from_secs(10), || async {
            confirmed_flush(pg, "s_decode").await == c1.end_lsn
        })
        .await,
        "confirmed_flush_lsn {} != {}",
        confirmed_flush(pg, "s_decode").await,
        c1.end_lsn
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(confirmed_flush(pg, "s_decode").await, c1.end_lsn);
    // Everything durable: confirmed reaches at least the last commit…
    publish(&durable_tx, nt.lsn.max(c3.end_lsn));
    assert!(
        eventually(Duration::from_secs(10), || async {
            confirmed_flush(pg, "s_decode").await >= c3.end_lsn
        })
        .await
    );
    // …and, idle, follows the server's WAL end past changes nobody publishes.
    let c = client(pg, &db).await;
    c.execute(
        "INSERT INTO unpublished SELECT generate_series(1, 100)",
        &[],
    )
    .await
    .unwrap();
    let wal_now: String = c
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    let wal_now: Lsn = wal_now.parse().unwrap();
    assert!(
        eventually(Duration::from_secs(15), || async {
            confirmed_flush(pg, "s_decode").await >= wal_now
        })
        .await,
        "idle slot did not advance to {wal_now}: {} (status {:?})",
        confirmed_flush(pg, "s_decode").await,
        feedback.status()
    );
    assert!(feedback.last_server_wal_end() >= wal_now);
    r.stream.stop().await;
    // The slot is free again.
    let mut again = ReplicationConnection::connect(&cdc(pg, &db)).await.unwrap();
    eventually(Duration::from_secs(5), || async {
        let c = pg.superuser_client("postgres").await.unwrap();
        let active: bool = c
            .query_one(
                "SELECT active FROM pg_replication_slots WHERE slot_name = 's_decode'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        !active
    })
    .await;
    again.drop_slot("s_decode", true).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn large_transactions_are_streamed() {
    let pg =
        PgServer::start(PgOptions::default().config("logical_decoding_work_mem = '64kB'")).unwrap();
    let db = database(
        &pg,
        "CREATE TABLE big (id int PRIMARY KEY, v text);
         CREATE PUBLICATION pub FOR TABLE big;",
    )
    .await;
    let mut repl = ReplicationConnection::connect(&cdc(&pg, &db))
        .await
        .unwrap();
    let slot = repl
        .create_slot(
            "s_big",
            &CreateSlotOptions {
                snapshot: SlotSnapshot::Nothing,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let (durable_tx, durable_rx) = durable_at_start();
    let stream = repl
        .start(
            "s_big",
            slot.consistent_point,
            &["pub"],
            &fast_feedback(),
            durable_rx,
        )
        .await
        .unwrap();
    let mut r = Reader::new(stream);
    let c = client(&pg, &db).await;
    let t = Instant::now();
    const ROWS: i64 = 200_000;
    c.execute(
        "INSERT INTO big SELECT g, 'row ' || g FROM generate_series(1, $1::int8) g",
        &[&ROWS],
    )
    .await
    .unwrap();
    let (mut inserts, mut starts, mut stops) = (0i64, 0, 0);
    let mut xid = None;
    let commit = loop {
        let (_, m) = r.next().await;
        match m {
            PgOutputMessage::StreamStart(s) => {
                assert_eq!(s.first_segment, starts == 0);
                assert!(xid.is_none() || xid == Some(s.xid));
                xid = Some(s.xid);
                starts += 1;
            }
            PgOutputMessage::StreamStop => stops += 1,
            PgOutputMessage::Insert(i) => {
                assert!(r.decoder.in_stream());
                assert_eq!(i.xid, xid);
                inserts += 1;
                if inserts == ROWS {
                    let row = r.cache.decode_tuple(i.relation_id, &i.new).unwrap();
                    assert_eq!(row.0[1], Value::Text(format!("row {ROWS}")));
                }
            }
            PgOutputMessage::Relation(rel) => assert_eq!(rel.xid, xid),
            PgOutputMessage::StreamCommit(sc) => break sc,
            other => panic!("unexpected {other:?}"),
        }
    };
    eprintln!(
        "{ROWS} rows streamed in {starts} segments: {:?}",
        t.elapsed()
    );
    assert_eq!(inserts, ROWS);
    assert!(starts > 1 && starts == stops);
    assert_eq!(Some(commit.xid), xid);
    assert!(commit.end_lsn > commit.commit_lsn);
    publish(&durable_tx, commit.end_lsn);

    // A rolled-back subtransaction inside a streamed transaction: Stream Abort for the
    // subtransaction, then the Stream Commit of the rest.
    pg.execute(
        &db,
        "BEGIN;
         INSERT INTO big SELECT g, 'a' FROM generate_series(1000001, 1005000) g;
         SAVEPOINT sp;
         INSERT INTO big SELECT g, 'b' FROM generate_series(1005001, 1010000) g;
         ROLLBACK TO sp;
         INSERT INTO big VALUES (2000000, 'c');
         COMMIT;",
    )
    .await
    .unwrap();
    let mut sub_abort = None;
    loop {
        let (_, m) = r.next().await;
        match m {
            PgOutputMessage::StreamAbort(a) => {
                assert_ne!(a.xid, a.subxid);
                assert_eq!(
                    a.abort_lsn, None,
                    "abort LSN only with streaming = parallel"
                );
                sub_abort = Some(a);
            }
            PgOutputMessage::StreamCommit(_) => break,
            PgOutputMessage::Commit(_) => panic!("expected a streamed transaction"),
            _ => {}
        }
    }
    assert!(
        sub_abort.is_some(),
        "no Stream Abort for the subtransaction"
    );
    // A large transaction rolled back entirely: a top-level Stream Abort.
    pg.execute(
        &db,
        "BEGIN; INSERT INTO big SELECT g, 'gone' FROM generate_series(3000001, 3005000) g; ROLLBACK;",
    )
    .await
    .unwrap();
    // Something after it, so we know when to stop looking.
    c.execute("INSERT INTO big VALUES (4000000, 'tail')", &[])
        .await
        .unwrap();
    let mut top_abort = false;
    loop {
        let (_, m) = r.next().await;
        match m {
            PgOutputMessage::StreamAbort(a) if a.xid == a.subxid => top_abort = true,
            PgOutputMessage::Commit(_) => break,
            _ => {}
        }
    }
    assert!(top_abort, "no top-level Stream Abort");
    r.stream.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn feedback_flows_while_the_consumer_stalls() {
    // The livelock test: the consumer does not read for 3 × wal_sender_timeout while the
    // server has plenty to send; the background task's status updates keep the
    // connection alive.
    let pg = PgServer::start(PgOptions::default().config("wal_sender_timeout = '2s'")).unwrap();
    let db = database(
        &pg,
        "CREATE TABLE t (id int PRIMARY KEY, pad text);
         CREATE PUBLICATION pub FOR TABLE t;",
    )
    .await;
    let mut repl = ReplicationConnection::connect(&cdc(&pg, &db))
        .await
        .unwrap();
    let pid = repl.backend_pid();
    let slot = repl
        .create_slot(
            "s_slow",
            &CreateSlotOptions {
                snapshot: SlotSnapshot::Nothing,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let (_durable_tx, durable_rx) = durable_at_start();
    let opts = StreamOptions {
        buffer: 8,
        ..StreamOptions::default()
    };
    let stream = repl
        .start("s_slow", slot.consistent_point, &["pub"], &opts, durable_rx)
        .await
        .unwrap();
    assert!(
        stream.status_interval() <= Duration::from_millis(667),
        "{:?}",
        stream.status_interval()
    );
    let feedback = stream.feedback();
    let mut r = Reader::new(stream);
    const ROWS: i64 = 20_000;
    client(&pg, &db)
        .await
        .execute(
            "INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(1, $1::int8) g",
            &[&ROWS],
        )
        .await
        .unwrap();
    // Let the server fill every buffer, then stall far beyond wal_sender_timeout.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let sent = feedback.status().updates_sent;
    let su = pg.superuser_client("postgres").await.unwrap();
    let alive: i64 = su
        .query_one(
            "SELECT count(*) FROM pg_stat_replication WHERE pid = $1",
            &[&pid],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(alive, 1, "the walsender is gone");
    let mut inserts = 0;
    loop {
        let (_, m) = r.next().await;
        match m {
            PgOutputMessage::Insert(_) => inserts += 1,
            PgOutputMessage::Commit(_) | PgOutputMessage::StreamCommit(_) => break,
            _ => {}
        }
    }
    assert_eq!(inserts, ROWS);
    assert!(sent >= 6, "only {sent} status updates during the stall");
    let log = std::fs::read_to_string(pg.log_path()).unwrap_or_default();
    assert!(
        !log.contains("terminating walsender process due to replication timeout"),
        "the server timed the walsender out"
    );
    r.stream.stop().await;
}

/// Lossless values: (SQL type, [(SQL literal, expected value)]).
fn type_cases() -> Vec<(&'static str, Vec<(&'static str, Value)>)> {
    use cdc_schemas::Decimal;
    let dec = |s: &str| Value::Decimal(s.parse::<Decimal>().unwrap());
    let text = |s: &str| Value::Text(s.to_string());
    let arr = Value::Array;
    vec![
        (
            "bool",
            vec![("true", Value::Bool(true)), ("false", Value::Bool(false))],
        ),
        (
            "int2",
            vec![
                ("-32768", Value::Int16(i16::MIN)),
                ("32767", Value::Int16(i16::MAX)),
            ],
        ),
        (
            "int4",
            vec![
                ("2147483647", Value::Int32(i32::MAX)),
                ("-2147483648", Value::Int32(i32::MIN)),
            ],
        ),
        (
            "int8",
            vec![
                ("-9223372036854775808", Value::Int64(i64::MIN)),
                ("9223372036854775807", Value::Int64(i64::MAX)),
            ],
        ),
        (
            "float4",
            vec![
                ("'3.4028235e+38'", Value::Float32(f32::MAX)),
                ("'NaN'", Value::Float32(f32::NAN)),
                ("'-Infinity'", Value::Float32(f32::NEG_INFINITY)),
                ("'1.17549435e-38'", Value::Float32(f32::MIN_POSITIVE)),
                ("'0.1'", Value::Float32(0.1)),
            ],
        ),
        (
            "float8",
            vec![
                ("'0.1'", Value::Float64(0.1)),
                ("'Infinity'", Value::Float64(f64::INFINITY)),
                ("'NaN'", Value::Float64(f64::NAN)),
                (
                    "'-1.2345678901234567e-300'",
                    Value::Float64(-1.2345678901234567e-300),
                ),
                ("'1.7976931348623157e308'", Value::Float64(f64::MAX)),
                ("'5e-324'", Value::Float64(5e-324)),
            ],
        ),
        (
            "numeric",
            vec![
                (
                    "'123456789012345678901234567890.123456789012345678901234567890'",
                    dec("123456789012345678901234567890.123456789012345678901234567890"),
                ),
                ("'NaN'", Value::Decimal(Decimal::NaN)),
                ("'-Infinity'", Value::Decimal(Decimal::NegInfinity)),
                ("'1e-30'", dec("0.000000000000000000000000000001")),
                ("'-0.000'", dec("0.000")),
            ],
        ),
        ("numeric(10,2)", vec![("1.5", dec("1.50"))]),
        (
            "text",
            vec![
                (
                    "E'h\\u00e9llo \"q\" \\\\b\\nline'",
                    text("héllo \"q\" \\b\nline"),
                ),
                ("''", text("")),
            ],
        ),
        ("varchar(5)", vec![("'abcde'", text("abcde"))]),
        ("char(3)", vec![("'ab'", text("ab "))]),
        ("name", vec![("'pg_name'", text("pg_name"))]),
        ("\"char\"", vec![("'x'", text("x"))]),
        (
            "bytea",
            vec![
                (
                    "'\\xdeadbeef00'",
                    Value::Bytes(vec![0xde, 0xad, 0xbe, 0xef, 0]),
                ),
                ("''", Value::Bytes(vec![])),
            ],
        ),
        (
            "date",
            vec![
                ("'2024-02-29'", Value::Date(19782)),
                ("'infinity'", Value::Date(i32::MAX)),
                ("'-infinity'", Value::Date(i32::MIN)),
            ],
        ),
        (
            "time",
            vec![
                ("'24:00:00'", Value::Time(86_400_000_000)),
                ("'12:34:56.789012'", Value::Time(45_296_789_012)),
            ],
        ),
        (
            "timetz",
            vec![
                (
                    "'01:02:03+05:30:15'",
                    Value::TimeTz {
                        micros: 3_723_000_000,
                        offset_seconds: 19815,
                    },
                ),
                (
                    "'12:00:00.5-08'",
                    Value::TimeTz {
                        micros: 43_200_500_000,
                        offset_seconds: -28800,
                    },
                ),
            ],
        ),
        (
            "timestamp(3)",
            vec![
                (
                    "'2024-01-01 12:00:00.123'",
                    Value::Timestamp(1_704_110_400_123_000),
                ),
                ("'-infinity'", Value::Timestamp(i64::MIN)),
            ],
        ),
        (
            "timestamptz",
            vec![
                (
                    "'2024-01-01 12:00:00.000001+02'",
                    Value::TimestampTz(1_704_103_200_000_001),
                ),
                ("'infinity'", Value::TimestampTz(i64::MAX)),
            ],
        ),
        (
            "interval",
            vec![
                (
                    "'1 year 2 mons 3 days 04:05:06.789'",
                    Value::Interval {
                        months: 14,
                        days: 3,
                        micros: 14_706_789_000,
                    },
                ),
                (
                    "'-1 year -2 mons +3 days -04:05:06.5'",
                    Value::Interval {
                        months: -14,
                        days: 3,
                        micros: -14_706_500_000,
                    },
                ),
                (
                    "'0'",
                    Value::Interval {
                        months: 0,
                        days: 0,
                        micros: 0,
                    },
                ),
                (
                    "'-0.000001 s'",
                    Value::Interval {
                        months: 0,
                        days: 0,
                        micros: -1,
                    },
                ),
            ],
        ),
        (
            "uuid",
            vec![(
                "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
                Value::Uuid([
                    0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd,
                    0x38, 0x0a, 0x11,
                ]),
            )],
        ),
        (
            "json",
            vec![(
                "'{\"b\": 1,  \"a\": [1,2]}'",
                Value::Json("{\"b\": 1,  \"a\": [1,2]}".into()),
            )],
        ),
        (
            "jsonb",
            vec![(
                "'{\"b\": 1,  \"a\": [1,2]}'",
                Value::Json("{\"a\": [1, 2], \"b\": 1}".into()),
            )],
        ),
        (
            "inet",
            vec![
                ("'192.168.0.1/24'", text("192.168.0.1/24")),
                ("'::1'", text("::1")),
            ],
        ),
        ("cidr", vec![("'10.0.0.0/8'", text("10.0.0.0/8"))]),
        (
            "macaddr",
            vec![("'08:00:2b:01:02:03'", text("08:00:2b:01:02:03"))],
        ),
        (
            "macaddr8",
            vec![("'08:00:2b:01:02:03:04:05'", text("08:00:2b:01:02:03:04:05"))],
        ),
        ("money", vec![("12.34", text("$12.34"))]),
        (
            "bit(4)",
            vec![(
                "B'1010'",
                Value::Bits {
                    len: 4,
                    bytes: vec![0xa0],
                },
            )],
        ),
        (
            "varbit",
            vec![(
                "B'101000001'",
                Value::Bits {
                    len: 9,
                    bytes: vec![0xa0, 0x80],
                },
            )],
        ),
        (
            "xml",
            vec![("'<a>b &amp; c</a>'", text("<a>b &amp; c</a>"))],
        ),
        (
            "int4[]",
            vec![
                (
                    "'{{1,2},{3,NULL}}'",
                    // A multi-dimensional array keeps its nesting and its text (the
                    // formats that cannot nest carry the text in a header: FORMATS.md).
                    Value::raw(
                        "{{1,2},{3,NULL}}",
                        arr(vec![
                            arr(vec![Value::Int32(1), Value::Int32(2)]),
                            arr(vec![Value::Int32(3), Value::Null]),
                        ]),
                    ),
                ),
                ("'{}'", arr(vec![])),
                ("'[0:1]={7,8}'", arr(vec![Value::Int32(7), Value::Int32(8)])),
            ],
        ),
        (
            "text[]",
            vec![(
                r#"ARRAY['a,b', 'q"x', 'back\slash', NULL, 'NULL', '', ' sp ', '{}']"#,
                arr(vec![
                    text("a,b"),
                    text("q\"x"),
                    text("back\\slash"),
                    Value::Null,
                    text("NULL"),
                    text(""),
                    text(" sp "),
                    text("{}"),
                ]),
            )],
        ),
        (
            "numeric[]",
            vec![(
                "'{1.50,NaN,-Infinity}'",
                arr(vec![
                    dec("1.50"),
                    Value::Decimal(Decimal::NaN),
                    Value::Decimal(Decimal::NegInfinity),
                ]),
            )],
        ),
        (
            "float8[]",
            vec![(
                "'{0.1,NaN}'",
                arr(vec![Value::Float64(0.1), Value::Float64(f64::NAN)]),
            )],
        ),
        (
            "bytea[]",
            vec![(
                "ARRAY['\\xdead'::bytea, NULL]",
                arr(vec![Value::Bytes(vec![0xde, 0xad]), Value::Null]),
            )],
        ),
        (
            "timestamptz[]",
            vec![(
                "ARRAY['2024-01-01 00:00:00+00'::timestamptz, 'infinity']",
                arr(vec![
                    Value::TimestampTz(1_704_067_200_000_000),
                    Value::TimestampTz(i64::MAX),
                ]),
            )],
        ),
        (
            "date[]",
            vec![(
                "'{2024-02-29,infinity}'",
                arr(vec![Value::Date(19782), Value::Date(i32::MAX)]),
            )],
        ),
        (
            "interval[]",
            vec![(
                "ARRAY['1 day'::interval, '-1 mon']",
                arr(vec![
                    Value::Interval {
                        months: 0,
                        days: 1,
                        micros: 0,
                    },
                    Value::Interval {
                        months: -1,
                        days: 0,
                        micros: 0,
                    },
                ]),
            )],
        ),
        (
            "uuid[]",
            vec![(
                "ARRAY['00000000-0000-0000-0000-000000000001'::uuid]",
                arr(vec![Value::Uuid([
                    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
                ])]),
            )],
        ),
        (
            "jsonb[]",
            vec![(
                "ARRAY['{\"a\":1}'::jsonb, '\"s\"']",
                arr(vec![
                    Value::Json("{\"a\": 1}".into()),
                    Value::Json("\"s\"".into()),
                ]),
            )],
        ),
        (
            "bool[]",
            vec![(
                "'{t,f,NULL}'",
                arr(vec![Value::Bool(true), Value::Bool(false), Value::Null]),
            )],
        ),
        (
            "inet[]",
            vec![("'{10.0.0.1,::1}'", arr(vec![text("10.0.0.1"), text("::1")]))],
        ),
        (
            "varchar(10)[]",
            vec![("'{\"a b\",c}'", arr(vec![text("a b"), text("c")]))],
        ),
        ("mood", vec![("'happy'", text("happy"))]),
        (
            "mood[]",
            vec![("'{sad,happy}'", arr(vec![text("sad"), text("happy")]))],
        ),
        ("posint", vec![("42", Value::Int32(42))]),
        (
            "pair",
            vec![
                (
                    "ROW(1, 'a \"b\" c')",
                    Value::Json(r#"{"a":1,"b":"a \"b\" c"}"#.into()),
                ),
                ("ROW(NULL, '')", Value::Json(r#"{"a":null,"b":""}"#.into())),
            ],
        ),
    ]
}

/// Dates and timestamps whose expected value the server computes (BC dates, extremes).
const SERVER_COMPUTED: &[(&str, &str)] = &[
    ("date", "'0044-03-15 BC'"),
    ("date", "'4713-01-01 BC'"),
    ("date", "'5874897-12-31'"),
    ("timestamp", "'0044-03-15 12:00:00.5 BC'"),
    ("timestamptz", "'0044-03-15 12:00:00+00 BC'"),
    ("timestamptz", "'1900-06-30 23:59:59.999999-03:30'"),
    ("timestamp", "'294246-12-31 23:59:59.999999'"),
];

#[tokio::test(flavor = "multi_thread")]
async fn builtin_types_round_trip() {
    let pg = PgServer::shared();
    let probe = pg.superuser_client("postgres").await.unwrap();
    // Builds without libxml (the relocatable Postgres 16) reject xml values.
    let xml_ok = probe.simple_query("SELECT '<a/>'::xml").await.is_ok();
    let cases: Vec<_> = type_cases()
        .into_iter()
        .filter(|(ty, _)| xml_ok || *ty != "xml")
        .collect();
    let mut ddl = String::from(
        "CREATE TYPE mood AS ENUM ('sad', 'happy');
         CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
         CREATE TYPE pair AS (a int4, b text);
         CREATE TABLE vals (id int PRIMARY KEY",
    );
    for (i, (ty, _)) in cases.iter().enumerate() {
        ddl.push_str(&format!(", c{i} {ty}"));
    }
    ddl.push_str(
        ", e_date date, e_ts timestamp, e_tstz timestamptz);
         CREATE PUBLICATION pub FOR TABLE vals;",
    );
    let db = database(pg, &ddl).await;
    let c = client(pg, &db).await;

    let mut repl = ReplicationConnection::connect(&cdc(pg, &db)).await.unwrap();
    let slot = repl
        .create_slot(
            "s_types",
            &CreateSlotOptions {
                snapshot: SlotSnapshot::Nothing,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let (_tx, rx) = durable_at_start();
    let stream = repl
        .start(
            "s_types",
            slot.consistent_point,
            &["pub"],
            &fast_feedback(),
            rx,
        )
        .await
        .unwrap();

    // Row k holds case k of every column that has one (NULL elsewhere).
    let rows = cases.iter().map(|(_, v)| v.len()).max().unwrap();
    let mut sql = String::from("BEGIN;");
    for k in 0..rows {
        let mut cols = vec!["id".to_string()];
        let mut vals = vec![k.to_string()];
        for (i, (_, v)) in cases.iter().enumerate() {
            if let Some((lit, _)) = v.get(k) {
                cols.push(format!("c{i}"));
                vals.push(lit.to_string());
            }
        }
        sql.push_str(&format!(
            "INSERT INTO vals ({}) VALUES ({});",
            cols.join(","),
            vals.join(",")
        ));
    }
    for (k, (ty, lit)) in SERVER_COMPUTED.iter().enumerate() {
        let col = match *ty {
            "date" => "e_date",
            "timestamp" => "e_ts",
            _ => "e_tstz",
        };
        sql.push_str(&format!(
            "INSERT INTO vals (id, {col}) VALUES ({}, {lit});",
            1000 + k
        ));
    }
    sql.push_str("COMMIT;");
    c.batch_execute(&sql).await.unwrap();

    // Catalog types are resolved through the hook, from pg_type.
    let resolver = Arc::new(StaticTypeResolver::new());
    let mut r = Reader::new(stream);
    r.cache = RelationCache::with_resolver(resolver.clone());
    let mut decoded = Vec::new();
    let mut rel_id = 0;
    loop {
        let x = tokio::time::timeout(Duration::from_secs(30), r.stream.next_message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match r.decoder.decode_next(&x.data).unwrap() {
            PgOutputMessage::Relation(rel) => {
                for t in load_types(&c, &r.cache.unresolved_types(&rel))
                    .await
                    .unwrap()
                {
                    resolver.insert(t);
                }
                assert!(r.cache.unresolved_types(&rel).is_empty());
                r.cache.apply_relation(&rel);
                rel_id = rel.id;
            }
            PgOutputMessage::Type(t) => r.cache.apply_type(&t),
            PgOutputMessage::Insert(i) => decoded.push(
                r.cache
                    .decode_tuple(i.relation_id, &i.new)
                    .unwrap_or_else(|e| panic!("{e}")),
            ),
            PgOutputMessage::Commit(_) => break,
            _ => {}
        }
    }
    assert_eq!(decoded.len(), rows + SERVER_COMPUTED.len());
    let rel = r.cache.get(rel_id).unwrap().schema.clone();
    let mut failures = Vec::new();
    for (i, (ty, v)) in cases.iter().enumerate() {
        for (k, (lit, want)) in v.iter().enumerate() {
            let got = &decoded[k].0[i + 1];
            // Debug comparison: NaN equals NaN, -0.0 differs from 0.0.
            if format!("{got:?}") != format!("{want:?}") {
                failures.push(format!("{ty} {lit}: got {got:?}, want {want:?}"));
            }
        }
    }
    for (k, (ty, lit)) in SERVER_COMPUTED.iter().enumerate() {
        let row = &decoded[rows + k].0;
        let n = cases.len() + 1;
        let (got, want) = match *ty {
            "date" => {
                let d: i32 = c
                    .query_one(&format!("SELECT ({lit}::date - '1970-01-01'::date)"), &[])
                    .await
                    .unwrap()
                    .get(0);
                (row[n].clone(), Value::Date(d))
            }
            "timestamp" => {
                // extract() is exact numeric since Postgres 14.
                let us: i64 = c
                    .query_one(
                        &format!("SELECT (extract(epoch from {lit}::timestamp) * 1000000)::int8"),
                        &[],
                    )
                    .await
                    .unwrap()
                    .get(0);
                (row[n + 1].clone(), Value::Timestamp(us))
            }
            _ => {
                // extract() is exact numeric since Postgres 14.
                let us: i64 = c
                    .query_one(
                        &format!("SELECT (extract(epoch from {lit}::timestamptz) * 1000000)::int8"),
                        &[],
                    )
                    .await
                    .unwrap()
                    .get(0);
                (row[n + 2].clone(), Value::TimestampTz(us))
            }
        };
        if got != want {
            failures.push(format!("{ty} {lit}: got {got:?}, want {want:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );

    // Column types from the relation and the catalog.
    let col = |name: &str| rel.columns[rel.column_index(name).unwrap()].clone();
    let idx = |ty: &str| format!("c{}", cases.iter().position(|(t, _)| *t == ty).unwrap());
    assert_eq!(
        col(&idx("numeric(10,2)")).ty,
        ColumnType::Decimal {
            precision: Some(10),
            scale: Some(2)
        }
    );
    assert_eq!(col(&idx("varchar(5)")).source_type, "varchar(5)");
    assert_eq!(
        col(&idx("timestamp(3)")).ty,
        ColumnType::Timestamp { precision: Some(3) }
    );
    assert_eq!(
        col(&idx("mood")).ty,
        ColumnType::Enum {
            name: "mood".into(),
            symbols: vec!["sad".into(), "happy".into()]
        }
    );
    assert_eq!(col(&idx("mood[]")).source_type, "mood[]");
    assert_eq!(
        (col(&idx("posint")).ty, col(&idx("posint")).source_type),
        (ColumnType::Int32, "posint".to_string())
    );
    assert_eq!(
        col(&idx("pair")).ty,
        ColumnType::Composite {
            name: "pair".into()
        }
    );
    assert_eq!(
        col(&idx("text[]")).ty,
        ColumnType::Array(Box::new(ColumnType::Text { max_len: None }))
    );
    r.stream.stop().await;
}

/// A durable handle with nothing durable yet, as the pipeline hands it to a source.
fn durable_at_start() -> (DurablePublisher, Durable) {
    DurablePublisher::new(None)
}

/// What the pipeline does once a commit ending at `lsn` is durable.
fn publish(p: &DurablePublisher, lsn: Lsn) {
    p.publish(Checkpoint::At(SourcePosition::Postgres(PgPosition {
        commit_lsn: lsn,
        lsn,
        ..Default::default()
    })));
}
