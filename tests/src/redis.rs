//! Throwaway Redis servers: no persistence, loopback only. The instance directory
//! (`<root>/cdc-harness-<owner>-redis<n>/`) holds `redis.log` and is the server's `--dir`.
//! Redis runs as the harness's own user (it has no objection to root).
//! [`RedisOptions`] picks another binary (a Valkey server, see `valkey.rs`) and turns on
//! append-only persistence for tests that restart the server and expect its data back.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{anyhow, bail, Result};

use crate::process::{self, Instance};

const START_TIMEOUT: Duration = Duration::from_secs(30);
const PORT_ATTEMPTS: usize = 5;

/// A running throwaway Redis. Dropping it stops the server and deletes its directory.
pub struct RedisServer {
    inst: Arc<Instance>,
    port: u16,
    bin: PathBuf,
    opts: RedisOptions,
}

/// How to start a server.
#[derive(Debug, Clone, Default)]
pub struct RedisOptions {
    /// The server binary (default: the installed `redis-server`).
    pub binary: Option<PathBuf>,
    /// Append-only file with fsync on every write: a restarted server has its data back.
    pub appendonly: bool,
    /// `requirepass`.
    pub password: Option<String>,
}

/// Sends PING over RESP and expects +PONG: the server is up and serving commands.
fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

impl RedisServer {
    /// Starts a fresh server (a few milliseconds).
    pub fn start() -> Result<RedisServer> {
        Self::start_with(RedisOptions::default())
    }

    /// Starts a fresh server as `opts` say.
    pub fn start_with(opts: RedisOptions) -> Result<RedisServer> {
        let bin = match &opts.binary {
            Some(b) => b.clone(),
            None => process::find_binary("redis-server", &["/usr/bin/redis-server"])?,
        };
        let inst = Instance::create("redis", None, libc::SIGTERM)?;
        for _ in 0..PORT_ATTEMPTS {
            let port = process::free_port()?;
            if spawn_server(&inst, &bin, &opts, port)? {
                return Ok(RedisServer {
                    inst,
                    port,
                    bin,
                    opts,
                });
            }
        }
        let _ = inst.shutdown();
        bail!("Redis: port clash {PORT_ATTEMPTS} times in a row")
    }

    /// Stops the server (SIGTERM: with `appendonly` its data is on disk) and keeps its
    /// directory, for [`RedisServer::start_again`].
    pub fn stop_for_now(&self) -> Result<()> {
        self.inst
            .stop_process(Some(libc::SIGTERM), Duration::from_secs(20))
    }

    /// Starts the stopped server again on its port, from its directory.
    pub fn start_again(&self) -> Result<()> {
        if !spawn_server(&self.inst, &self.bin, &self.opts, self.port)? {
            bail!("Redis restart: port {} was taken meanwhile", self.port);
        }
        Ok(())
    }

    /// The per-test-process server, started on first use and stopped at process exit.
    pub fn shared() -> &'static RedisServer {
        Self::try_shared().unwrap_or_else(|e| panic!("shared Redis: {e:#}"))
    }

    pub fn try_shared() -> Result<&'static RedisServer> {
        static SHARED: OnceLock<std::result::Result<RedisServer, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| RedisServer::start().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow!("{e}"))
    }

    pub fn port(&self) -> u16 {
        self.port
    }
    pub fn host(&self) -> &'static str {
        "127.0.0.1"
    }
    /// `redis://127.0.0.1:port`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
    pub fn dir(&self) -> &Path {
        self.inst.dir()
    }
    pub fn log_path(&self) -> PathBuf {
        self.inst.dir().join("redis.log")
    }
    pub fn pid(&self) -> Option<u32> {
        self.inst.pid()
    }
    /// True if the server answers PING.
    pub fn ping(&self) -> bool {
        ping_auth(self.port, self.opts.password.as_deref())
    }

    /// Stops the server and deletes its directory, reporting errors.
    pub fn stop(self) -> Result<()> {
        self.inst.shutdown()
    }
}

/// Spawns the server on `port` and waits until it answers; `Ok(false)` on a port clash.
fn spawn_server(inst: &Instance, bin: &Path, opts: &RedisOptions, port: u16) -> Result<bool> {
    let dir = inst.dir().to_path_buf();
    let log_path = dir.join("redis.log");
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)?;
    let mut cmd = Command::new(bin);
    cmd.current_dir(&dir)
        .args(["--port", &port.to_string()])
        .args(["--bind", "127.0.0.1"])
        .args(["--save", ""])
        .arg("--dir")
        .arg(&dir)
        .args(["--daemonize", "no"]);
    if opts.appendonly {
        cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
    } else {
        cmd.args(["--appendonly", "no"]);
    }
    if let Some(p) = &opts.password {
        cmd.args(["--requirepass", p]);
    }
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    inst.set_child(process::spawn(cmd)?);
    let auth = opts.password.clone();
    process::wait_ready(inst, "redis-server", &log_path, START_TIMEOUT, || {
        ping_auth(port, auth.as_deref())
    })
}

/// PING, after AUTH when the server has a password (then -NOAUTH would not count).
fn ping_auth(port: u16, password: Option<&str>) -> bool {
    let Some(p) = password else { return ping(port) };
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let cmd = format!("AUTH {p}\r\nPING\r\n");
    if s.write_all(cmd.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 12];
    s.read_exact(&mut buf).is_ok() && &buf == b"+OK\r\n+PONG\r\n"
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.inst.shutdown();
    }
}
