//! Tests of the real-server harness itself: each server starts, answers, is configured for
//! CDC, and leaves nothing behind — after `stop`, after a normal process exit (shared
//! servers, at-exit hook) and after the test process is SIGKILLed (parent-death signal,
//! then the sweep).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cdc_harness::{
    passwords, pid_is_running, server_processes_in, sweep_stale, MariaDbOptions, MariaDbServer,
    PgOptions, PgServer, RedisServer,
};
use mysql_async::prelude::Queryable;

/// Env var that turns [`child_helper`] into a server-starting child process.
const CHILD_ENV: &str = "CDC_HARNESS_TEST_CHILD";

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let v = f();
    eprintln!("{what}: {:?}", t.elapsed());
    v
}

/// Polls `cond` for up to `timeout`.
fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Nothing of a stopped server may remain: not the process, not any of its helpers,
/// not its directory.
fn assert_gone(pid: u32, dir: &Path) {
    assert!(!pid_is_running(pid), "server pid {pid} still running");
    assert!(
        eventually(Duration::from_secs(10), || server_processes_in(dir)
            .is_empty()),
        "server processes left in {}: {:?}",
        dir.display(),
        server_processes_in(dir)
    );
    assert!(!dir.exists(), "{} still exists", dir.display());
}

/// Runs `psql` from the server's own install with a libpq connection string.
fn psql(pg: &PgServer, conninfo: &str, password: &str, sql: &str) -> Result<String, String> {
    let out = Command::new(pg.bin_dir().join("psql"))
        .args([
            "-X",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            conninfo,
            "-c",
            sql,
        ])
        .env("PGPASSWORD", password)
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .expect("running psql");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

async fn tcp_client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    tokio::spawn(conn);
    client
}

#[tokio::test]
async fn postgres_starts_answers_and_cleans_up() {
    let pg = timed("postgres start", || PgServer::start(PgOptions::default())).unwrap();
    eprintln!(
        "postgres {} from {} on port {}",
        pg.major_version(),
        pg.bin_dir().display(),
        pg.port()
    );
    assert!(![5432].contains(&pg.port()));
    let su = pg.superuser_client("postgres").await.unwrap();
    let one: i32 = su.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
    let wal: String = su.query_one("SHOW wal_level", &[]).await.unwrap().get(0);
    assert_eq!(wal, "logical");
    let version: String = su
        .query_one("SHOW server_version_num", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version.parse::<u32>().unwrap() / 10000, pg.major_version());

    let db = pg.create_database().await.unwrap();
    // `cdc` logs in over TCP with SCRAM, has REPLICATION, owns the db and can publish
    // a table it created.
    let cdc = tcp_client(&pg.url("cdc", passwords::PG_CDC, &db)).await;
    let row = cdc
        .query_one(
            "SELECT rolreplication FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0));
    cdc.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, v text);
         CREATE PUBLICATION pub FOR TABLE t;
         INSERT INTO t VALUES (1, 'a');",
    )
    .await
    .unwrap();
    // The other roles: md5, trust, and the non-replication app user; a wrong password
    // is refused.
    tcp_client(&pg.url("cdc_md5", passwords::PG_CDC_MD5, &db)).await;
    tcp_client(&pg.url("cdc_trust", "", &db)).await;
    tcp_client(&pg.url("postgres", passwords::PG_SUPERUSER, &db)).await;
    let app = tcp_client(&pg.url("app", passwords::PG_APP, &db)).await;
    let row = app
        .query_one(
            "SELECT rolreplication FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .await
        .unwrap();
    assert!(!row.get::<_, bool>(0));
    assert!(
        tokio_postgres::connect(&pg.url("cdc", "wrong", &db), tokio_postgres::NoTls)
            .await
            .is_err()
    );

    // A logical replication connection (libpq's psql) as `cdc`: IDENTIFY_SYSTEM, and a
    // pgoutput slot proves the output plugin loads from this install.
    let conninfo = format!(
        "host=127.0.0.1 port={} user=cdc dbname={db} replication=database",
        pg.port()
    );
    let ident = psql(&pg, &conninfo, passwords::PG_CDC, "IDENTIFY_SYSTEM").unwrap();
    assert!(ident.contains('|'), "IDENTIFY_SYSTEM answered {ident:?}");
    let slot = psql(
        &pg,
        &conninfo,
        passwords::PG_CDC,
        "CREATE_REPLICATION_SLOT s1 LOGICAL pgoutput",
    )
    .unwrap();
    assert!(slot.starts_with("s1|"), "{slot}");
    // `app` has no REPLICATION attribute.
    let conninfo_app = conninfo.replace("user=cdc", "user=app");
    assert!(psql(&pg, &conninfo_app, passwords::PG_APP, "IDENTIFY_SYSTEM").is_err());

    let pid = pg.pid().unwrap();
    let dir = pg.dir().to_path_buf();
    drop((su, cdc, app));
    timed("postgres stop", || pg.stop()).unwrap();
    assert_gone(pid, &dir);
}

#[tokio::test]
async fn postgres_replica_wal_level_and_restart() {
    let pg = PgServer::start(PgOptions::default().wal_level("replica")).unwrap();
    let port = pg.port();
    pg.execute(
        "postgres",
        "CREATE TABLE kept (id int); INSERT INTO kept VALUES (7)",
    )
    .await
    .unwrap();
    let wal: String = pg
        .superuser_client("postgres")
        .await
        .unwrap()
        .query_one("SHOW wal_level", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(wal, "replica");
    let first_pid = pg.pid().unwrap();
    for immediate in [false, true] {
        timed(&format!("postgres restart(immediate={immediate})"), || {
            pg.restart(immediate)
        })
        .unwrap();
        assert_eq!(pg.port(), port);
        let n: i32 = pg
            .superuser_client("postgres")
            .await
            .unwrap()
            .query_one("SELECT id FROM kept", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 7);
    }
    assert!(!pid_is_running(first_pid));
    let (pid, dir) = (pg.pid().unwrap(), pg.dir().to_path_buf());
    drop(pg); // Drop cleans up as well as stop() does.
    assert_gone(pid, &dir);
}

#[tokio::test]
async fn postgres_ssl_verify_full() {
    let bin_dir = cdc_harness::resolve_pg_bin_dir(None).unwrap();
    if !cdc_harness::pg_supports_ssl(&bin_dir).unwrap() {
        eprintln!("SKIPPED: {} is built without SSL", bin_dir.display());
        return;
    }
    let pg = PgServer::start(PgOptions::default().ssl_only(true)).unwrap();
    let ca = pg.ca_cert_path().expect("ssl on: CA path").to_path_buf();
    let db = pg.create_database().await.unwrap();
    for host in ["localhost", "127.0.0.1"] {
        let conninfo = format!(
            "host={host} hostaddr=127.0.0.1 port={} user=cdc dbname={db} sslmode=verify-full sslrootcert={}",
            pg.port(),
            ca.display()
        );
        let ssl = psql(
            &pg,
            &conninfo,
            passwords::PG_CDC,
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        )
        .unwrap_or_else(|e| panic!("verify-full to {host}: {e}"));
        assert_eq!(ssl, "t");
    }
    // ssl_only: a plain TCP connection is refused by pg_hba.
    let plain = format!(
        "host=127.0.0.1 port={} user=cdc dbname={db} sslmode=disable",
        pg.port()
    );
    let err = psql(&pg, &plain, passwords::PG_CDC, "SELECT 1").unwrap_err();
    assert!(err.contains("no pg_hba.conf entry"), "{err}");
}

#[tokio::test]
async fn mariadb_starts_answers_and_cleans_up() {
    let my = timed("mariadb start", || {
        MariaDbServer::start(MariaDbOptions::default())
    })
    .unwrap();
    assert_ne!(my.port(), 3306);
    let mut root = my.root_conn().await.unwrap();
    let one: Option<i32> = root.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));
    let vars: Vec<(String, String)> = root
        .query(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN
             ('log_bin', 'binlog_format', 'binlog_row_image', 'binlog_row_metadata', 'port')",
        )
        .await
        .unwrap();
    let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("log_bin"), Some("ON"));
    assert_eq!(get("binlog_format"), Some("ROW"));
    assert_eq!(get("binlog_row_image"), Some("FULL"));
    assert_eq!(get("binlog_row_metadata"), Some("FULL"));
    assert_eq!(get("port"), Some(my.port().to_string().as_str()));

    let db = my.create_database().await.unwrap();
    my.execute(&format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v TEXT); INSERT INTO {db}.t VALUES (1, 'a')"
    ))
    .await
    .unwrap();
    // `cdc` over TCP: reads tables and the binlog position; root over TCP works too.
    let mut cdc = mysql_async::Conn::from_url(my.url("cdc", passwords::MARIADB_CDC, &db))
        .await
        .unwrap();
    let v: Option<String> = cdc.query_first("SELECT v FROM t").await.unwrap();
    assert_eq!(v.as_deref(), Some("a"));
    let status: Vec<mysql_async::Row> = cdc.query("SHOW MASTER STATUS").await.unwrap();
    assert_eq!(status.len(), 1);
    let plugin: Option<String> = cdc
        .query_first("SELECT plugin FROM mysql.user WHERE user = 'cdc' LIMIT 1")
        .await
        .unwrap();
    assert_eq!(plugin.as_deref(), Some("mysql_native_password"));
    cdc.disconnect().await.unwrap();
    let mut app = mysql_async::Conn::from_url(my.url("app", passwords::MARIADB_APP, &db))
        .await
        .unwrap();
    assert!(app
        .query_drop("INSERT INTO t VALUES (2, 'b')")
        .await
        .is_err());
    app.disconnect().await.unwrap();
    mysql_async::Conn::from_url(my.url("root", passwords::MARIADB_ROOT, ""))
        .await
        .unwrap()
        .disconnect()
        .await
        .unwrap();
    root.disconnect().await.unwrap();

    let port = my.port();
    timed("mariadb restart", || my.restart()).unwrap();
    assert_eq!(my.port(), port);
    let mut root = my.root_conn().await.unwrap();
    let n: Option<i64> = root
        .query_first(format!("SELECT COUNT(*) FROM {db}.t"))
        .await
        .unwrap();
    assert_eq!(n, Some(1));
    root.disconnect().await.unwrap();

    let (pid, dir) = (my.pid().unwrap(), my.dir().to_path_buf());
    timed("mariadb stop", || my.stop()).unwrap();
    assert_gone(pid, &dir);
}

#[tokio::test]
async fn mariadb_binlog_options() {
    let off = MariaDbServer::start(MariaDbOptions::default().binlog(false)).unwrap();
    let stmt = MariaDbServer::start(
        MariaDbOptions::default()
            .binlog_format("STATEMENT")
            .arg("--max-connections=50"),
    )
    .unwrap();
    let mut c = off.root_conn().await.unwrap();
    let log_bin: Option<i64> = c.query_first("SELECT @@log_bin").await.unwrap();
    assert_eq!(log_bin, Some(0));
    c.disconnect().await.unwrap();
    let mut c = stmt.root_conn().await.unwrap();
    let row: Option<(String, i64)> = c
        .query_first("SELECT @@binlog_format, @@max_connections")
        .await
        .unwrap();
    assert_eq!(row, Some(("STATEMENT".to_string(), 50)));
    c.disconnect().await.unwrap();
}

#[test]
fn redis_starts_answers_and_cleans_up() {
    let r = timed("redis start", RedisServer::start).unwrap();
    assert_ne!(r.port(), 6379);
    assert!(r.ping());
    assert!(r.url().starts_with("redis://127.0.0.1:"));
    let (pid, dir) = (r.pid().unwrap(), r.dir().to_path_buf());
    timed("redis stop", || r.stop()).unwrap();
    assert_gone(pid, &dir);
}

/// Ports seen by the two shared-instance tests: whichever runs second checks the first.
static SHARED_PORTS: Mutex<Option<(u16, u16, u16)>> = Mutex::new(None);

async fn use_shared_servers() {
    let pg = PgServer::shared();
    let my = MariaDbServer::shared();
    let redis = RedisServer::shared();
    // Each test thread ends with its test; the servers must survive that (they were
    // forked by the harness's spawner thread, so the parent-death signal does not fire).
    let db = pg.create_database().await.unwrap();
    pg.execute(&db, "SELECT 1").await.unwrap();
    my.execute("SELECT 1").await.unwrap();
    assert!(redis.ping());
    let ports = (pg.port(), my.port(), redis.port());
    let mut seen = SHARED_PORTS.lock().unwrap();
    if let Some(first) = *seen {
        assert_eq!(first, ports, "shared servers were not reused");
    }
    *seen = Some(ports);
}

#[tokio::test]
async fn shared_instances_are_reused_a() {
    use_shared_servers().await;
}

#[tokio::test]
async fn shared_instances_are_reused_b() {
    use_shared_servers().await;
}

/// Not a test on its own: when [`CHILD_ENV`] is set, this is the child process of
/// [`servers_die_with_their_test_process`], which starts servers, reports them and then
/// either hangs until it is SIGKILLed (`kill`) or returns normally (`exit`).
#[test]
fn child_helper() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let report = |kind: &str, pid: Option<u32>, dir: &Path| {
        println!("CHILD {kind} {} {}", pid.unwrap(), dir.display());
    };
    match mode.as_str() {
        "kill" => {
            let pg = PgServer::start(PgOptions::default()).unwrap();
            let my = MariaDbServer::start(MariaDbOptions::default()).unwrap();
            let r = RedisServer::start().unwrap();
            report("pg", pg.pid(), pg.dir());
            report("mariadb", my.pid(), my.dir());
            report("redis", r.pid(), r.dir());
            println!("CHILD READY");
            loop {
                std::thread::sleep(Duration::from_secs(60));
            }
        }
        "exit" => {
            // Shared servers are statics, never dropped: only the at-exit hook stops them.
            let pg = PgServer::shared();
            let my = MariaDbServer::shared();
            let r = RedisServer::shared();
            report("pg", pg.pid(), pg.dir());
            report("mariadb", my.pid(), my.dir());
            report("redis", r.pid(), r.dir());
            println!("CHILD READY");
        }
        other => panic!("unknown {CHILD_ENV}={other}"),
    }
}

/// Kills the child process if the test fails half-way, so that it never outlives us.
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts the child, returns it and the (kind, pid, dir) it reported once ready.
fn start_child(mode: &str) -> (ChildGuard, Vec<(String, u32, PathBuf)>) {
    let mut child = ChildGuard(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_helper", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, mode)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut servers = Vec::new();
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    while let Some(line) = lines.next() {
        let line = line.unwrap();
        // libtest prints "test child_helper ... " without a newline before the test
        // runs, so the first report may not start the line.
        let Some(rest) = line.find("CHILD ").map(|i| &line[i + 6..]) else {
            continue;
        };
        if rest == "READY" {
            // Keep draining: the child's libtest still writes its result, and a closed
            // pipe would fail it.
            std::thread::spawn(move || lines.for_each(drop));
            return (child, servers);
        }
        let mut parts = rest.splitn(3, ' ');
        let kind = parts.next().unwrap().to_string();
        let pid = parts.next().unwrap().parse().unwrap();
        servers.push((kind, pid, PathBuf::from(parts.next().unwrap())));
    }
    panic!("child exited before reporting READY: {:?}", child.0.wait());
}

#[test]
fn servers_die_with_their_test_process() {
    // SIGKILL: nobody runs any cleanup code; the kernel's parent-death signal kills the
    // servers, and the next sweep removes their directories.
    let (mut child, servers) = start_child("kill");
    assert_eq!(servers.len(), 3);
    for (_, pid, dir) in &servers {
        assert!(pid_is_running(*pid));
        assert!(dir.exists());
    }
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(child.0.id() as libc::pid_t, libc::SIGKILL) };
    child.0.wait().unwrap();
    let t = Instant::now();
    for (kind, pid, dir) in &servers {
        assert!(
            eventually(Duration::from_secs(10), || !pid_is_running(*pid)),
            "{kind} server {pid} survived its SIGKILLed test process"
        );
        assert!(
            eventually(Duration::from_secs(15), || server_processes_in(dir)
                .is_empty()),
            "{kind}: processes left in {}: {:?}",
            dir.display(),
            server_processes_in(dir)
        );
    }
    eprintln!(
        "servers gone {:?} after SIGKILL of their process",
        t.elapsed()
    );
    // Swept here, or by another test binary that started meanwhile (the suite runs
    // several at once, and each sweeps at its start): which one reports it is a race.
    let _ = sweep_stale();
    for (kind, _, dir) in &servers {
        assert!(!dir.exists(), "{kind}: {} not swept", dir.display());
    }

    // Normal exit with shared servers: the at-exit hook stops them and removes the dirs.
    let (mut child, servers) = start_child("exit");
    let status = child.0.wait().unwrap();
    assert!(status.success(), "child failed: {status}");
    for (kind, pid, dir) in &servers {
        assert!(
            !pid_is_running(*pid),
            "{kind} shared server {pid} outlived exit"
        );
        assert!(
            eventually(Duration::from_secs(10), || server_processes_in(dir)
                .is_empty()),
            "{kind}: processes left in {}",
            dir.display()
        );
        assert!(!dir.exists(), "{kind}: {} left after exit", dir.display());
    }
}
