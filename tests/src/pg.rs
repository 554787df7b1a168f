//! Throwaway Postgres servers configured for logical decoding.
//!
//! Layout of an instance directory (`<root>/cdc-harness-<owner>-pg<n>/`, mode 0755,
//! owned by the server user):
//! - `data/`         the cluster (a copy of a per-process `initdb` template), 0700;
//!   `data/harness.conf` holds everything the harness sets (included from postgresql.conf)
//! - `postgres.log`  the server's stderr (all of its logging)
//! - `ca.crt`        the test CA when ssl is on (server cert and key live in `data/`)
//! - `.s.PGSQL.<port>` the unix socket the harness uses for superuser access
//!
//! Roles (created at every start): `postgres` superuser (`postgres-pw`), `cdc` LOGIN
//! REPLICATION (`cdc-pw`, SCRAM), `cdc_md5` LOGIN REPLICATION (`md5-pw`, stored as md5),
//! `cdc_trust` LOGIN REPLICATION (trust over TCP), `app` LOGIN only (`app-pw`, SCRAM).

use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::{lchown, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

use crate::process::{self, Instance};

/// Password of the `postgres` superuser (TCP; the unix socket is trust).
pub const SUPERUSER_PASSWORD: &str = "postgres-pw";
/// Password of `cdc` (SCRAM-SHA-256, REPLICATION).
pub const CDC_PASSWORD: &str = "cdc-pw";
/// Password of `cdc_md5` (stored as md5, REPLICATION).
pub const CDC_MD5_PASSWORD: &str = "md5-pw";
/// Password of `app` (SCRAM, no REPLICATION).
pub const APP_PASSWORD: &str = "app-pw";

const START_TIMEOUT: Duration = Duration::from_secs(60);
const PORT_ATTEMPTS: usize = 5;

/// How to configure a Postgres instance. `Default` is what [`PgServer::shared`] uses.
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// Directory holding `postgres` and `initdb`. None: `$CDC_TEST_PG_BINDIR`, else
    /// `$CDC_TEST_PG` (a major version), else the highest `/usr/lib/postgresql/<n>/bin`.
    pub bin_dir: Option<PathBuf>,
    /// `wal_level` (`logical` by default; some tests need `replica`).
    pub wal_level: String,
    /// Turn on TLS with a fresh CA and a server certificate for `localhost`/127.0.0.1.
    pub ssl: bool,
    /// With `ssl`: TCP clients *must* use TLS (pg_hba `hostssl` lines instead of `host`).
    pub ssl_only: bool,
    /// Extra `postgresql.conf` lines, appended last (so they win).
    pub extra_config: Vec<String>,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            bin_dir: None,
            wal_level: "logical".into(),
            ssl: false,
            ssl_only: false,
            extra_config: Vec::new(),
        }
    }
}

impl PgOptions {
    pub fn bin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.bin_dir = Some(dir.into());
        self
    }
    pub fn wal_level(mut self, level: &str) -> Self {
        self.wal_level = level.into();
        self
    }
    pub fn ssl(mut self, on: bool) -> Self {
        self.ssl = on;
        self
    }
    pub fn ssl_only(mut self, on: bool) -> Self {
        self.ssl_only = on;
        if on {
            self.ssl = true;
        }
        self
    }
    /// Adds a `postgresql.conf` line such as `max_slot_wal_keep_size = '16MB'`.
    pub fn config(mut self, line: impl Into<String>) -> Self {
        self.extra_config.push(line.into());
        self
    }
}

/// Resolves the Postgres bin dir from options and environment (see [`PgOptions::bin_dir`]).
pub fn resolve_bin_dir(opt: Option<&Path>) -> Result<PathBuf> {
    if let Some(d) = opt {
        return Ok(d.to_path_buf());
    }
    if let Some(d) = std::env::var_os("CDC_TEST_PG_BINDIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    if let Ok(major) = std::env::var("CDC_TEST_PG") {
        let major = major.trim();
        if !major.is_empty() {
            let system = PathBuf::from(format!("/usr/lib/postgresql/{major}/bin"));
            if system.join("postgres").is_file() {
                return Ok(system);
            }
            if major == "16" {
                let cache = match std::env::var_os("CDC_TEST_CACHE").filter(|c| !c.is_empty()) {
                    Some(c) => PathBuf::from(c),
                    None => PathBuf::from("/var/cache/cdc-test"),
                };
                let wheel = cache.join("pg16/pgserver/pginstall/bin");
                if wheel.join("postgres").is_file() {
                    return Ok(wheel);
                }
                bail!(
                    "CDC_TEST_PG=16: neither {} nor {} exists; run tests/fetch-pg16.sh",
                    system.display(),
                    wheel.display()
                );
            }
            bail!("CDC_TEST_PG={major}: {} does not exist", system.display());
        }
    }
    let mut best: Option<(u32, PathBuf)> = None;
    for e in fs::read_dir("/usr/lib/postgresql")
        .context("no /usr/lib/postgresql: install postgresql or set CDC_TEST_PG_BINDIR")?
        .flatten()
    {
        let Some(major) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let bin = e.path().join("bin");
        if bin.join("postgres").is_file() && best.as_ref().is_none_or(|(m, _)| major > *m) {
            best = Some((major, bin));
        }
    }
    best.map(|(_, b)| b)
        .ok_or_else(|| anyhow!("no /usr/lib/postgresql/<major>/bin/postgres found"))
}

/// Applies what every Postgres child needs: the server user, a reachable cwd, C locale
/// messages (the harness reads the log), and the install's own lib dir for relocated
/// installs such as the pgserver wheel.
fn pg_command(bin_dir: &Path, prog: &str, user: Option<(u32, u32)>, cwd: &Path) -> Command {
    let mut cmd = Command::new(bin_dir.join(prog));
    if let Some((uid, gid)) = user {
        cmd.uid(uid).gid(gid);
    }
    cmd.current_dir(cwd)
        .env("LC_ALL", "C")
        .env_remove("PGDATA")
        .env_remove("PGPORT")
        .env_remove("PGHOST");
    let lib = bin_dir.join("../lib");
    if !bin_dir.starts_with("/usr/lib/postgresql") && lib.is_dir() {
        let mut paths = vec![lib];
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            paths.extend(std::env::split_paths(&old));
        }
        if let Ok(joined) = std::env::join_paths(paths) {
            cmd.env("LD_LIBRARY_PATH", joined);
        }
    }
    cmd
}

/// Whether the install was built with TLS support (`pg_config --configure` mentions
/// OpenSSL). The pgserver 16 wheel is built without it.
pub fn supports_ssl(bin_dir: &Path) -> Result<bool> {
    let out = Command::new(bin_dir.join("pg_config"))
        .arg("--configure")
        .output()
        .with_context(|| format!("running {}/pg_config", bin_dir.display()))?;
    let conf = String::from_utf8_lossy(&out.stdout);
    Ok(conf.contains("--with-openssl") || conf.contains("--with-ssl=openssl"))
}

fn major_version(bin_dir: &Path, user: Option<(u32, u32)>) -> Result<u32> {
    let mut cmd = pg_command(bin_dir, "postgres", user, Path::new("/"));
    cmd.arg("--version");
    let out = cmd
        .output()
        .with_context(|| format!("running {}/postgres --version", bin_dir.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "{}/postgres --version failed: {}{}",
            bin_dir.display(),
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // "postgres (PostgreSQL) 16.2" or "postgres (PostgreSQL) 15.8 (Debian 15.8-0+deb12u1)"
    text.split_whitespace()
        .nth(2)
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse().ok())
        .ok_or_else(|| anyhow!("cannot parse `postgres --version` output: {text}"))
}

/// One `initdb` per (process, bin dir); instances copy it.
fn template(bin_dir: &Path, user: Option<(u32, u32)>) -> Result<PathBuf> {
    static TEMPLATES: Mutex<Vec<(PathBuf, PathBuf)>> = Mutex::new(Vec::new());
    // Held during initdb on purpose: concurrent first starts wait for the one template.
    let mut g = TEMPLATES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, t)) = g.iter().find(|(b, _)| b == bin_dir) {
        return Ok(t.clone());
    }
    let dir = process::create_template_dir("pg", user)?;
    let data = dir.join("data");
    let log = dir.join("initdb.log");
    let mut cmd = pg_command(bin_dir, "initdb", user, &dir);
    cmd.arg("-D").arg(&data).args([
        "-U",
        "postgres",
        "--auth=trust",
        "--encoding=UTF8",
        "--locale=C",
        "--no-sync",
        "--no-instructions",
    ]);
    process::run_to_completion(cmd, &log, "initdb")?;
    // Everything the harness controls goes into harness.conf, rewritten per instance.
    let mut conf = fs::OpenOptions::new()
        .append(true)
        .open(data.join("postgresql.conf"))?;
    use std::io::Write;
    writeln!(conf, "\ninclude 'harness.conf'")?;
    g.push((bin_dir.to_path_buf(), data.clone()));
    Ok(data)
}

struct Tls {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

fn generate_tls() -> Result<Tls> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "cdc-harness test CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = ca_params.self_signed(&ca_key)?;

    let key = KeyPair::generate()?;
    // rcgen turns "127.0.0.1" into an IP SAN, "localhost" into a DNS SAN.
    let mut params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &ca, &ca_key)?;
    Ok(Tls {
        ca_pem: ca.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn hba(opts: &PgOptions) -> String {
    let host = if opts.ssl && opts.ssl_only {
        "hostssl"
    } else {
        // Plain `host` lines match TLS and non-TLS connections alike.
        "host"
    };
    let mut s = String::from(
        "# written by cdc-harness\n\
         local all all trust\n\
         local replication all trust\n",
    );
    // First match wins: the special roles before the catch-all SCRAM lines.
    for (user, method) in [
        ("cdc_trust", "trust"),
        ("cdc_md5", "md5"),
        ("all", "scram-sha-256"),
    ] {
        for db in ["all", "replication"] {
            let _ = writeln!(s, "{host} {db} {user} 127.0.0.1/32 {method}");
        }
    }
    s
}

fn harness_conf(opts: &PgOptions, dir: &Path, port: u16) -> String {
    let mut s = format!(
        "# written by cdc-harness; options appended last win\n\
         listen_addresses = '127.0.0.1'\n\
         port = {port}\n\
         unix_socket_directories = '{}'\n\
         wal_level = {}\n\
         max_replication_slots = 20\n\
         max_wal_senders = 20\n\
         password_encryption = 'scram-sha-256'\n\
         fsync = off\n\
         full_page_writes = off\n\
         shared_buffers = 32MB\n\
         # posix DSM segments live in /dev/shm and would leak if the server is SIGKILLed;\n\
         # mmap segments live in the data directory, which the harness deletes.\n\
         dynamic_shared_memory_type = mmap\n\
         logging_collector = off\n",
        dir.display(),
        opts.wal_level
    );
    if opts.ssl {
        s.push_str(
            "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\nssl_ca_file = 'root.crt'\n",
        );
    }
    for line in &opts.extra_config {
        s.push_str(line);
        s.push('\n');
    }
    s
}

/// A running throwaway Postgres. Dropping it stops the server and deletes its directory.
pub struct PgServer {
    inst: Arc<Instance>,
    port: Mutex<u16>,
    bin_dir: PathBuf,
    major: u32,
    user: Option<(u32, u32)>,
    ca_cert: Option<PathBuf>,
    db_seq: AtomicU64,
}

impl PgServer {
    /// Starts a fresh server. Blocking (about a second); fine to call from async tests.
    pub fn start(opts: PgOptions) -> Result<PgServer> {
        let bin_dir = resolve_bin_dir(opts.bin_dir.as_deref())?;
        let bin_dir = bin_dir.canonicalize().unwrap_or(bin_dir);
        let user = process::server_user("postgres", "Postgres (it refuses to run as root)")?;
        let major = major_version(&bin_dir, user)?;
        if opts.ssl && !supports_ssl(&bin_dir)? {
            bail!(
                "ssl requested but the Postgres in {} was built without SSL support",
                bin_dir.display()
            );
        }
        let tpl = template(&bin_dir, user)?;
        let inst = Instance::create("pg", user, libc::SIGINT)?;
        let dir = inst.dir().to_path_buf();
        let data = dir.join("data");
        process::copy_tree(&tpl, &data, user)?;
        fs::write(data.join("pg_hba.conf"), hba(&opts))?;

        let mut ca_cert = None;
        if opts.ssl {
            let tls = generate_tls()?;
            let ca = dir.join("ca.crt");
            fs::write(&ca, &tls.ca_pem)?;
            fs::write(data.join("server.crt"), &tls.cert_pem)?;
            fs::write(data.join("root.crt"), &tls.ca_pem)?;
            let key = data.join("server.key");
            fs::write(&key, &tls.key_pem)?;
            // Postgres refuses a key readable by others.
            fs::set_permissions(&key, fs::Permissions::from_mode(0o600))?;
            for f in ["server.crt", "server.key", "root.crt"] {
                if let Some((uid, gid)) = user {
                    lchown(data.join(f), Some(uid), Some(gid))?;
                }
            }
            ca_cert = Some(ca);
        }

        let server = PgServer {
            inst,
            port: Mutex::new(0),
            bin_dir,
            major,
            user,
            ca_cert,
            db_seq: AtomicU64::new(0),
        };
        // On error `server` drops here, which removes the directory.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = process::free_port()?;
            let conf = harness_conf(&opts, &dir, port);
            fs::write(data.join("harness.conf"), conf)?;
            if let Some((uid, gid)) = user {
                lchown(data.join("harness.conf"), Some(uid), Some(gid))?;
            }
            *server.port.lock().unwrap() = port;
            if server.spawn_and_wait()? {
                break;
            }
            if attempt >= PORT_ATTEMPTS {
                bail!("Postgres: port clash {PORT_ATTEMPTS} times in a row");
            }
        }
        process::block_on(server.create_roles())?;
        Ok(server)
    }

    /// The per-test-process server with default options, started on first use and
    /// stopped at process exit. Panics if it cannot start (see [`PgServer::try_shared`]).
    pub fn shared() -> &'static PgServer {
        Self::try_shared().unwrap_or_else(|e| panic!("shared Postgres: {e:#}"))
    }

    /// Like [`PgServer::shared`], returning the start-up error instead of panicking.
    pub fn try_shared() -> Result<&'static PgServer> {
        static SHARED: OnceLock<std::result::Result<PgServer, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| PgServer::start(PgOptions::default()).map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow!("{e}"))
    }

    /// Spawns the postmaster; Ok(false) on a port clash.
    fn spawn_and_wait(&self) -> Result<bool> {
        let dir = self.inst.dir();
        let log_path = dir.join("postgres.log");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        // Started directly (not through pg_ctl) so that the harness is the postmaster's
        // parent: it can wait for it, and the parent-death signal applies to it.
        let mut cmd = pg_command(&self.bin_dir, "postgres", self.user, dir);
        cmd.arg("-D")
            .arg(dir.join("data"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let pid_file = dir.join("data/postmaster.pid");
        // A previous run's file (restart after a crash) must not count as "ready".
        let _ = fs::remove_file(&pid_file);
        let child = process::spawn(cmd)?;
        let pid = child.id();
        self.inst.set_child(child);
        process::wait_ready(&self.inst, "postgres", &log_path, START_TIMEOUT, || {
            // postmaster.pid line 1 is the pid, line 8 the status; "ready" means it
            // accepts connections (what pg_ctl -w waits for).
            fs::read_to_string(&pid_file).is_ok_and(|s| {
                let lines: Vec<&str> = s.lines().collect();
                lines.first().and_then(|l| l.trim().parse::<u32>().ok()) == Some(pid)
                    && lines.get(7).is_some_and(|l| l.trim() == "ready")
            })
        })
    }

    async fn create_roles(&self) -> Result<()> {
        let client = self.superuser_client("postgres").await?;
        client
            .batch_execute(&format!(
                "ALTER ROLE postgres PASSWORD '{SUPERUSER_PASSWORD}';
                 CREATE ROLE cdc LOGIN REPLICATION PASSWORD '{CDC_PASSWORD}';
                 CREATE ROLE cdc_trust LOGIN REPLICATION;
                 CREATE ROLE app LOGIN PASSWORD '{APP_PASSWORD}';
                 SET password_encryption = 'md5';
                 CREATE ROLE cdc_md5 LOGIN REPLICATION PASSWORD '{CDC_MD5_PASSWORD}';
                 RESET password_encryption;"
            ))
            .await
            .context("creating the test roles")?;
        Ok(())
    }

    pub fn port(&self) -> u16 {
        *self.port.lock().unwrap_or_else(|p| p.into_inner())
    }
    pub fn host(&self) -> &'static str {
        "127.0.0.1"
    }
    pub fn major_version(&self) -> u32 {
        self.major
    }
    pub fn data_dir(&self) -> PathBuf {
        self.inst.dir().join("data")
    }
    /// The instance directory (holds `data/`, `postgres.log`, the socket, `ca.crt`).
    pub fn dir(&self) -> &Path {
        self.inst.dir()
    }
    pub fn log_path(&self) -> PathBuf {
        self.inst.dir().join("postgres.log")
    }
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }
    /// The postmaster's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.inst.pid()
    }
    /// PEM file of the CA that signed the server certificate (when `ssl` is on), for
    /// `sslmode=verify-full sslrootcert=…`. The certificate names `localhost` and 127.0.0.1.
    pub fn ca_cert_path(&self) -> Option<&Path> {
        self.ca_cert.as_deref()
    }

    /// `postgres://user:password@127.0.0.1:port/db` (no password part when empty).
    pub fn url(&self, user: &str, password: &str, db: &str) -> String {
        let port = self.port();
        if password.is_empty() {
            format!("postgres://{user}@127.0.0.1:{port}/{db}")
        } else {
            format!("postgres://{user}:{password}@127.0.0.1:{port}/{db}")
        }
    }

    /// Creates a fresh, uniquely named database owned by `cdc` and returns its name.
    ///
    /// `cdc` owns the database and (Postgres 15+) its `public` schema, so tests can create
    /// tables as `cdc`, and `cdc` can then publish them (`CREATE PUBLICATION … FOR TABLE`
    /// needs table ownership; `FOR ALL TABLES` needs a superuser).
    pub async fn create_database(&self) -> Result<String> {
        let n = self.db_seq.fetch_add(1, Ordering::Relaxed);
        let name = format!("cdc_test_{n}");
        // CREATE DATABASE cannot share a (multi-statement, hence implicit) transaction.
        self.execute("postgres", &format!("CREATE DATABASE {name} OWNER cdc"))
            .await?;
        // Before Postgres 15 `public` belongs to the bootstrap superuser.
        self.execute(&name, "ALTER SCHEMA public OWNER TO cdc")
            .await?;
        Ok(name)
    }

    /// A superuser connection over the unix socket (trust); its connection task runs on
    /// the caller's tokio runtime.
    pub async fn superuser_client(&self, db: &str) -> Result<tokio_postgres::Client> {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host_path(self.inst.dir())
            .port(self.port())
            .user("postgres")
            .dbname(db);
        let (client, conn) = cfg.connect(tokio_postgres::NoTls).await.with_context(|| {
            format!(
                "connecting as postgres to {db} via unix socket (server {})\n{}",
                self.inst.describe_state(),
                process::log_tail(&self.log_path(), 3000)
            )
        })?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(client)
    }

    /// Runs `sql` (one or more statements) in `db` as the superuser.
    pub async fn execute(&self, db: &str, sql: &str) -> Result<()> {
        let client = self.superuser_client(db).await?;
        client
            .batch_execute(sql)
            .await
            .with_context(|| format!("executing in {db}: {sql}"))
    }

    /// Stops the server (fast shutdown, or immediate = crash-like, needing recovery) and
    /// starts it again on the same port with the same data.
    pub fn restart(&self, immediate: bool) -> Result<()> {
        let sig = if immediate {
            libc::SIGQUIT
        } else {
            libc::SIGINT
        };
        self.inst.stop_process(Some(sig), process::STOP_TIMEOUT)?;
        if !self.spawn_and_wait()? {
            bail!("Postgres restart: port {} was taken meanwhile", self.port());
        }
        Ok(())
    }

    /// Stops the server (fast shutdown) and deletes its directory, reporting errors that
    /// `Drop` would swallow.
    pub fn stop(self) -> Result<()> {
        self.inst.shutdown()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = self.inst.shutdown();
    }
}
