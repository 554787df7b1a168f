//! Helpers shared by the pg_source_* end-to-end tests: a connector process (the shipped CLI
//! as `cdc-e2e run --config …`), reading the embedded log back, rebuilding tables from it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[allow(unused_imports)] // Not every suite calls it.
pub use cdc_harness::http;

pub mod slot;
use cdc_harness::{passwords, PgServer};
use cdc_log::Log;
use serde_json::Value as Json;

pub struct Connector {
    pub dir: PathBuf,
    pub config: PathBuf,
    pub child: Option<Child>,
    pub starts: u32,
}

/// `["a", "b"]` as a TOML array's items: `"a", "b"`.
pub fn toml_list(items: &[&str]) -> String {
    items
        .iter()
        .map(|t| format!("{t:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A connector config for `db` on `pg`, logging into `dir/log`; `extra` is appended.
pub fn connector(pg: &PgServer, db: &str, dir: &Path, tables: &[&str], extra: &str) -> Connector {
    let url = format!("{}?sslmode=disable", pg.url("cdc", passwords::PG_CDC, db));
    let text = format!(
        "name = \"t\"\n\n[source]\ntype = \"postgres\"\nurl = \"{url}\"\ntables = [{}]\nslot = \"{db}\"\nheartbeat_interval_ms = 1000\n\n[log]\ndir = \"{}\"\npartitions = 3\n\n[admin]\nlisten = \"127.0.0.1:0\"\n{extra}\n",
        toml_list(tables),
        dir.join("log").display()
    );
    Connector::with_config(dir, &text)
}

impl Connector {
    /// A connector (not started) of config `text`, written to `dir/cdc.toml`.
    pub fn with_config(dir: &Path, text: &str) -> Connector {
        let config = dir.join("cdc.toml");
        std::fs::write(&config, text).unwrap();
        Connector {
            dir: dir.to_path_buf(),
            config,
            child: None,
            starts: 0,
        }
    }

    /// Runs `cdc verify --config <this config> <args>`: (exit code, stdout, stderr).
    pub fn verify(&self, args: &[&str]) -> (Option<i32>, String, String) {
        self.verify_logging("warn", args)
    }

    /// [`Connector::verify`] with `CDC_LOG_LEVEL` at `level` (its log lines on stderr).
    pub fn verify_logging(&self, level: &str, args: &[&str]) -> (Option<i32>, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
            .arg("verify")
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .env("CDC_LOG_LEVEL", level)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub fn log_dir(&self) -> PathBuf {
        self.dir.join("log")
    }

    pub fn start(&mut self) {
        assert!(self.child.is_none());
        self.starts += 1;
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("connector.log"))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
            .arg("run")
            .arg("--config")
            .arg(&self.config)
            .env("CDC_LOG_LEVEL", "info")
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // SIGKILL
            let _ = c.wait();
        }
    }

    /// SIGTERM; returns the exit code.
    pub fn stop(&mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        unsafe {
            libc::kill(c.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(s) = c.try_wait().unwrap() {
                return s.code();
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!(
                    "connector did not stop within 60 s after SIGTERM\n{}",
                    self.output()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for the connector to exit by itself; returns its exit code. Panics with
    /// `what` and the connector's output if it still runs after `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration, what: &str) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(s) = self.child.as_mut().expect("started").try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "{what}\n{}", self.output());
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        self.child = None;
        status.code()
    }

    /// Panics with the connector's output if it exited.
    pub fn assert_running(&mut self) {
        if let Some(c) = self.child.as_mut() {
            if let Some(s) = c.try_wait().unwrap() {
                panic!("connector exited with {s}\n{}", self.output());
            }
        }
    }

    pub fn output(&self) -> String {
        let s = std::fs::read_to_string(self.dir.join("connector.log")).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }
}

impl Drop for Connector {
    fn drop(&mut self) {
        self.kill();
    }
}

pub use cdc_harness::golden::{read_log as read_topic, LogRecord as Rec};

/// Durable records of `topic` (all partitions), read from the offsets alone.
pub fn topic_len(log_dir: &Path, topic: &str) -> u64 {
    let Ok(log) = Log::open_read_only(log_dir) else {
        return 0;
    };
    log.describe(topic)
        .map(|d| {
            d.partitions
                .iter()
                .map(|p| p.high_watermark - p.log_start_offset)
                .sum()
        })
        .unwrap_or(0)
}

/// Waits (cheaply, without decoding records) until `topic` holds at least `n` records.
pub async fn wait_topic_len(log_dir: &Path, topic: &str, n: u64, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while topic_len(log_dir, topic) < n {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    true
}

/// Applies c/r/u/d by key in log order per partition: key (JSON text) → `after` row.
pub fn rebuild(recs: &[Rec]) -> BTreeMap<String, Json> {
    let mut m = BTreeMap::new();
    for r in recs {
        let (Some(k), Some(v)) = (&r.key, &r.value) else {
            continue;
        };
        match v["op"].as_str().unwrap() {
            "c" | "r" | "u" => {
                m.insert(k.to_string(), v["after"].clone());
            }
            "d" => {
                m.remove(&k.to_string());
            }
            _ => {}
        }
    }
    m
}

/// The table as `{"id":…}` key text → `{column: value}` for integer/text columns.
pub async fn table_rows(pg: &PgServer, db: &str, table: &str) -> BTreeMap<String, Json> {
    let c = pg.superuser_client(db).await.unwrap();
    let rows = c
        .query(&format!("SELECT row_to_json(x)::text FROM {table} x"), &[])
        .await
        .unwrap();
    let mut m = BTreeMap::new();
    for r in rows {
        let j: Json = serde_json::from_str(&r.get::<_, String>(0)).unwrap();
        let key = serde_json::json!({"id": j["id"]});
        m.insert(key.to_string(), j);
    }
    m
}

/// Polls until the rebuilt topic equals the table (or the timeout).
pub async fn wait_converged(
    pg: &PgServer,
    db: &str,
    table: &str,
    log_dir: &Path,
    topic: &str,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let want = table_rows(pg, db, table).await;
        let got = rebuild(&read_topic(log_dir, topic));
        if got == want {
            return Ok(());
        }
        if Instant::now() > deadline {
            let missing: Vec<_> = want
                .keys()
                .filter(|k| got.get(*k) != want.get(*k))
                .take(5)
                .collect();
            let extra: Vec<_> = got
                .keys()
                .filter(|k| !want.contains_key(*k))
                .take(5)
                .collect();
            return Err(format!(
                "{table}: log has {} rows, table {}; differing/missing {missing:?}, extra {extra:?}; e.g. log {:?} table {:?}",
                got.len(),
                want.len(),
                missing.first().and_then(|k| got.get(*k)),
                missing.first().and_then(|k| want.get(*k)),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A fresh database in which `sql` ran (as the superuser: start it with `SET ROLE cdc;`).
pub async fn database_with(pg: &PgServer, sql: &str) -> String {
    let db = pg.create_database().await.unwrap();
    pg.execute(&db, sql).await.unwrap();
    db
}

/// A connector (not started) in a new temporary directory; keep the `TempDir` alive.
pub fn temp_connector(
    pg: &PgServer,
    db: &str,
    tables: &[&str],
    extra: &str,
) -> (tempfile::TempDir, Connector) {
    let dir = tempfile::tempdir().unwrap();
    let c = connector(pg, db, dir.path(), tables, extra);
    (dir, c)
}

/// How many replication slots named `slot` exist.
pub async fn slot_count(pg: &PgServer, slot: &str) -> i64 {
    let c = pg.superuser_client("postgres").await.unwrap();
    c.query_one(
        "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
        &[&slot],
    )
    .await
    .unwrap()
    .get(0)
}

/// Drops the test's slot (named after its database) so it retains no WAL afterwards.
pub async fn drop_slot(pg: &PgServer, db: &str) {
    let c = pg.superuser_client("postgres").await.unwrap();
    let _ = c
        .execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active",
            &[&db],
        )
        .await;
}

/// The topic of the `acct` fixture table.
pub const ACCT_TOPIC: &str = "t.public.acct";

/// A fresh database with the `acct` fixture table (`id` key, `v` counter, `pad`) holding
/// `rows` rows, created as `cdc`.
pub async fn setup_acct(pg: &PgServer, rows: i64) -> String {
    database_with(
        pg,
        &format!(
            "SET ROLE cdc; CREATE TABLE acct (id int PRIMARY KEY, v bigint NOT NULL, pad text);
             INSERT INTO acct SELECT g, 0, repeat('x', 50) FROM generate_series(1, {rows}) g;"
        ),
    )
    .await
}

/// The `acct` fixture with `rows` rows and a connector (tables `tables`) started on it
/// and converged: its snapshot is in the log. Keep the `TempDir` alive.
pub async fn running_acct(
    pg: &PgServer,
    rows: i64,
    tables: &[&str],
) -> (String, tempfile::TempDir, Connector) {
    let db = setup_acct(pg, rows).await;
    let (dir, mut c) = temp_connector(pg, &db, tables, "");
    c.start();
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(30))
        .await;
    (db, dir, c)
}

/// Peak resident set (VmHWM) of process `pid`, in KiB.
pub fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

impl Connector {
    /// Waits until rebuilding `topic` from the log equals `table`; panics with the
    /// connector's output otherwise.
    pub async fn converge(
        &self,
        pg: &PgServer,
        db: &str,
        table: &str,
        topic: &str,
        timeout: Duration,
    ) {
        if let Err(e) = wait_converged(pg, db, table, &self.log_dir(), topic, timeout).await {
            panic!("{e}\n{}", self.output());
        }
    }
}

/// A loopback port free right now (the kernel's pick; released before it is used).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Connector {
    /// Moves the admin server to a fixed free port (before `start`); returns its address.
    pub fn fixed_admin_port(&mut self) -> String {
        let addr = format!("127.0.0.1:{}", free_port());
        self.edit_config(|text| {
            assert!(text.contains("listen = \"127.0.0.1:0\""), "{text}");
            text.replace("listen = \"127.0.0.1:0\"", &format!("listen = \"{addr}\""))
        });
        addr
    }

    /// Rewrites the config file with `edit` (before `start`).
    pub fn edit_config(&self, edit: impl FnOnce(String) -> String) {
        let text = std::fs::read_to_string(&self.config).unwrap();
        std::fs::write(&self.config, edit(text)).unwrap();
    }

    /// Waits for the connector to exit with 1 (a definite error); returns its output.
    pub async fn wait_definite_error(&mut self, timeout: Duration, what: &str) -> String {
        let code = self.wait_exit(timeout, what).await;
        let out = self.output();
        assert_eq!(code, Some(1), "a definite error exits 1\n{out}");
        out
    }

    /// Asserts that `topic` holds at least `n` records within `timeout`.
    pub async fn wait_records(&self, topic: &str, n: u64, timeout: Duration) {
        assert!(
            wait_topic_len(&self.log_dir(), topic, n, timeout).await,
            "{}",
            self.output()
        );
    }
}

/// Asserts that the connector's output `out` mentions each of `needles`.
pub fn assert_mentions(out: &str, needles: &[&str]) {
    for needle in needles {
        assert!(
            out.contains(needle),
            "the error does not mention {needle:?}\n{out}"
        );
    }
}

/// A `cdc registry serve` process on a fixed port (so it can be restarted in place);
/// SIGTERM on drop.
pub struct RegistryServe {
    pub child: Option<Child>,
    pub addr: String,
    data: PathBuf,
    args: Vec<String>,
}

impl RegistryServe {
    /// Serves the registry kept in `data` on `127.0.0.1:port`, with `args` added.
    pub fn start(data: &Path, port: u16, args: &[&str]) -> RegistryServe {
        let mut r = RegistryServe {
            child: None,
            addr: format!("127.0.0.1:{port}"),
            data: data.to_path_buf(),
            args: args.iter().map(|a| a.to_string()).collect(),
        };
        r.restart();
        r
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Starts the process (again) and waits until it listens.
    pub fn restart(&mut self) {
        use std::io::BufRead;
        assert!(self.child.is_none());
        let mut child = Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
            .args(["registry", "serve", "--listen", &self.addr, "--data"])
            .arg(&self.data)
            .args(&self.args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the registry did not print its address within 30 s");
        assert!(line.starts_with("listening on http://"), "{line:?}");
        self.child = Some(child);
    }

    /// SIGTERM; waits for the exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
            let _ = c.wait();
        }
    }
}

impl Drop for RegistryServe {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The WAL slot `slot` retains now (`pg_current_wal_lsn() - restart_lsn`), if it exists.
pub async fn retained_wal(pg: &PgServer, slot: &str) -> Option<i64> {
    let c = pg.superuser_client("postgres").await.ok()?;
    c.query_opt(
        "SELECT (pg_current_wal_lsn() - restart_lsn)::int8 FROM pg_replication_slots WHERE slot_name = $1",
        &[&slot],
    )
    .await
    .ok()
    .flatten()
    .and_then(|r| r.get::<_, Option<i64>>(0))
}

/// The fault suite's tally of `recs` (the version-chain workload on `acct`).
#[allow(unused_imports)] // Not every suite calls it.
pub use cdc_harness::faults::tally;

/// A xorshift generator: the workloads' and the fault schedules' randomness, seeded.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The version-chain [`workload`] running in the background, as the fault scenarios run it.
pub struct Running {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Starts [`workload`] on `db` (new ids after `first_id`), seeded with `seed`.
    pub fn start(pg: &'static PgServer, db: &str, first_id: i64, seed: u64) -> Running {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(workload(
            pg,
            db.to_string(),
            first_id,
            stop.clone(),
            seed,
            done.clone(),
        ));
        Running { stop, done, task }
    }

    /// Stops it; the number of transactions it committed.
    pub async fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        self.done.load(Ordering::Relaxed)
    }
}

/// Random transactions: updates (v = v + 1), inserts of new ids, deletes. Returns the
/// number of committed transactions when `stop` is set.
pub async fn workload(
    pg: &'static PgServer,
    db: String,
    first_id: i64,
    stop: Arc<AtomicBool>,
    seed: u64,
    done: Arc<AtomicU64>,
) {
    let mut rng = Rng(seed | 1);
    let mut next_id = first_id;
    let mut c = pg.superuser_client(&db).await.unwrap();
    while !stop.load(Ordering::Relaxed) {
        let mut sql = String::from("BEGIN;");
        for _ in 0..(1 + rng.next() % 4) {
            let id = 1 + (rng.next() % next_id as u64) as i64;
            sql.push_str(&format!("UPDATE acct SET v = v + 1 WHERE id = {id};"));
        }
        if rng.next() % 3 == 0 {
            next_id += 1;
            sql.push_str(&format!("INSERT INTO acct VALUES ({next_id}, 0, 'new');"));
        }
        if rng.next() % 7 == 0 {
            let id = 1 + (rng.next() % next_id as u64) as i64;
            sql.push_str(&format!("DELETE FROM acct WHERE id = {id};"));
        }
        sql.push_str("COMMIT;");
        match c.batch_execute(&sql).await {
            Ok(()) => {
                done.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                // The server restarted: reconnect (the transaction did not commit).
                let _ = c.batch_execute("ROLLBACK").await;
                tokio::time::sleep(Duration::from_millis(200)).await;
                if let Ok(n) = pg.superuser_client(&db).await {
                    c = n;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
