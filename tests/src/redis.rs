//! Throwaway Redis servers: no persistence, loopback only. The instance directory
//! (`<root>/cdc-harness-<owner>-redis<n>/`) holds `redis.log` and is the server's `--dir`.
//! Redis runs as the harness's own user (it has no objection to root).

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
        let bin = process::find_binary("redis-server", &["/usr/bin/redis-server"])?;
        let inst = Instance::create("redis", None, libc::SIGTERM)?;
        let dir = inst.dir().to_path_buf();
        let log_path = dir.join("redis.log");
        for _ in 0..PORT_ATTEMPTS {
            let port = process::free_port()?;
            let log = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)?;
            let mut cmd = Command::new(&bin);
            cmd.current_dir(&dir)
                .args(["--port", &port.to_string()])
                .args(["--bind", "127.0.0.1"])
                .args(["--save", ""])
                .args(["--appendonly", "no"])
                .arg("--dir")
                .arg(&dir)
                .args(["--daemonize", "no"])
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log);
            inst.set_child(process::spawn(cmd)?);
            if process::wait_ready(&inst, "redis-server", &log_path, START_TIMEOUT, || {
                ping(port)
            })? {
                return Ok(RedisServer { inst, port });
            }
        }
        let _ = inst.shutdown();
        bail!("Redis: port clash {PORT_ATTEMPTS} times in a row")
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
        ping(self.port)
    }

    /// Stops the server and deletes its directory, reporting errors.
    pub fn stop(self) -> Result<()> {
        self.inst.shutdown()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.inst.shutdown();
    }
}
