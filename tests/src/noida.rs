//! Throwaway noida-db emulators (0.2.3, from PyPI through `tests/fetch-noida.sh`) serving
//! only their Elasticsearch API (it reports Elasticsearch 8.15.3) on a loopback port the
//! kernel handed out; the data directory and `noida.log` are in the instance directory
//! (`<root>/cdc-harness-<owner>-noida<n>/`). No real Elasticsearch is installable here:
//! the Elasticsearch sink's tests run against this, and its request bodies are checked
//! against Elasticsearch's documented `_bulk` format in the sink's unit tests.
//!
//! [`NoidaKafka`] serves its Kafka API instead (transactions with `read_committed`,
//! CreateTopics with configs, consumer groups): the broker the Kafka-as-the-log tests run
//! against (tansu, the other broker obtainable here, hands aborted records to
//! `read_committed` consumers).
//!
//! The binary is `$CDC_TEST_NOIDA_BIN`, else the fetch script's cache, else the script is
//! run once per process; when that fails, [`noida_bin`] says why and the tests skip.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{bail, Result};

use crate::process::{self, Instance};
use crate::typesense::{fetched_binary, get};

const START_TIMEOUT: Duration = Duration::from_secs(30);
const PORT_ATTEMPTS: usize = 5;

/// The noida-db binary, fetching it if needed.
pub fn noida_bin() -> Result<PathBuf> {
    static ONCE: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    fetched_binary(
        "CDC_TEST_NOIDA_BIN",
        "noida/noida-db-0.2.3",
        "fetch-noida.sh",
        &ONCE,
    )
}

/// A running emulator with its Elasticsearch API. Dropping it stops it and deletes its
/// directory.
pub struct NoidaElasticsearch {
    inst: Arc<Instance>,
    port: u16,
}

impl NoidaElasticsearch {
    /// Starts a fresh emulator (milliseconds).
    pub fn start() -> Result<NoidaElasticsearch> {
        // Ctrl-C is its documented way to stop a foreground server.
        let inst = Instance::create("noida", None, libc::SIGINT)?;
        for _ in 0..PORT_ATTEMPTS {
            let port = process::free_port()?;
            if spawn_api(
                &inst,
                "elasticsearch",
                port,
                || matches!(get(port, "/"), Some((200, b)) if b.contains("You Know, for Search")),
            )? {
                return Ok(NoidaElasticsearch { inst, port });
            }
        }
        let _ = inst.shutdown();
        bail!("noida-db: port clash {PORT_ATTEMPTS} times in a row")
    }

    pub fn port(&self) -> u16 {
        self.port
    }
    /// `http://127.0.0.1:port`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
    pub fn dir(&self) -> &Path {
        self.inst.dir()
    }
    pub fn log_path(&self) -> PathBuf {
        self.inst.dir().join("noida.log")
    }

    /// Stops the emulator and deletes its directory, reporting errors.
    pub fn stop(self) -> Result<()> {
        self.inst.shutdown()
    }
}

impl Drop for NoidaElasticsearch {
    fn drop(&mut self) {
        let _ = self.inst.shutdown();
    }
}

/// A running emulator with its Kafka API. Dropping it stops it and deletes its directory.
pub struct NoidaKafka {
    inst: Arc<Instance>,
    port: u16,
}

impl NoidaKafka {
    /// Starts a fresh broker on a free port.
    pub fn start() -> Result<NoidaKafka> {
        for _ in 0..PORT_ATTEMPTS {
            if let Some(k) = Self::start_on(process::free_port()?)? {
                return Ok(k);
            }
        }
        bail!("noida-db: port clash {PORT_ATTEMPTS} times in a row")
    }

    /// Starts a fresh broker on `port`; `None` if the port was taken meanwhile.
    pub fn start_on(port: u16) -> Result<Option<NoidaKafka>> {
        let inst = Instance::create("noida", None, libc::SIGINT)?;
        if Self::spawn(&inst, port)? {
            return Ok(Some(NoidaKafka { inst, port }));
        }
        let _ = inst.shutdown();
        Ok(None)
    }

    /// Runs the broker on `port` with the instance's data directory; false on a port clash.
    fn spawn(inst: &Arc<Instance>, port: u16) -> Result<bool> {
        spawn_api(inst, "kafka", port, || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
    }

    /// Stops the broker (Ctrl-C) and starts it again on the same port and data directory,
    /// which keeps its topics and records; `down` runs while it is stopped.
    pub fn restart_after(&self, down: impl FnOnce()) -> Result<()> {
        self.inst
            .stop_process(Some(libc::SIGINT), Duration::from_secs(20))?;
        down();
        for _ in 0..50 {
            if Self::spawn(&self.inst, self.port)? {
                return Ok(());
            }
            // The old process's socket may linger for a moment.
            std::thread::sleep(Duration::from_millis(200));
        }
        bail!("noida-db: port {} still taken after a restart", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }
    /// `127.0.0.1:port`, for `bootstrap.servers`.
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
    pub fn log_path(&self) -> PathBuf {
        self.inst.dir().join("noida.log")
    }

    /// Stops the broker and deletes its directory, reporting errors.
    pub fn stop(self) -> Result<()> {
        self.inst.shutdown()
    }
}

impl Drop for NoidaKafka {
    fn drop(&mut self) {
        let _ = self.inst.shutdown();
    }
}

/// Runs the emulator in `inst`'s directory (data in `data/`, output in `noida.log`) serving
/// only `api` (`elasticsearch`, `kafka`) on `port`, until `ready`; false on a port clash.
fn spawn_api(
    inst: &Arc<Instance>,
    api: &str,
    port: u16,
    ready: impl FnMut() -> bool,
) -> Result<bool> {
    let bin = noida_bin()?;
    let dir = inst.dir().to_path_buf();
    let log_path = dir.join("noida.log");
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)?;
    let mut cmd = Command::new(&bin);
    cmd.current_dir(&dir)
        .arg("start")
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--host", "127.0.0.1"])
        .args(["--only", api])
        .arg(format!("--{api}-port"))
        .arg(port.to_string())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    inst.set_child(process::spawn(cmd)?);
    process::wait_ready(inst, "noida-db", &log_path, START_TIMEOUT, ready)
}
