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

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
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
        out.push(b'*');
        out.extend_from_slice(itoa(self.args as u64).as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
    }
}

fn itoa(n: u64) -> String {
    n.to_string()
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

/// A connection to one Redis.
pub struct Conn {
    reader: BufReader<OwnedReadHalf>,
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
            reader: BufReader::with_capacity(64 << 10, r),
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
        self.out.clear();
        for c in cmds {
            c.write_to(&mut self.out);
        }
        let timeout = self.timeout;
        let Conn {
            reader,
            writer,
            out,
            ..
        } = self;
        let write = async {
            writer.write_all(out).await?;
            writer.flush().await?;
            Ok::<(), ConnError>(())
        };
        let read = async {
            let mut replies = Vec::with_capacity(cmds.len());
            for _ in 0..cmds.len() {
                replies.push(read_reply(reader).await?);
            }
            Ok::<Vec<Reply>, ConnError>(replies)
        };
        let both = async { tokio::try_join!(write, read).map(|((), r)| r) };
        match tokio::time::timeout(timeout, both).await {
            Ok(r) => r,
            Err(_) => Err(ConnError::Timeout(timeout)),
        }
    }

    /// Sends one command without waiting for its reply (read it with [`Conn::recv`]).
    /// Redis buffers the replies, so many may be sent before the first is read.
    pub async fn send(&mut self, cmd: &Cmd) -> Result<(), ConnError> {
        self.out.clear();
        cmd.write_to(&mut self.out);
        let Conn { writer, out, .. } = self;
        match tokio::time::timeout(self.timeout, writer.write_all(out)).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(ConnError::Timeout(self.timeout)),
        }
    }

    /// The reply to the oldest command sent and not yet answered.
    pub async fn recv(&mut self) -> Result<Reply, ConnError> {
        match tokio::time::timeout(self.timeout, read_reply(&mut self.reader)).await {
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

async fn read_line(r: &mut BufReader<OwnedReadHalf>) -> Result<Vec<u8>, ConnError> {
    let mut line = Vec::new();
    let n = r.read_until(b'\n', &mut line).await?;
    if n == 0 {
        return Err(ConnError::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the server closed the connection",
        )));
    }
    if !line.ends_with(b"\r\n") {
        return Err(ConnError::Protocol("a line without CRLF".into()));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn parse_int(b: &[u8]) -> Result<i64, ConnError> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ConnError::Protocol("not an integer".into()))
}

/// Reads one reply; arrays iteratively-recursive through a boxed future.
fn read_reply<'a>(
    r: &'a mut BufReader<OwnedReadHalf>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Reply, ConnError>> + Send + 'a>> {
    Box::pin(async move {
        let line = read_line(r).await?;
        let (&kind, rest) = line
            .split_first()
            .ok_or_else(|| ConnError::Protocol("an empty line".into()))?;
        Ok(match kind {
            b'+' => Reply::Status(String::from_utf8_lossy(rest).into_owned()),
            b'-' => Reply::Error(String::from_utf8_lossy(rest).into_owned()),
            b':' => Reply::Int(parse_int(rest)?),
            b'$' => {
                let n = parse_int(rest)?;
                if n < 0 {
                    Reply::Bulk(None)
                } else {
                    let mut buf = vec![0u8; n as usize + 2];
                    r.read_exact(&mut buf).await?;
                    buf.truncate(n as usize);
                    Reply::Bulk(Some(buf))
                }
            }
            b'*' => {
                let n = parse_int(rest)?;
                if n < 0 {
                    Reply::Array(None)
                } else {
                    let mut items = Vec::with_capacity(n.min(1 << 16) as usize);
                    for _ in 0..n {
                        items.push(read_reply(r).await?);
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
        })
    })
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
    fn classifies_error_replies() {
        assert!(is_transient_reply(
            "LOADING Redis is loading the dataset in memory"
        ));
        assert!(is_transient_reply("OOM command not allowed"));
        assert!(!is_transient_reply("WRONGTYPE Operation against a key"));
        assert!(!is_transient_reply("NOSCRIPT No matching script"));
    }
}
