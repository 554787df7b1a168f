//! Throwaway MariaDB servers configured for row-based binlog CDC.
//!
//! Layout of an instance directory (`<root>/cdc-harness-<owner>-mariadb<n>/`, owned by
//! the server user): `data/` (a copy of a per-process `mariadb-install-db` template),
//! `binlog.*` (the binary log, when on), `error.log`, `mysqld.pid`, `mysqld.sock`.
//!
//! Users (created at every start, with `sql_log_bin = 0` so the binlog starts without
//! them): `root` (`root-pw`, over the socket and TCP), `cdc`@`%` and `cdc`@`127.0.0.1`
//! (`cdc-pw`, mysql_native_password; REPLICATION SLAVE, REPLICATION CLIENT, SELECT,
//! RELOAD, SHOW DATABASES on *.*), `app`@`%`/`127.0.0.1` (`app-pw`, SELECT on *.*).

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use mysql_async::prelude::Queryable;

use crate::process::{self, Instance};

pub const ROOT_PASSWORD: &str = "root-pw";
pub const CDC_PASSWORD: &str = "cdc-pw";
pub const APP_PASSWORD: &str = "app-pw";

const START_TIMEOUT: Duration = Duration::from_secs(60);
const PORT_ATTEMPTS: usize = 5;
/// What mariadbd logs once it accepts connections.
const READY: &str = "ready for connections";

/// How to configure a MariaDB instance. `Default` is what [`MariaDbServer::shared`] uses.
#[derive(Clone, Debug)]
pub struct MariaDbOptions {
    /// Write a binary log (`--log-bin`). On by default.
    pub binlog: bool,
    /// `--binlog-format` (`ROW` by default; `STATEMENT`/`MIXED` for negative tests).
    pub binlog_format: String,
    /// `--server-id`; None: unique per instance within the process.
    pub server_id: Option<u32>,
    /// Extra `mariadbd` arguments, appended last (a later option wins).
    pub extra_args: Vec<String>,
}

impl Default for MariaDbOptions {
    fn default() -> Self {
        MariaDbOptions {
            binlog: true,
            binlog_format: "ROW".into(),
            server_id: None,
            extra_args: Vec::new(),
        }
    }
}

impl MariaDbOptions {
    pub fn binlog(mut self, on: bool) -> Self {
        self.binlog = on;
        self
    }
    pub fn binlog_format(mut self, format: &str) -> Self {
        self.binlog_format = format.into();
        self
    }
    pub fn server_id(mut self, id: u32) -> Self {
        self.server_id = Some(id);
        self
    }
    /// Adds a `mariadbd` argument such as `--gtid-strict-mode=ON`.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }
}

/// A `tmp/` inside `dir`, owned by the server user. MariaDB's tmpdir defaults to /tmp,
/// shared by every server on the machine; concurrent bootstraps there were seen to trip
/// over each other's internal temporary tables ("Could not remove temporary table").
fn private_tmp(dir: &Path, user: Option<(u32, u32)>) -> Result<PathBuf> {
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(&tmp, Some(uid), Some(gid))?;
    }
    Ok(tmp)
}

/// One `mariadb-install-db` per process; instances copy it.
fn template(user: Option<(u32, u32)>) -> Result<PathBuf> {
    static TEMPLATE: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut g = TEMPLATE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(t) = g.as_ref() {
        return Ok(t.clone());
    }
    let install = process::find_binary("mariadb-install-db", &["/usr/bin/mariadb-install-db"])?;
    let dir = process::create_template_dir("mariadb", user)?;
    let data = dir.join("data");
    let mut cmd = Command::new(install);
    if let Some((uid, gid)) = user {
        // Run as the server user directly rather than with --user (which needs root and
        // chowns afterwards).
        cmd.uid(uid).gid(gid);
    }
    let tmp = private_tmp(&dir, user)?;
    cmd.current_dir(&dir)
        .env("LC_ALL", "C")
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        // Passed through to the bootstrap server (see private_tmp).
        .arg(format!("--tmpdir={}", tmp.display()))
        .args([
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            // A small redo log keeps the template (and every copy) at ~25 MB.
            "--innodb-log-file-size=8M",
        ]);
    process::run_to_completion(cmd, &dir.join("install-db.log"), "mariadb-install-db")?;
    *g = Some(data.clone());
    Ok(data)
}

static SERVER_IDS: AtomicU32 = AtomicU32::new(1);

/// A running throwaway MariaDB. Dropping it stops the server and deletes its directory.
pub struct MariaDbServer {
    inst: Arc<Instance>,
    port: Mutex<u16>,
    args: Vec<String>,
    user: Option<(u32, u32)>,
    mariadbd: PathBuf,
    db_seq: AtomicU64,
}

impl MariaDbServer {
    /// Starts a fresh server. Blocking (well under a second); fine from async tests.
    pub fn start(opts: MariaDbOptions) -> Result<MariaDbServer> {
        let mariadbd = process::find_binary("mariadbd", &["/usr/sbin/mariadbd"])?;
        // Started as the `mysql` user directly (never `--user`): a server that setuids
        // itself loses the parent-death signal.
        let user = process::server_user("mysql", "mariadbd")?;
        let tpl = template(user)?;
        let inst = Instance::create("mariadb", user, libc::SIGTERM)?;
        let dir = inst.dir().to_path_buf();
        process::copy_tree(&tpl, &dir.join("data"), user)?;

        let d = |name: &str| dir.join(name).display().to_string();
        let server_id = opts
            .server_id
            .unwrap_or_else(|| SERVER_IDS.fetch_add(1, Ordering::Relaxed));
        let mut args = vec![
            // Must be first: ignore every my.cnf on the machine.
            "--no-defaults".to_string(),
            format!("--datadir={}", d("data")),
            "--bind-address=127.0.0.1".into(),
            format!("--socket={}", d("mysqld.sock")),
            format!("--log-error={}", d("error.log")),
            format!("--pid-file={}", d("mysqld.pid")),
            format!("--tmpdir={}", private_tmp(&dir, user)?.display()),
            format!("--server-id={server_id}"),
            "--innodb-buffer-pool-size=64M".into(),
            "--innodb-log-file-size=8M".into(),
            "--innodb-flush-log-at-trx-commit=2".into(),
            "--sync-binlog=0".into(),
            "--skip-name-resolve".into(),
            "--character-set-server=utf8mb4".into(),
            "--collation-server=utf8mb4_general_ci".into(),
            "--max-connections=200".into(),
        ];
        if opts.binlog {
            args.extend([
                format!("--log-bin={}", d("binlog")),
                format!("--binlog-format={}", opts.binlog_format),
                "--binlog-row-image=FULL".into(),
                "--binlog-row-metadata=FULL".into(),
            ]);
        }
        args.extend(opts.extra_args.iter().cloned());

        let server = MariaDbServer {
            inst,
            port: Mutex::new(0),
            args,
            user,
            mariadbd,
            db_seq: AtomicU64::new(0),
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            *server.port.lock().unwrap() = process::free_port()?;
            if server.spawn_and_wait()? {
                break;
            }
            if attempt >= PORT_ATTEMPTS {
                bail!("MariaDB: port clash {PORT_ATTEMPTS} times in a row");
            }
        }
        process::block_on(server.create_users())?;
        Ok(server)
    }

    /// The per-test-process server with default options, started on first use and
    /// stopped at process exit. Panics if it cannot start.
    pub fn shared() -> &'static MariaDbServer {
        Self::try_shared().unwrap_or_else(|e| panic!("shared MariaDB: {e:#}"))
    }

    pub fn try_shared() -> Result<&'static MariaDbServer> {
        static SHARED: OnceLock<std::result::Result<MariaDbServer, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                MariaDbServer::start(MariaDbOptions::default()).map_err(|e| format!("{e:#}"))
            })
            .as_ref()
            .map_err(|e| anyhow!("{e}"))
    }

    fn spawn_and_wait(&self) -> Result<bool> {
        let dir = self.inst.dir();
        let port = self.port();
        let sock = dir.join("mysqld.sock");
        let log_path = dir.join("error.log");
        // Early failures (bad option) go to stderr before --log-error takes over.
        let console = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        let mut cmd = Command::new(&self.mariadbd);
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid);
        }
        cmd.current_dir(dir)
            .env("LC_ALL", "C")
            .args(&self.args)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(console.try_clone()?)
            .stderr(console);
        let _ = fs::remove_file(&sock);
        // The log is appended to across restarts: only what this run writes counts.
        let log_start = fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0);
        let child = process::spawn(cmd)?;
        self.inst.set_child(child);
        process::wait_ready(&self.inst, "mariadbd", &log_path, START_TIMEOUT, || {
            // mariadbd creates its listening sockets early and accepts connections only
            // once it has logged "ready for connections"; a socket that exists or a TCP
            // connect that succeeds (into the backlog) proves nothing.
            sock.exists()
                && fs::read(&log_path).is_ok_and(|log| {
                    log.get(log_start as usize..)
                        .is_some_and(|new| new.windows(READY.len()).any(|w| w == READY.as_bytes()))
                })
        })
    }

    async fn create_users(&self) -> Result<()> {
        // The template's root has no password yet.
        let opts = mysql_async::OptsBuilder::default()
            .socket(Some(self.socket_path().display().to_string()))
            .user(Some("root"));
        let mut conn = mysql_async::Conn::new(opts).await.with_context(|| {
            format!(
                "connecting as root via the socket (server {})\n{}",
                self.inst.describe_state(),
                process::log_tail(&self.log_path(), 3000)
            )
        })?;
        // install-db also creates root@<hostname>, which --skip-name-resolve makes
        // unusable (and un-ALTERable): drop it, keep root@localhost/127.0.0.1/::1.
        let mut sql = String::from(
            "SET sql_log_bin = 0;
             DELETE FROM mysql.global_priv WHERE User = 'root'
                 AND Host NOT IN ('localhost', '127.0.0.1', '::1');
             FLUSH PRIVILEGES;",
        );
        for h in ["localhost", "127.0.0.1", "::1"] {
            sql.push_str(&format!(
                "ALTER USER IF EXISTS 'root'@'{h}' IDENTIFIED BY '{ROOT_PASSWORD}';"
            ));
        }
        sql.push_str(&format!(
            "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '{ROOT_PASSWORD}';
             GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;"
        ));
        for host in ["%", "127.0.0.1"] {
            sql.push_str(&format!(
                "CREATE USER 'cdc'@'{host}' IDENTIFIED VIA mysql_native_password USING PASSWORD('{CDC_PASSWORD}');
                 GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT, RELOAD, SHOW DATABASES ON *.* TO 'cdc'@'{host}';
                 CREATE USER 'app'@'{host}' IDENTIFIED VIA mysql_native_password USING PASSWORD('{APP_PASSWORD}');
                 GRANT SELECT ON *.* TO 'app'@'{host}';"
            ));
        }
        sql.push_str("FLUSH PRIVILEGES;");
        conn.query_drop(sql)
            .await
            .context("creating the test users")?;
        conn.disconnect().await?;
        Ok(())
    }

    pub fn port(&self) -> u16 {
        *self.port.lock().unwrap_or_else(|p| p.into_inner())
    }
    pub fn host(&self) -> &'static str {
        "127.0.0.1"
    }
    pub fn dir(&self) -> &Path {
        self.inst.dir()
    }
    pub fn data_dir(&self) -> PathBuf {
        self.inst.dir().join("data")
    }
    pub fn socket_path(&self) -> PathBuf {
        self.inst.dir().join("mysqld.sock")
    }
    pub fn log_path(&self) -> PathBuf {
        self.inst.dir().join("error.log")
    }
    pub fn pid(&self) -> Option<u32> {
        self.inst.pid()
    }

    /// `mysql://user:password@127.0.0.1:port/db` (db may be empty).
    pub fn url(&self, user: &str, password: &str, db: &str) -> String {
        format!("mysql://{user}:{password}@127.0.0.1:{}/{db}", self.port())
    }

    /// Creates a fresh, uniquely named database and returns its name. Tests create their
    /// tables as root (`cdc` can read everything, `app` only SELECT).
    pub async fn create_database(&self) -> Result<String> {
        let n = self.db_seq.fetch_add(1, Ordering::Relaxed);
        let name = format!("cdc_test_{n}");
        self.execute(&format!("CREATE DATABASE {name}")).await?;
        Ok(name)
    }

    /// A root connection over the unix socket.
    pub async fn root_conn(&self) -> Result<mysql_async::Conn> {
        let opts = mysql_async::OptsBuilder::default()
            .socket(Some(self.socket_path().display().to_string()))
            .user(Some("root"))
            .pass(Some(ROOT_PASSWORD));
        mysql_async::Conn::new(opts).await.with_context(|| {
            format!(
                "connecting as root via the socket (server {})\n{}",
                self.inst.describe_state(),
                process::log_tail(&self.log_path(), 3000)
            )
        })
    }

    /// Runs `sql` (one or more statements) as root.
    pub async fn execute(&self, sql: &str) -> Result<()> {
        let mut conn = self.root_conn().await?;
        conn.query_drop(sql)
            .await
            .with_context(|| format!("executing: {sql}"))?;
        conn.disconnect().await?;
        Ok(())
    }

    /// Stops the server (SIGTERM: clean shutdown) and starts it again on the same port
    /// with the same data and options.
    pub fn restart(&self) -> Result<()> {
        self.inst.stop_process(None, process::STOP_TIMEOUT)?;
        if !self.spawn_and_wait()? {
            bail!("MariaDB restart: port {} was taken meanwhile", self.port());
        }
        Ok(())
    }

    /// Stops the server and deletes its directory, reporting errors.
    pub fn stop(self) -> Result<()> {
        self.inst.shutdown()
    }
}

impl Drop for MariaDbServer {
    fn drop(&mut self) {
        let _ = self.inst.shutdown();
    }
}
