//! Throwaway Typesense servers (0.24.1, from PyPI through `tests/fetch-typesense.sh`):
//! loopback only, API and peering ports the kernel handed out, the data directory inside
//! the instance directory (`<root>/cdc-harness-<owner>-typesense<n>/`, which also holds
//! `typesense.log`). Typesense runs as the harness's own user (root is fine for it).
//!
//! The binary is `$CDC_TEST_TYPESENSE_BIN`, else the fetch script's cache
//! (`$CDC_TEST_CACHE/typesense/…`, default `/var/cache/cdc-test/typesense/…`), else the
//! script is run once per process to fetch it. When that fails, [`typesense_bin`] says
//! why and the tests skip with that message.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{anyhow, bail, Result};

use crate::process::{self, Instance};

const START_TIMEOUT: Duration = Duration::from_secs(60);
const PORT_ATTEMPTS: usize = 5;
/// The API key of every test server.
pub const TYPESENSE_API_KEY: &str = "cdc-test-key";

/// A binary fetched by one of the `tests/fetch-*.sh` scripts: `$env_var`, else the
/// script's cache path `<cache>/<rel>`, else what the script prints (run at most once per
/// process; its failure is remembered).
pub(crate) fn fetched_binary(
    env_var: &str,
    rel: &str,
    script: &str,
    once: &'static OnceLock<std::result::Result<PathBuf, String>>,
) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(env_var).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!("${env_var} = {} is not a file", p.display());
    }
    let cache = match std::env::var_os("CDC_TEST_CACHE").filter(|p| !p.is_empty()) {
        Some(c) => PathBuf::from(c),
        None => PathBuf::from("/var/cache/cdc-test"),
    };
    let cached = cache.join(rel);
    if cached.is_file() {
        return Ok(cached);
    }
    once.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
        let out = Command::new("bash")
            .arg(&script)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running {}: {e}", script.display()))?;
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || path.is_empty() {
            return Err(format!(
                "{} failed ({}): {}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(PathBuf::from(path))
    })
    .clone()
    .map_err(|e| anyhow!("{e} (or set ${env_var})"))
}

/// The Typesense server binary, fetching it if needed.
pub fn typesense_bin() -> Result<PathBuf> {
    static ONCE: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    fetched_binary(
        "CDC_TEST_TYPESENSE_BIN",
        "typesense/typesense-server-0.24.1",
        "fetch-typesense.sh",
        &ONCE,
    )
}

/// A GET of `path` on `127.0.0.1:port` (no key): the status and body.
pub(crate) fn get(port: u16, path: &str) -> Option<(u16, String)> {
    search_http(port, "GET", path, &[], None).ok()
}

/// A request to a search engine on `127.0.0.1:port` (`Connection: close`, JSON body),
/// with extra headers; the status and the body (chunked transfer decoded). For tests
/// reading back what a sink wrote.
pub fn search_http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or("");
    req.push_str(&format!(
        "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ));
    s.write_all(req.as_bytes())?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)?;
    let text = String::from_utf8_lossy(&resp).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("not an HTTP response: {text:?}"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow!("no status in {head:?}"))?;
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, body))
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].strip_prefix("\r\n").unwrap_or(&after[n..]);
    }
    out
}

/// A running throwaway Typesense. Dropping it stops the server and deletes its directory.
pub struct TypesenseServer {
    inst: Arc<Instance>,
    bin: PathBuf,
    port: u16,
    peering: u16,
}

/// Starts `bin` in `inst` on `port` / `peering` with the instance's data directory; false
/// when it exited before it was healthy (a port clash).
fn spawn_server(inst: &Instance, bin: &Path, port: u16, peering: u16) -> Result<bool> {
    let dir = inst.dir().to_path_buf();
    let data = dir.join("data");
    fs::create_dir_all(&data)?;
    let log_path = dir.join("typesense.log");
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)?;
    let mut cmd = Command::new(bin);
    cmd.current_dir(&dir)
        .arg("--data-dir")
        .arg(&data)
        .args(["--api-key", TYPESENSE_API_KEY])
        .args(["--api-address", "127.0.0.1"])
        .args(["--api-port", &port.to_string()])
        .args(["--peering-address", "127.0.0.1"])
        .args(["--peering-port", &peering.to_string()])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    inst.set_child(process::spawn(cmd)?);
    // Healthy only once it is the leader of its one-node cluster.
    process::wait_ready(
        inst,
        "typesense-server",
        &log_path,
        START_TIMEOUT,
        || matches!(get(port, "/health"), Some((200, b)) if b.contains("true")),
    )
}

impl TypesenseServer {
    /// Starts a fresh server (a second or two: it elects itself leader first).
    pub fn start() -> Result<TypesenseServer> {
        let bin = typesense_bin()?;
        let inst = Instance::create("typesense", None, libc::SIGTERM)?;
        for _ in 0..PORT_ATTEMPTS {
            let port = process::free_port()?;
            let peering = process::free_port()?;
            if spawn_server(&inst, &bin, port, peering)? {
                return Ok(TypesenseServer {
                    inst,
                    bin,
                    port,
                    peering,
                });
            }
        }
        let _ = inst.shutdown();
        bail!("Typesense: port clash {PORT_ATTEMPTS} times in a row")
    }

    /// Stops the server (SIGTERM: it writes its state to its data directory) and keeps
    /// its directory, for [`TypesenseServer::start_again`].
    pub fn stop_for_now(&self) -> Result<()> {
        self.inst
            .stop_process(Some(libc::SIGTERM), Duration::from_secs(60))
    }

    /// Starts the stopped server again on its ports, from its data directory; returns
    /// once it is healthy (it replays its state first).
    pub fn start_again(&self) -> Result<()> {
        if !spawn_server(&self.inst, &self.bin, self.port, self.peering)? {
            bail!("Typesense restart: port {} was taken meanwhile", self.port);
        }
        Ok(())
    }

    pub fn port(&self) -> u16 {
        self.port
    }
    /// `http://127.0.0.1:port`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
    pub fn api_key(&self) -> &'static str {
        TYPESENSE_API_KEY
    }
    pub fn dir(&self) -> &Path {
        self.inst.dir()
    }
    pub fn log_path(&self) -> PathBuf {
        self.inst.dir().join("typesense.log")
    }

    /// Stops the server and deletes its directory, reporting errors.
    pub fn stop(self) -> Result<()> {
        self.inst.shutdown()
    }
}

impl Drop for TypesenseServer {
    fn drop(&mut self) {
        let _ = self.inst.shutdown();
    }
}
