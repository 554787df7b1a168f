//! A minimal HTTP/1.1 client for the end-to-end tests (the admin API, `cdc registry serve`).

use std::io::{Read, Write};
use std::time::Duration;

use serde_json::Value as Json;

/// A request to `addr` (Connection: close), with extra header lines (each ending in
/// `\r\n`); returns the status and the body (JSON when it parses).
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&Json>,
    headers: &str,
) -> (u16, Json) {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).expect("read response");
    let text = String::from_utf8(resp).expect("utf-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("HTTP response");
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    let json = serde_json::from_str(body).unwrap_or(Json::String(body.to_string()));
    (status, json)
}
