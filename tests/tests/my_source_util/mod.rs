//! Helpers shared by the my_source_* end-to-end tests: a connector process on a MariaDB
//! source (the shipped CLI as `cdc-e2e run --config …`), reading the embedded log back,
//! rebuilding the `acct` fixture table from it and comparing with the server's.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use cdc_harness::{passwords, MariaDbServer};
use cdc_log::Log;
use mysql_async::prelude::Queryable;
use serde_json::Value as Json;

/// Replica server ids unique within the test process (two replicas with one id make
/// the server drop the older connection).
static SERVER_IDS: AtomicU32 = AtomicU32::new(0);

pub struct Connector {
    pub dir: PathBuf,
    pub config: PathBuf,
    pub child: Option<Child>,
    pub topic: String,
}

/// A connector (not started) capturing `db.acct` of `my`, in a new temporary directory
/// (keep the `TempDir`); `extra` is appended to the config.
pub fn temp_connector(my: &MariaDbServer, db: &str, extra: &str) -> (tempfile::TempDir, Connector) {
    temp_connector_tables(my, db, &["acct"], extra)
}

/// As [`temp_connector`], capturing `db.<t>` for each of `tables`; `topic` is the first's.
pub fn temp_connector_tables(
    my: &MariaDbServer,
    db: &str,
    tables: &[&str],
    extra: &str,
) -> (tempfile::TempDir, Connector) {
    let dir = tempfile::tempdir().unwrap();
    let server_id =
        4_000_000 + std::process::id() % 100_000 * 10 + SERVER_IDS.fetch_add(1, Ordering::Relaxed);
    let url = format!(
        "{}?sslmode=disable",
        my.url("cdc", passwords::MARIADB_CDC, db)
    );
    let list: Vec<String> = tables.iter().map(|t| format!("\"{db}.{t}\"")).collect();
    let text = format!(
        "name = \"t\"\n\n[source]\ntype = \"mysql\"\nurl = \"{url}\"\ntables = [{}]\nserver_id = {server_id}\nheartbeat_interval_ms = 500\n\n[log]\ndir = \"{}\"\npartitions = 3\n\n[admin]\nlisten = \"127.0.0.1:0\"\n{extra}\n",
        list.join(", "),
        dir.path().join("log").display()
    );
    let config = dir.path().join("cdc.toml");
    std::fs::write(&config, text).unwrap();
    let c = Connector {
        dir: dir.path().to_path_buf(),
        config,
        child: None,
        topic: format!("t.{db}.{}", tables[0]),
    };
    (dir, c)
}

impl Connector {
    pub fn log_dir(&self) -> PathBuf {
        self.dir.join("log")
    }

    pub fn start(&mut self) {
        assert!(self.child.is_none());
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("connector.log"))
            .unwrap();
        // CDC_E2E_BIN: another build of the CLI (a release `cdc` for the rate test).
        let bin = std::env::var("CDC_E2E_BIN").unwrap_or(env!("CARGO_BIN_EXE_cdc-e2e").into());
        let child = Command::new(bin)
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
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM; returns the exit code.
    pub fn stop(&mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        // SAFETY: kill(2) on our own child's pid.
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

    /// Waits for the connector to exit by itself; returns its exit code.
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

    pub fn records(&self) -> Vec<Rec> {
        read_topic(&self.log_dir(), &self.topic)
    }

    /// Waits until rebuilding the topic from the log equals `db.acct`; panics with the
    /// connector's output otherwise.
    pub async fn converge(&mut self, my: &MariaDbServer, db: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            self.assert_running();
            let want = table_rows(my, db).await;
            let got = rebuild(&self.records());
            if got == want {
                return;
            }
            if Instant::now() > deadline {
                let differ: Vec<_> = want
                    .keys()
                    .chain(got.keys())
                    .filter(|k| got.get(*k) != want.get(*k))
                    .take(5)
                    .collect();
                panic!(
                    "log has {} rows, table {}; differing {differ:?}: log {:?} table {:?}\n{}",
                    got.len(),
                    want.len(),
                    differ.first().and_then(|k| got.get(*k)),
                    differ.first().and_then(|k| want.get(*k)),
                    self.output()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Connector {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One record read back (value `None` = tombstone), and the reader of a whole topic.
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

/// Applies c/r/u/d by key in log order per partition, and a truncate to its partition's
/// keys: key (JSON text) → `after` row.
pub fn rebuild(recs: &[Rec]) -> BTreeMap<String, Json> {
    let mut m: BTreeMap<String, (u32, Json)> = BTreeMap::new();
    for r in recs {
        let Some(v) = &r.value else {
            continue;
        };
        let op = v["op"].as_str().unwrap();
        if op == "t" {
            // A truncate is written to every partition; each copy clears its own.
            m.retain(|_, (p, _)| *p != r.partition);
            continue;
        }
        let Some(k) = &r.key else {
            continue;
        };
        match op {
            "c" | "r" | "u" => {
                m.insert(k.to_string(), (r.partition, v["after"].clone()));
            }
            "d" => {
                m.remove(&k.to_string());
            }
            _ => {}
        }
    }
    m.into_iter().map(|(k, (_, row))| (k, row)).collect()
}

/// `db.acct` as `{"id":…}` key text → `{id, v, pad}`.
pub async fn table_rows(my: &MariaDbServer, db: &str) -> BTreeMap<String, Json> {
    table_rows_of(my, db, "acct").await
}

/// As [`table_rows`], of `db.<table>` (a table of `acct`'s columns).
pub async fn table_rows_of(my: &MariaDbServer, db: &str, table: &str) -> BTreeMap<String, Json> {
    let mut c = my.root_conn().await.unwrap();
    let rows: Vec<(i32, i64, Option<String>)> = c
        .query(format!("SELECT id, v, pad FROM {db}.{table}"))
        .await
        .unwrap();
    let _ = c.disconnect().await;
    rows.into_iter()
        .map(|(id, v, pad)| {
            (
                serde_json::json!({ "id": id }).to_string(),
                serde_json::json!({ "id": id, "v": v, "pad": pad }),
            )
        })
        .collect()
}

/// A fresh database with `acct (id int PRIMARY KEY, v bigint NOT NULL, pad varchar(50))`
/// holding ids 1..=rows with v = 0.
pub async fn setup_acct(my: &MariaDbServer, rows: i64) -> String {
    let db = my.create_database().await.unwrap();
    let mut sql = format!(
        "CREATE TABLE {db}.acct (id int PRIMARY KEY, v bigint NOT NULL, pad varchar(50)) ENGINE=InnoDB;"
    );
    if rows > 0 {
        let values: Vec<String> = (1..=rows).map(|i| format!("({i}, 0, 'x')")).collect();
        sql.push_str(&format!(
            "INSERT INTO {db}.acct VALUES {};",
            values.join(",")
        ));
    }
    my.execute(&sql).await.unwrap();
    db
}

/// Every key's history in the log is a valid sequence: a snapshot read (re)sets it, a
/// create starts it, each update adds exactly 1 to v, a delete ends it — so no change is
/// duplicated or missing and they are in commit order. Returns the number of records.
pub fn check_histories(recs: &[Rec]) -> Result<usize, String> {
    let mut state: HashMap<String, Option<i64>> = HashMap::new();
    let mut n = 0;
    for r in recs {
        let (Some(k), Some(v)) = (&r.key, &r.value) else {
            continue;
        };
        let key = k.to_string();
        let op = v["op"].as_str().unwrap();
        let after = v["after"]["v"].as_i64();
        let cur = state.get(&key).copied().flatten();
        n += 1;
        let at = format!("{}:{}", r.partition, r.offset);
        match op {
            "r" => {
                state.insert(key, after);
            }
            "c" if cur.is_some() => return Err(format!("create of existing key {key} at {at}")),
            "c" => {
                state.insert(key, after);
            }
            "u" if cur.map(|c| c + 1) != after => {
                return Err(format!(
                    "key {key} at {at}: update to v={after:?} after v={cur:?} (duplicate or missing change)"
                ))
            }
            "u" => {
                state.insert(key, after);
            }
            "d" if cur.is_none() => return Err(format!("delete of absent key {key} at {at}")),
            "d" => {
                state.insert(key, None);
            }
            other => return Err(format!("unexpected op {other}")),
        }
    }
    Ok(n)
}

/// xorshift64: a small seeded generator, so a failing run can be replayed from its seed.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Random transactions on `db.acct` (updates v = v + 1, inserts above `first_id`,
/// deletes) until `stop`; `domain` sets the session's `gtid_domain_id` when not 0.
/// Returns the number of committed transactions.
pub async fn workload(
    my: &'static MariaDbServer,
    db: String,
    first_id: i64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    seed: u64,
    domain: u32,
) -> u64 {
    let mut rng = Rng(seed | 1);
    let mut next_id = first_id;
    let mut done = 0;
    let mut c = None;
    while !stop.load(Ordering::Relaxed) {
        if c.is_none() {
            match my.root_conn().await {
                Ok(mut n) => {
                    if domain != 0 {
                        n.query_drop(format!("SET SESSION gtid_domain_id = {domain}"))
                            .await
                            .unwrap();
                    }
                    c = Some(n);
                }
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            }
        }
        let conn = c.as_mut().unwrap();
        let mut sql = String::from("START TRANSACTION;");
        let mut inserted = false;
        for _ in 0..(1 + rng.next() % 4) {
            let id = 1 + (rng.next() % next_id as u64) as i64;
            sql.push_str(&format!("UPDATE {db}.acct SET v = v + 1 WHERE id = {id};"));
        }
        if rng.next() % 3 == 0 {
            inserted = true;
            sql.push_str(&format!(
                "INSERT INTO {db}.acct VALUES ({}, 0, 'new');",
                next_id + 1
            ));
        }
        if rng.next() % 7 == 0 {
            let id = 1 + (rng.next() % next_id as u64) as i64;
            sql.push_str(&format!("DELETE FROM {db}.acct WHERE id = {id};"));
        }
        sql.push_str("COMMIT;");
        match conn.query_drop(&sql).await {
            Ok(()) => {
                done += 1;
                if inserted {
                    next_id += 1;
                }
            }
            Err(_) => {
                // The server restarted: the transaction may or may not have committed;
                // the insert's id is skipped either way (never reused).
                if inserted {
                    next_id += 1;
                }
                c = None;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    done
}

impl Connector {
    /// Appends `text` to the config file (before `start`).
    pub fn append_config(&self, text: &str) {
        let mut s = std::fs::read_to_string(&self.config).unwrap();
        s.push_str(text);
        std::fs::write(&self.config, s).unwrap();
    }
}

impl Connector {
    /// Adds a `[source]` key line (before `start`).
    pub fn source_key(&self, line: &str) {
        let s = std::fs::read_to_string(&self.config).unwrap();
        let s = s.replacen("[source]\n", &format!("[source]\n{line}\n"), 1);
        std::fs::write(&self.config, s).unwrap();
    }
}

impl Connector {
    /// Moves the admin server to a fixed free port (before `start`); returns its address.
    pub fn fixed_admin_port(&self) -> String {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let s = std::fs::read_to_string(&self.config).unwrap();
        let s = s.replace("listen = \"127.0.0.1:0\"", &format!("listen = \"{addr}\""));
        std::fs::write(&self.config, s).unwrap();
        addr
    }
}

/// The value of the metric `name` in `/metrics` at `addr` (None: not exported).
pub fn metric(addr: &str, name: &str) -> Option<f64> {
    let (status, body) = cdc_harness::http(addr, "GET", "/metrics", None, "");
    assert_eq!(status, 200);
    let text = body.as_str().unwrap_or_default().to_string();
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok()).flatten()
    })
}

impl Connector {
    /// Waits until the log's records satisfy `done` (the connector must keep running);
    /// returns them.
    pub async fn wait_until(
        &mut self,
        timeout: Duration,
        done: impl Fn(&[Rec]) -> bool,
    ) -> Vec<Rec> {
        let deadline = Instant::now() + timeout;
        loop {
            self.assert_running();
            let recs = self.records();
            if done(&recs) {
                return recs;
            }
            assert!(Instant::now() < deadline, "{}", self.output());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until the connector has opened its binlog stream (after its snapshot).
    pub async fn wait_streaming(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !std::fs::read_to_string(self.dir.join("connector.log"))
            .unwrap_or_default()
            .contains("binlog stream started")
        {
            self.assert_running();
            assert!(Instant::now() < deadline, "{}", self.output());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
