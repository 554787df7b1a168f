//! A small RESP2 client over a tokio `TcpStream`: connect (AUTH, SELECT), and send a
//! pipeline of commands, reading one reply per command.
//!
//! Why our own and not the `redis` crate: the sink needs four things only (pipelines of
//! EVALSHA, SCRIPT LOAD, HSCAN, AUTH/SELECT), but it needs them exactly: every reply of a
//! pipeline in order with error replies as values (one refused call must not hide the
//! others' outcome), its own classification of failures into transient and definite, and
//! a bound on each round trip. That is ~250 lines here against a large dependency whose
//! connection manager retries on its own.
//!
//! Invariants: a [`Conn`] that returned an I/O or protocol error is not used again (the
//! caller drops it and reconnects), so replies never get out of step with commands; the
//! writing and the reading of a pipeline run concurrently, so a pipeline larger than the
//! socket buffers cannot deadlock; every round trip is bounded by the connection's
//! timeout.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use super::config::Address;
use crate::SinkError;

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Status(String),
    /// `-ERR …`, `-WRONGTYPE …`: the whole line after the `-`.
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Reply::Bulk(Some(b)) => Some(b),
            Reply::Status(s) => Some(s.as_bytes()),
            _ => None,
        }
    }
}

/// One command, encoded as a RESP array of bulk strings.
#[derive(Default)]
pub struct Cmd {
    body: Vec<u8>,
    args: usize,
}

impl Cmd {
    pub fn new(name: &str) -> Cmd {
        let mut c = Cmd::default();
        c.arg(name.as_bytes());
        c
    }

    /// A command whose arguments will take about `bytes` (no reallocation while built).
    pub fn with_capacity(name: &str, bytes: usize) -> Cmd {
        let mut c = Cmd {
            body: Vec::with_capacity(bytes + name.len() + 16),
            args: 0,
        };
        c.arg(name.as_bytes());
        c
    }

    pub fn arg(&mut self, a: &[u8]) -> &mut Cmd {
        self.body.push(b'$');
        self.body.extend_from_slice(itoa(a.len() as u64).as_bytes());
        self.body.extend_from_slice(b"\r\n");
        self.body.extend_from_slice(a);
        self.body.extend_from_slice(b"\r\n");
        self.args += 1;
        self
    }

    pub fn arg_u64(&mut self, n: u64) -> &mut Cmd {
        self.arg(itoa(n).as_bytes())
    }

    /// Appends `other`'s arguments.
    pub fn append(&mut self, other: &Cmd) -> &mut Cmd {
        self.body.extend_from_slice(&other.body);
        self.args += other.args;
        self
    }

    /// Bytes of arguments so far (to bound a command's size).
    pub fn len(&self) -> usize {
        self.body.len()
    }

    /// Arguments so far, the command's name included.
    pub fn args(&self) -> usize {
        self.args
    }

    pub fn is_empty(&self) -> bool {
        self.args == 0
    }

    fn write_to(&self, out: &mut Vec<u8>) {
        self.write_header(out);
        out.extend_from_slice(&self.body);
    }

    fn write_header(&self, out: &mut Vec<u8>) {
        out.push(b'*');
        out.extend_from_slice(itoa(self.args as u64).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// `n` in decimal, without allocating (every argument's length is one).
fn itoa(n: u64) -> Digits {
    let mut d = Digits {
        buf: [0; 20],
        start: 20,
    };
    let mut n = n;
    loop {
        d.start -= 1;
        d.buf[d.start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return d;
        }
    }
}

struct Digits {
    buf: [u8; 20],
    start: usize,
}

impl Digits {
    fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

/// Why a round trip failed: the connection is then unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    #[error("protocol error: {0}")]
    Protocol(String),
}

impl ConnError {
    /// Every connection-level failure is worth a retry on a new connection.
    pub fn into_sink_error(self, addr: &Address) -> SinkError {
        SinkError::transient(
            format!("talking to Redis at {}:{}", addr.host, addr.port),
            self.to_string(),
        )
        .caused_by(self)
    }
}

/// An error reply that is about the server's state (restarting, loading, failing over,
/// out of memory), not about the command: retried.
pub fn is_transient_reply(e: &str) -> bool {
    const TRANSIENT: &[&str] = &[
        "LOADING",
        "BUSY",
        "MASTERDOWN",
        "READONLY",
        "OOM",
        "TRYAGAIN",
        "CLUSTERDOWN",
        "NOREPLICAS",
        "MISCONF",
        "UNBLOCKED",
    ];
    let code = e.split(' ').next().unwrap_or("");
    TRANSIENT.contains(&code)
}

/// Commands with at least this many bytes of arguments are written from their own buffer
/// instead of being copied into the pipeline's.
const DIRECT: usize = 32 << 10;

/// A connection to one Redis.
pub struct Conn {
    reader: Replies,
    writer: OwnedWriteHalf,
    timeout: Duration,
    out: Vec<u8>,
}

impl Conn {
    /// Connects, authenticates and selects the database. A server that cannot be reached,
    /// or that is loading its data, is transient; a refused password or database is
    /// definite.
    pub async fn connect(addr: &Address, timeout: Duration) -> Result<Conn, SinkError> {
        let what = || format!("connecting to Redis at {}:{}", addr.host, addr.port);
        let stream =
            tokio::time::timeout(timeout, TcpStream::connect((addr.host.as_str(), addr.port)))
                .await
                .map_err(|_| SinkError::transient(what(), format!("no answer within {timeout:?}")))?
                .map_err(|e| SinkError::transient(what(), e.to_string()).caused_by(e))?;
        let _ = stream.set_nodelay(true);
        let (r, w) = stream.into_split();
        let mut conn = Conn {
            reader: Replies {
                half: r,
                buf: Vec::with_capacity(64 << 10),
                start: 0,
            },
            writer: w,
            timeout,
            out: Vec::new(),
        };
        let mut cmds = Vec::new();
        let mut labels = Vec::new();
        if let Some(p) = &addr.password {
            labels.push("auth");
            let mut c = Cmd::new("AUTH");
            if let Some(u) = &addr.user {
                c.arg(u.as_bytes());
            }
            c.arg(p.as_bytes());
            cmds.push(c);
        }
        if addr.db != 0 {
            labels.push("select");
            let mut c = Cmd::new("SELECT");
            c.arg_u64(addr.db as u64);
            cmds.push(c);
        }
        // PING last: a server still loading its data set answers -LOADING here.
        cmds.push(Cmd::new("PING"));
        labels.push("ping");
        let replies = conn
            .pipeline(&cmds)
            .await
            .map_err(|e| e.into_sink_error(addr))?;
        for (i, r) in replies.iter().enumerate() {
            let Reply::Error(e) = r else { continue };
            if is_transient_reply(e) {
                return Err(SinkError::transient(what(), e.clone()));
            }
            let label = labels.get(i).copied().unwrap_or("");
            let fix = if label == "auth" || e.starts_with("NOAUTH") || e.starts_with("WRONGPASS") {
                "give the sink the right user and password (url, password or password_file)"
            } else if label == "select" {
                "use a database number the server has (url's /db)"
            } else {
                "check the Redis server's configuration"
            };
            return Err(SinkError::definite(what(), e.clone(), fix));
        }
        Ok(conn)
    }

    /// Sends `cmds` in one pipeline and returns their replies, in order. Error replies are
    /// values; an `Err` means the connection failed and must be dropped.
    pub async fn pipeline(&mut self, cmds: &[Cmd]) -> Result<Vec<Reply>, ConnError> {
        let timeout = self.timeout;
        let Conn {
            reader,
            writer,
            out,
            ..
        } = self;
        let read = async {
            let mut replies = Vec::with_capacity(cmds.len());
            for _ in 0..cmds.len() {
                replies.push(reader.next().await?);
            }
            Ok::<Vec<Reply>, ConnError>(replies)
        };
        let both = async { tokio::try_join!(write_cmds(writer, out, cmds), read).map(|((), r)| r) };
        match tokio::time::timeout(timeout, both).await {
            Ok(r) => r,
            Err(_) => Err(ConnError::Timeout(timeout)),
        }
    }

    /// Sends `cmds` without reading their replies: read them later with [`Conn::recv_n`],
    /// in order, before or after sending more. (Redis buffers the replies of a client that
    /// is not reading, so this cannot deadlock.)
    pub async fn send_all(&mut self, cmds: &[Cmd]) -> Result<(), ConnError> {
        let Conn { writer, out, .. } = self;
        match tokio::time::timeout(self.timeout, write_cmds(writer, out, cmds)).await {
            Ok(r) => r,
            Err(_) => Err(ConnError::Timeout(self.timeout)),
        }
    }

    /// The replies to the `n` oldest commands sent and not yet answered.
    pub async fn recv_n(&mut self, n: usize) -> Result<Vec<Reply>, ConnError> {
        let reader = &mut self.reader;
        let read = async {
            let mut replies = Vec::with_capacity(n);
            for _ in 0..n {
                replies.push(reader.next().await?);
            }
            Ok::<Vec<Reply>, ConnError>(replies)
        };
        match tokio::time::timeout(self.timeout, read).await {
            Ok(r) => r,
            Err(_) => Err(ConnError::Timeout(self.timeout)),
        }
    }

    /// One command.
    pub async fn call(&mut self, cmd: Cmd) -> Result<Reply, ConnError> {
        let mut r = self.pipeline(std::slice::from_ref(&cmd)).await?;
        r.pop()
            .ok_or_else(|| ConnError::Protocol("no reply".into()))
    }
}

/// Writes `cmds` in order: small ones gathered in `out`, a large one (a chunk's MSET)
/// from its own buffer, not copied.
async fn write_cmds(
    writer: &mut OwnedWriteHalf,
    out: &mut Vec<u8>,
    cmds: &[Cmd],
) -> Result<(), ConnError> {
    out.clear();
    for c in cmds {
        if c.body.len() < DIRECT {
            c.write_to(out);
        } else {
            c.write_header(out);
            writer.write_all(out).await?;
            out.clear();
            writer.write_all(&c.body).await?;
        }
    }
    writer.write_all(out).await?;
    writer.flush().await?;
    Ok(())
}

/// The read side: bytes as they arrive, parsed into replies from a buffer (no allocation
/// but the replies' own; a reply split over reads is parsed again once it is whole).
struct Replies {
    half: OwnedReadHalf,
    buf: Vec<u8>,
    /// `buf[..start]` is parsed already.
    start: usize,
}

impl Replies {
    /// The next reply.
    async fn next(&mut self) -> Result<Reply, ConnError> {
        loop {
            // Measured first, built once whole: a long reply arriving in many reads is
            // not built (and dropped) once per read.
            if reply_len(&self.buf[self.start..])?.is_some() {
                if let Some((reply, used)) = parse_reply(&self.buf[self.start..])? {
                    self.start += used;
                    return Ok(reply);
                }
            }
            // Keep the unparsed tail, at the front, and read more after it.
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            let want = (self.buf.len()).max(64 << 10);
            self.buf.reserve(want);
            let n = self.half.read_buf(&mut self.buf).await?;
            if n == 0 {
                return Err(ConnError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                )));
            }
        }
    }
}

fn parse_int(b: &[u8]) -> Result<i64, ConnError> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ConnError::Protocol("not an integer".into()))
}

/// A CRLF-ended line at the start of `b`: its text and the bytes it takes.
fn line(b: &[u8]) -> Result<Option<(&[u8], usize)>, ConnError> {
    let Some(nl) = memchr(b'\n', b) else {
        return Ok(None);
    };
    if nl == 0 || b[nl - 1] != b'\r' {
        return Err(ConnError::Protocol("a line without CRLF".into()));
    }
    Ok(Some((&b[..nl - 1], nl + 1)))
}

fn memchr(x: u8, b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == x)
}

/// The bytes the reply at the start of `b` takes, `None` while it is incomplete; builds
/// nothing.
fn reply_len(b: &[u8]) -> Result<Option<usize>, ConnError> {
    let Some((l, used)) = line(b)? else {
        return Ok(None);
    };
    let (&kind, rest) = l
        .split_first()
        .ok_or_else(|| ConnError::Protocol("an empty line".into()))?;
    match kind {
        b'+' | b'-' | b':' => Ok(Some(used)),
        b'$' => {
            let n = parse_int(rest)?;
            if n < 0 {
                return Ok(Some(used));
            }
            let end = used + n as usize + 2;
            Ok((b.len() >= end).then_some(end))
        }
        b'*' => {
            let n = parse_int(rest)?;
            let mut used = used;
            for _ in 0..n.max(0) {
                let Some(u) = reply_len(&b[used..])? else {
                    return Ok(None);
                };
                used += u;
            }
            Ok(Some(used))
        }
        other => Err(ConnError::Protocol(format!(
            "unknown reply type {:?}",
            other as char
        ))),
    }
}

/// One reply at the start of `b` and the bytes it takes; `None` while it is incomplete.
fn parse_reply(b: &[u8]) -> Result<Option<(Reply, usize)>, ConnError> {
    let Some((l, mut used)) = line(b)? else {
        return Ok(None);
    };
    let (&kind, rest) = l
        .split_first()
        .ok_or_else(|| ConnError::Protocol("an empty line".into()))?;
    let reply = match kind {
        b'+' => Reply::Status(String::from_utf8_lossy(rest).into_owned()),
        b'-' => Reply::Error(String::from_utf8_lossy(rest).into_owned()),
        b':' => Reply::Int(parse_int(rest)?),
        b'$' => {
            let n = parse_int(rest)?;
            if n < 0 {
                Reply::Bulk(None)
            } else {
                let n = n as usize;
                if b.len() < used + n + 2 {
                    return Ok(None);
                }
                if &b[used + n..used + n + 2] != b"\r\n" {
                    return Err(ConnError::Protocol("a bulk string without CRLF".into()));
                }
                let v = b[used..used + n].to_vec();
                used += n + 2;
                Reply::Bulk(Some(v))
            }
        }
        b'*' => {
            let n = parse_int(rest)?;
            if n < 0 {
                Reply::Array(None)
            } else {
                let mut items = Vec::with_capacity((n as usize).min(1 << 16));
                for _ in 0..n {
                    let Some((item, u)) = parse_reply(&b[used..])? else {
                        return Ok(None);
                    };
                    items.push(item);
                    used += u;
                }
                Reply::Array(Some(items))
            }
        }
        other => {
            return Err(ConnError::Protocol(format!(
                "unknown reply type {:?}",
                other as char
            )))
        }
    };
    Ok(Some((reply, used)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_commands_as_bulk_arrays() {
        let mut c = Cmd::new("SET");
        c.arg(b"k").arg(b"").arg_u64(12);
        let mut out = Vec::new();
        c.write_to(&mut out);
        assert_eq!(out, b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n$2\r\n12\r\n");
    }

    #[test]
    fn parses_replies_whole_or_not_yet() {
        let all = b"+OK\r\n*3\r\n$3\r\nabc\r\n$-1\r\n:-7\r\n*-1\r\n-ERR no\r\n";
        let mut at = 0;
        let mut got = Vec::new();
        while at < all.len() {
            let (r, n) = parse_reply(&all[at..]).unwrap().unwrap();
            got.push(r);
            at += n;
        }
        assert_eq!(
            got,
            vec![
                Reply::Status("OK".into()),
                Reply::Array(Some(vec![
                    Reply::Bulk(Some(b"abc".to_vec())),
                    Reply::Bulk(None),
                    Reply::Int(-7)
                ])),
                Reply::Array(None),
                Reply::Error("ERR no".into()),
            ]
        );
        // Every cut before the end of a reply is "not yet", never an error.
        let first_two = 5 + 23;
        for cut in 5..first_two {
            assert!(parse_reply(&all[5..cut]).unwrap().is_none(), "{cut}");
            assert!(reply_len(&all[5..cut]).unwrap().is_none(), "{cut}");
        }
        assert_eq!(reply_len(&all[5..]).unwrap(), Some(first_two - 5));
        assert!(parse_reply(b"$3\r\nabcXY").is_err());
        assert!(parse_reply(b"?\r\n").is_err());
        assert_eq!(itoa(0).as_bytes(), b"0");
        assert_eq!(itoa(u64::MAX).as_bytes(), u64::MAX.to_string().as_bytes());
    }

    #[test]
    fn classifies_error_replies() {
        assert!(is_transient_reply(
            "LOADING Redis is loading the dataset in memory"
        ));
        assert!(is_transient_reply("OOM command not allowed"));
        assert!(!is_transient_reply("WRONGTYPE Operation against a key"));
        assert!(!is_transient_reply("NOSCRIPT No matching script"));
    }
}
