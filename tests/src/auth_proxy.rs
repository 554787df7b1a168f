//! A basic-authentication reverse proxy in front of a test server: what deployments put
//! before an Elasticsearch cluster (nginx with `auth_basic`, or the cluster's own
//! security), so that the Elasticsearch sink's `username` / `password` / `password_file`
//! can be tested through `cdc run` against the noida-db emulator, which has no
//! authentication of its own.
//!
//! It owns one loopback port the kernel handed out and the threads that serve it. A
//! request without the expected `Authorization: Basic …` is answered as Elasticsearch
//! answers it — 401, `WWW-Authenticate: Basic realm="security" charset="UTF-8"` and its
//! `security_exception` body — and never reaches the server; any other is forwarded
//! unchanged except for its hop-by-hop `Connection` header: the proxy speaks one request
//! per connection (`Connection: close` both ways), so it never has to find where a
//! response ends and can pass the server's bytes through as they are.
//!
//! Every request is recorded ([`ProxiedRequest`]): method, path, whether it was let
//! through, the status answered, and for a `_bulk` request how many actions (documents)
//! its body carried — what a test of `batch_documents` counts.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{json, Value};

/// Longest a client or the server may take to send its part.
const IO_TIMEOUT: Duration = Duration::from_secs(60);
/// Elasticsearch's challenge.
const CHALLENGE: &str = r#"Basic realm="security" charset="UTF-8""#;

/// One request the proxy answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxiedRequest {
    pub method: String,
    /// Without the query.
    pub path: String,
    /// It carried the expected credentials, so it was forwarded.
    pub authorized: bool,
    /// The status the client got (the proxy's 401, else the server's).
    pub status: u16,
    /// For a `_bulk` request: its actions (`index`, `create`, `update`, `delete`), one
    /// document each.
    pub bulk_actions: Option<usize>,
}

/// A running proxy; dropping it stops it.
pub struct BasicAuthProxy {
    port: u16,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<ProxiedRequest>>>,
    accept: Option<JoinHandle<()>>,
}

impl BasicAuthProxy {
    /// A proxy to `127.0.0.1:upstream_port` that lets through the requests that
    /// authenticate as `username` / `password`.
    pub fn start(upstream_port: u16, username: &str, password: &str) -> Result<BasicAuthProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the proxy's port")?;
        let port = listener.local_addr()?.port();
        let expected = format!("Basic {}", BASE64.encode(format!("{username}:{password}")));
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let (stop, seen) = (stop.clone(), seen.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let (seen, expected) = (seen.clone(), expected.clone());
                    std::thread::spawn(move || {
                        // A client that went away mid-request is its own business.
                        if let Ok(r) = serve(conn, upstream_port, &expected) {
                            seen.lock().unwrap().push(r);
                        }
                    });
                }
            })
        };
        Ok(BasicAuthProxy {
            port,
            stop,
            seen,
            accept: Some(accept),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:port`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request answered so far, in the order their answers were sent.
    pub fn requests(&self) -> Vec<ProxiedRequest> {
        self.seen.lock().unwrap().clone()
    }

    /// The actions of each `_bulk` request that was let through, in order.
    pub fn bulk_actions(&self) -> Vec<usize> {
        self.requests()
            .iter()
            .filter(|r| r.authorized)
            .filter_map(|r| r.bulk_actions)
            .collect()
    }
}

impl Drop for BasicAuthProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// Answers the one request of `client`.
fn serve(client: TcpStream, upstream_port: u16, expected: &str) -> Result<ProxiedRequest> {
    client.set_read_timeout(Some(IO_TIMEOUT))?;
    let mut reader = BufReader::new(client.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut parts = request_line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        bail!("not an HTTP request: {request_line:?}");
    };
    let (method, target) = (method.to_string(), target.to_string());
    let path = target.split('?').next().unwrap_or_default().to_string();
    let mut headers: Vec<String> = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            bail!("the request's head ended early");
        }
        if line == "\r\n" || line == "\n" {
            break;
        }
        headers.push(line.trim_end().to_string());
    }
    let header = |name: &str| {
        headers.iter().find_map(|h| {
            let (k, v) = h.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    };
    if header("transfer-encoding").is_some() {
        // The sink's client sends every body with its length; nothing here needs more.
        bail!("chunked request bodies are not supported");
    }
    let length: usize = header("content-length").map_or(Ok(0), str::parse)?;
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let bulk_actions = (path.rsplit('/').next() == Some("_bulk")).then(|| count_actions(&body));
    let mut client = client;

    let authorization = header("authorization");
    if authorization != Some(expected) {
        let reason = match authorization.and_then(basic_user) {
            None => format!("missing authentication credentials for REST request [{target}]"),
            Some(user) => {
                format!("unable to authenticate user [{user}] for REST request [{target}]")
            }
        };
        let error = json!({"type": "security_exception", "reason": reason,
            "header": {"WWW-Authenticate": CHALLENGE}});
        let body = json!({"error": {"root_cause": [error.clone()], "type": error["type"],
            "reason": error["reason"], "header": error["header"]}, "status": 401})
        .to_string();
        write!(
            client,
            "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: {CHALLENGE}\r\nContent-Type: application/json; charset=UTF-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )?;
        let _ = client.shutdown(Shutdown::Both);
        return Ok(ProxiedRequest {
            method,
            path,
            authorized: false,
            status: 401,
            bulk_actions,
        });
    }

    let mut upstream = TcpStream::connect(("127.0.0.1", upstream_port))?;
    upstream.set_read_timeout(Some(IO_TIMEOUT))?;
    let mut head = format!("{method} {target} HTTP/1.1\r\n");
    for h in headers.iter().filter(|h| {
        !h.split(':')
            .next()
            .unwrap_or_default()
            .trim()
            .eq_ignore_ascii_case("connection")
    }) {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("Connection: close\r\n\r\n");
    upstream.write_all(head.as_bytes())?;
    upstream.write_all(&body)?;
    // `Connection: close`: the answer ends where the server closes.
    let mut answer = Vec::new();
    upstream.read_to_end(&mut answer)?;
    let status = std::str::from_utf8(&answer[..answer.len().min(64)])
        .ok()
        .and_then(|s| s.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    client.write_all(&answer)?;
    let _ = client.shutdown(Shutdown::Both);
    Ok(ProxiedRequest {
        method,
        path,
        authorized: true,
        status,
        bulk_actions,
    })
}

/// The user name of a `Basic` authorization header.
fn basic_user(authorization: &str) -> Option<String> {
    let encoded = authorization.strip_prefix("Basic ")?;
    let decoded = String::from_utf8(BASE64.decode(encoded.trim()).ok()?).ok()?;
    Some(decoded.split(':').next()?.to_string())
}

/// The actions of a `_bulk` body (NDJSON: an action line, then its document's line except
/// for `delete`).
fn count_actions(body: &[u8]) -> usize {
    let mut lines = body
        .split(|b| *b == b'\n')
        .filter(|l| !l.trim_ascii().is_empty());
    let mut n = 0;
    while let Some(line) = lines.next() {
        n += 1;
        let action: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
        if action.get("delete").is_none() {
            lines.next();
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_actions_and_users() {
        let body = b"{\"index\":{\"_index\":\"a\",\"_id\":\"1\"}}\n{\"delete\":1}\n{\"delete\":{\"_index\":\"a\",\"_id\":\"2\"}}\n{\"index\":{\"_id\":\"3\"}}\n{\"x\":1}\n";
        assert_eq!(count_actions(body), 3);
        assert_eq!(count_actions(b""), 0);
        assert_eq!(basic_user("Basic Y2RjOnB3").as_deref(), Some("cdc"));
        assert_eq!(basic_user("Bearer x"), None);
    }
}
