//! The streaming-replication connection: start-up with `replication=database`,
//! authentication (trust, cleartext, md5, SCRAM-SHA-256), TLS, replication commands
//! (`IDENTIFY_SYSTEM`, `CREATE_REPLICATION_SLOT`, `DROP_REPLICATION_SLOT`, simple
//! queries), and `START_REPLICATION … LOGICAL` with the CopyBoth stream.
//!
//! tokio-postgres has no CopyBoth support, so this speaks the protocol itself on top of
//! `postgres-protocol` (frontend encoders, SCRAM, md5) over tokio, TLS via rustls.
//!
//! # Session settings
//!
//! pgoutput renders column values with the type output functions *of the walsender
//! process*, i.e. under the GUCs of this connection. The start-up packet therefore sets
//! `options=-c TimeZone=UTC -c DateStyle=ISO -c IntervalStyle=iso_8601
//! -c extra_float_digits=3 -c bytea_output=hex` and `client_encoding=UTF8`, and the value
//! parser in [`super::decode::text`] relies on exactly these formats:
//! `timestamptz` arrives as `2024-01-01 12:00:00+00`, floats in their shortest exact
//! form, intervals as ISO 8601 durations with a sign per field (`P-1Y2M3DT-4H5M6.5S`),
//! which is unambiguous and easy to parse exactly.
//!
//! Opening the connection (TLS, start-up, authentication) is in `startup`; the
//! classification of failures in `error`. The streaming itself (CopyBoth, feedback,
//! backpressure, idle slot care) is the business of the task
//! [`ReplicationConnection::start`] hands the socket to: [`super::stream_task`].
//!
//! Invariants: a command that succeeds or fails with a server error has read the answer
//! up to ReadyForQuery, so the connection is ready for the next one; server errors are
//! classified here ([`ReplicationError`]: transient or not, with the operator's fix),
//! for the commands and for the stream alike.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use cdc_schemas::Lsn;
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256, SCRAM_SHA_256};
use postgres_protocol::message::frontend;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::conn::{PgConnectError, PgConnectErrorKind, PgEndpoint};
use super::protocol::{parse_frame, Frame, PgServerError, ProtocolError};
use super::stream_task::StreamSetup;
use crate::tls::{client_config, TlsMode};

// The streaming task moved to `stream_task`; these paths stay for its users.
pub use super::stream_task::{
    flush_lsn_to_send, FeedbackHandle, FeedbackStatus, InFlightTracker, ReplicationStream,
};

/// The `options` start-up parameter: the output formats [`super::decode::text`] parses.
pub const SESSION_OPTIONS: &str = "-c TimeZone=UTC -c DateStyle=ISO -c IntervalStyle=iso_8601 -c extra_float_digits=3 -c bytea_output=hex";

pub(super) trait AsyncStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> AsyncStream for T {}

/// The connection's socket, plain or TLS.
pub(super) type Io = Box<dyn AsyncStream>;

mod error;
mod startup;

pub use error::ReplicationError;
pub(super) use error::{fix_for, sqlstate_is_transient};

/// Result rows of a simple query (all values in text format).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimpleQueryResult {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Option<String>>>,
    /// The CommandComplete tag, e.g. `SELECT 1`.
    pub tag: String,
}

impl SimpleQueryResult {
    /// The value of column `name` in row `row`.
    pub fn get(&self, row: usize, name: &str) -> Option<&str> {
        let i = self.columns.iter().position(|c| c == name)?;
        self.rows.get(row)?.get(i)?.as_deref()
    }
}

/// `IDENTIFY_SYSTEM`'s answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentifySystem {
    pub systemid: String,
    pub timeline: u32,
    /// Current WAL flush position.
    pub xlogpos: Lsn,
    /// The database connected to (`None` for physical replication connections).
    pub dbname: Option<String>,
}

/// What to do with the snapshot a new logical slot creates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SlotSnapshot {
    /// Export it (its name is returned); valid until the next command on this connection.
    #[default]
    Export,
    /// Do not export.
    Nothing,
    /// Use it in the current transaction (only inside a transaction on this connection).
    Use,
}

/// Options of [`ReplicationConnection::create_slot`].
#[derive(Clone, Debug, Default)]
pub struct CreateSlotOptions {
    /// Dropped automatically when this connection ends.
    pub temporary: bool,
    pub snapshot: SlotSnapshot,
    /// Decode prepared transactions at PREPARE time (Postgres 15+).
    pub two_phase: bool,
}

/// `CREATE_REPLICATION_SLOT`'s answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatedSlot {
    pub slot_name: String,
    /// Changes committing after this position will be streamed; the exported snapshot
    /// sees everything before it.
    pub consistent_point: Lsn,
    /// The exported snapshot, for `SET TRANSACTION SNAPSHOT '…'` in a REPEATABLE READ
    /// transaction on another connection, while this connection runs no other command.
    pub snapshot_name: Option<String>,
    pub output_plugin: Option<String>,
}

/// Options of [`ReplicationConnection::start`].
#[derive(Clone, Debug)]
pub struct StreamOptions {
    /// pgoutput protocol version; `None`: the highest the server supports
    /// ([`max_proto_version`]).
    pub proto_version: Option<u32>,
    /// Stream large in-progress transactions (protocol 2+, Postgres 14+).
    pub streaming: bool,
    /// Include logical decoding messages (`pg_logical_emit_message`, Postgres 14+).
    pub messages: bool,
    /// Decode prepared transactions at PREPARE time (protocol 3+, Postgres 15+).
    pub two_phase: bool,
    /// How often to send a status update; capped at a third of `wal_sender_timeout`.
    pub status_interval: Duration,
    /// Messages buffered between the socket task and the consumer.
    pub buffer: usize,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            proto_version: None,
            streaming: true,
            messages: true,
            two_phase: false,
            status_interval: Duration::from_secs(10),
            buffer: 1024,
        }
    }
}

/// The highest pgoutput protocol version a server supports: 1 (10+), 2 streaming (14+),
/// 3 two-phase (15+), 4 parallel streaming (16+).
pub fn max_proto_version(server_version_num: u32) -> u32 {
    match server_version_num {
        v if v >= 160000 => 4,
        v if v >= 150000 => 3,
        v if v >= 140000 => 2,
        _ => 1,
    }
}

/// Parses `server_version` ("15.8 (Debian 15.8-1)", "16.2", "9.6.3", "17devel") into the
/// `server_version_num` form (150008).
pub fn parse_server_version(s: &str) -> Option<u32> {
    let v = s.split_whitespace().next()?;
    let digits_prefix = |p: &str| -> Option<u32> {
        let end = p.find(|c: char| !c.is_ascii_digit()).unwrap_or(p.len());
        p[..end].parse().ok()
    };
    let mut parts = v.split('.');
    let major = digits_prefix(parts.next()?)?;
    let minor = parts.next().and_then(digits_prefix).unwrap_or(0);
    if major >= 10 {
        Some(major * 10000 + minor)
    } else {
        let patch = parts.next().and_then(digits_prefix).unwrap_or(0);
        Some(major * 10000 + minor * 100 + patch)
    }
}

/// Parses a duration GUC as `SHOW` prints it (`60s`, `500ms`, `1min`, `0`).
pub fn parse_guc_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n: u64 = s[..end].parse().ok()?;
    let ms = match s[end..].trim() {
        "" | "ms" => n,
        "s" => n * 1000,
        "min" => n * 60_000,
        "h" => n * 3_600_000,
        "d" => n * 86_400_000,
        _ => return None,
    };
    Some(Duration::from_millis(ms))
}

/// `"name"` with embedded quotes doubled.
pub fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// `'text'` with embedded quotes doubled.
pub fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A connection in replication mode (`replication=database`), ready for commands.
pub struct ReplicationConnection {
    io: Io,
    rbuf: BytesMut,
    wbuf: BytesMut,
    endpoint: PgEndpoint,
    params: HashMap<String, String>,
    server_version_num: u32,
    backend_pid: i32,
    tls: bool,
}

impl std::fmt::Debug for ReplicationConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicationConnection")
            .field("endpoint", &self.endpoint.redacted)
            .field("server_version_num", &self.server_version_num)
            .field("backend_pid", &self.backend_pid)
            .field("tls", &self.tls)
            .finish()
    }
}

impl ReplicationConnection {
    fn protocol(&self, what: &str, detail: impl std::fmt::Display) -> ReplicationError {
        ReplicationError::Protocol {
            what: what.into(),
            addr: self.endpoint.address(),
            detail: detail.to_string(),
        }
    }

    fn lost(&self, what: &str, detail: impl std::fmt::Display) -> ReplicationError {
        ReplicationError::ConnectionLost {
            what: what.into(),
            addr: self.endpoint.address(),
            detail: detail.to_string(),
        }
    }

    fn server_error(&self, what: &str, error: PgServerError) -> ReplicationError {
        ReplicationError::Server {
            what: what.into(),
            fix: fix_for(&error.code, &self.endpoint.user),
            transient: sqlstate_is_transient(&error.code),
            error: Box::new(error),
        }
    }

    async fn flush(&mut self, what: &str) -> Result<(), ReplicationError> {
        let buf = self.wbuf.split();
        let r = async {
            self.io.write_all(&buf).await?;
            self.io.flush().await
        }
        .await;
        r.map_err(|e| self.lost(what, e))
    }

    async fn read_frame(&mut self, what: &str) -> Result<Frame, ReplicationError> {
        loop {
            match parse_frame(&mut self.rbuf) {
                Ok(Some(f)) => return Ok(f),
                Ok(None) => {}
                Err(e) => return Err(self.protocol(what, e)),
            }
            let n = self
                .io
                .read_buf(&mut self.rbuf)
                .await
                .map_err(|e| self.lost(what, e))?;
            if n == 0 {
                return Err(self.lost(what, "the server closed the connection"));
            }
        }
    }

    /// The server's `server_version_num` (e.g. 150008).
    pub fn server_version_num(&self) -> u32 {
        self.server_version_num
    }

    /// A parameter the server reported (`server_version`, `TimeZone`, `DateStyle`, …).
    pub fn parameter(&self, name: &str) -> Option<&str> {
        self.params.get(name).map(String::as_str)
    }

    /// The walsender's process id (for `pg_stat_replication` / `pg_terminate_backend`).
    pub fn backend_pid(&self) -> i32 {
        self.backend_pid
    }

    /// True when the connection is encrypted.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// Runs one or more statements with the simple query protocol. Replication
    /// connections accept replication commands and (with `replication=database`) plain
    /// SQL such as `SHOW server_version` or `SELECT …`.
    pub async fn simple_query(
        &mut self,
        sql: &str,
    ) -> Result<Vec<SimpleQueryResult>, ReplicationError> {
        let what = command_name(sql);
        frontend::query(sql, &mut self.wbuf).map_err(|e| self.protocol(&what, e))?;
        self.flush(&what).await?;
        let mut results = Vec::new();
        let mut current = SimpleQueryResult::default();
        let mut error = None;
        loop {
            let f = self.read_frame(&what).await?;
            match f.tag {
                b'T' => {
                    current.columns =
                        parse_row_description(&f.body).map_err(|e| self.protocol(&what, e))?
                }
                b'D' => current
                    .rows
                    .push(parse_data_row(&f.body).map_err(|e| self.protocol(&what, e))?),
                b'C' => {
                    current.tag = cstr(&f.body);
                    results.push(std::mem::take(&mut current));
                }
                b'I' => {}
                b'E' => error = Some(PgServerError::parse(&f.body)),
                b'N' => log_notice(&f.body),
                b'S' => self.parameter_status(&f.body),
                b'Z' => break,
                b'H' | b'W' | b'G' => {
                    return Err(self.protocol(
                        &what,
                        "the command started a COPY; use start() for START_REPLICATION",
                    ))
                }
                other => {
                    return Err(
                        self.protocol(&what, format!("unexpected message {:?}", other as char))
                    )
                }
            }
        }
        match error {
            Some(e) => Err(self.server_error(&what, e)),
            None => Ok(results),
        }
    }

    /// `IDENTIFY_SYSTEM`.
    pub async fn identify_system(&mut self) -> Result<IdentifySystem, ReplicationError> {
        let r = self.simple_query("IDENTIFY_SYSTEM").await?;
        let r = r
            .first()
            .filter(|r| !r.rows.is_empty())
            .ok_or_else(|| self.protocol("IDENTIFY_SYSTEM", "no result row"))?;
        let field = |name: &str| {
            r.get(0, name)
                .ok_or_else(|| self.protocol("IDENTIFY_SYSTEM", format!("no {name} column")))
        };
        Ok(IdentifySystem {
            systemid: field("systemid")?.to_string(),
            timeline: field("timeline")?
                .parse()
                .map_err(|e| self.protocol("IDENTIFY_SYSTEM", format!("timeline: {e}")))?,
            xlogpos: field("xlogpos")?
                .parse()
                .map_err(|e| self.protocol("IDENTIFY_SYSTEM", e))?,
            dbname: r.get(0, "dbname").map(str::to_string),
        })
    }

    /// `CREATE_REPLICATION_SLOT name [TEMPORARY] LOGICAL pgoutput …`, in the syntax of the
    /// server's version (keywords up to 14, an option list from 15).
    pub async fn create_slot(
        &mut self,
        name: &str,
        opts: &CreateSlotOptions,
    ) -> Result<CreatedSlot, ReplicationError> {
        let what = format!("creating replication slot {name:?}");
        let mut sql = format!("CREATE_REPLICATION_SLOT {}", quote_ident(name));
        if opts.temporary {
            sql.push_str(" TEMPORARY");
        }
        sql.push_str(" LOGICAL pgoutput");
        if self.server_version_num >= 150000 {
            let snap = match opts.snapshot {
                SlotSnapshot::Export => "export",
                SlotSnapshot::Nothing => "nothing",
                SlotSnapshot::Use => "use",
            };
            sql.push_str(&format!(" (SNAPSHOT '{snap}'"));
            if opts.two_phase {
                sql.push_str(", TWO_PHASE true");
            }
            sql.push(')');
        } else {
            if opts.two_phase {
                return Err(ReplicationError::Unsupported {
                    what,
                    detail: format!(
                        "two-phase slots need PostgreSQL 15 or newer; the server is {}",
                        self.server_version_num
                    ),
                    fix: "turn two_phase off".into(),
                });
            }
            sql.push_str(match opts.snapshot {
                SlotSnapshot::Export => " EXPORT_SNAPSHOT",
                SlotSnapshot::Nothing => " NOEXPORT_SNAPSHOT",
                SlotSnapshot::Use => " USE_SNAPSHOT",
            });
        }
        let r = self
            .simple_query(&sql)
            .await
            .map_err(|e| rename(e, &what))?;
        let r = r
            .first()
            .filter(|r| !r.rows.is_empty())
            .ok_or_else(|| self.protocol(&what, "no result row"))?;
        Ok(CreatedSlot {
            slot_name: r.get(0, "slot_name").unwrap_or(name).to_string(),
            consistent_point: r
                .get(0, "consistent_point")
                .ok_or_else(|| self.protocol(&what, "no consistent_point"))?
                .parse()
                .map_err(|e| self.protocol(&what, e))?,
            snapshot_name: r.get(0, "snapshot_name").map(str::to_string),
            output_plugin: r.get(0, "output_plugin").map(str::to_string),
        })
    }

    /// `DROP_REPLICATION_SLOT name [WAIT]` (`wait`: if the slot is active, wait for its
    /// consumer to go away instead of failing).
    pub async fn drop_slot(&mut self, name: &str, wait: bool) -> Result<(), ReplicationError> {
        let sql = format!(
            "DROP_REPLICATION_SLOT {}{}",
            quote_ident(name),
            if wait { " WAIT" } else { "" }
        );
        self.simple_query(&sql)
            .await
            .map_err(|e| rename(e, &format!("dropping replication slot {name:?}")))?;
        Ok(())
    }

    /// `START_REPLICATION SLOT slot LOGICAL start_lsn (…)`: switches to CopyBoth and hands
    /// the connection to a background task (see [`super::stream_task`]). `durable` is how far
    /// the pipeline has made the log durable; only it (or, when idle, the server's WAL
    /// end) is ever confirmed. `start_lsn` is also the lowest position confirmed.
    ///
    /// Runs `SHOW wal_sender_timeout` first: an exported snapshot must have been imported
    /// before this is called.
    pub async fn start(
        mut self,
        slot: &str,
        start_lsn: Lsn,
        publications: &[&str],
        opts: &StreamOptions,
        durable: crate::Durable,
    ) -> Result<ReplicationStream, ReplicationError> {
        let what = format!("starting replication from slot {slot:?}");
        let max = max_proto_version(self.server_version_num);
        let proto = opts.proto_version.unwrap_or(max);
        if proto == 0 || proto > max {
            return Err(ReplicationError::Unsupported {
                what,
                detail: format!(
                    "pgoutput protocol version {proto} is not supported by server version {} (highest: {max})",
                    self.server_version_num
                ),
                fix: "leave the protocol version unset to negotiate it".into(),
            });
        }
        let timeout = self
            .simple_query("SHOW wal_sender_timeout")
            .await?
            .first()
            .and_then(|r| r.get(0, "wal_sender_timeout"))
            .and_then(parse_guc_duration)
            .filter(|d| !d.is_zero());
        let mut interval = opts.status_interval.max(Duration::from_millis(50));
        if let Some(t) = timeout {
            interval = interval.min((t / 3).max(Duration::from_millis(50)));
        }

        let pubs = publications
            .iter()
            .map(|p| quote_ident(p))
            .collect::<Vec<_>>()
            .join(",");
        let mut options = vec![
            format!("proto_version '{proto}'"),
            format!("publication_names {}", quote_literal(&pubs)),
        ];
        if opts.messages && self.server_version_num >= 140000 {
            options.push("messages 'true'".into());
        }
        if opts.streaming && proto >= 2 {
            options.push("streaming 'true'".into());
        }
        if opts.two_phase && proto >= 3 {
            options.push("two_phase 'true'".into());
        }
        let sql = format!(
            "START_REPLICATION SLOT {} LOGICAL {} ({})",
            quote_ident(slot),
            start_lsn,
            options.join(", ")
        );
        frontend::query(&sql, &mut self.wbuf).map_err(|e| self.protocol(&what, e))?;
        self.flush(&what).await?;
        loop {
            let f = self.read_frame(&what).await?;
            match f.tag {
                b'W' => break,
                b'E' => {
                    let e = PgServerError::parse(&f.body);
                    // Read up to ReadyForQuery so the error is complete; ignore failures.
                    while let Ok(f) = self.read_frame(&what).await {
                        if f.tag == b'Z' {
                            break;
                        }
                    }
                    return Err(self.server_error(&what, e));
                }
                b'N' => log_notice(&f.body),
                b'S' => self.parameter_status(&f.body),
                other => {
                    return Err(
                        self.protocol(&what, format!("unexpected message {:?}", other as char))
                    )
                }
            }
        }
        tracing::info!(
            slot,
            %start_lsn,
            proto_version = proto,
            status_interval_ms = interval.as_millis() as u64,
            "replication stream started"
        );

        Ok(ReplicationStream::spawn(StreamSetup {
            io: self.io,
            rbuf: self.rbuf,
            wbuf: self.wbuf,
            addr: self.endpoint.address(),
            durable,
            interval,
            start_lsn,
            buffer: opts.buffer,
            proto_version: proto,
            server_version_num: self.server_version_num,
        }))
    }

    /// Ends the session politely (Terminate).
    pub async fn close(mut self) {
        frontend::terminate(&mut self.wbuf);
        let _ = self.flush("closing").await;
        let _ = self.io.shutdown().await;
    }
}

fn rename(e: ReplicationError, what: &str) -> ReplicationError {
    match e {
        ReplicationError::Server {
            error,
            fix,
            transient,
            ..
        } => ReplicationError::Server {
            what: what.into(),
            error,
            fix,
            transient,
        },
        other => other,
    }
}

fn command_name(sql: &str) -> String {
    let first: String = sql.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
    format!("running {first}")
}

/// Logs a NoticeResponse.
pub(super) fn log_notice(body: &[u8]) {
    let n = PgServerError::parse(body);
    tracing::info!(severity = %n.severity, code = %n.code, "postgres notice: {}", n.message);
}

fn be_i32(b: &[u8], at: usize) -> Option<i32> {
    b.get(at..at + 4)
        .map(|s| i32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn parse_row_description(b: &[u8]) -> Result<Vec<String>, ProtocolError> {
    let err = || ProtocolError("malformed RowDescription".into());
    let n = b.get(0..2).ok_or_else(err)?;
    let n = u16::from_be_bytes([n[0], n[1]]) as usize;
    let mut at = 2;
    let mut cols = Vec::with_capacity(n);
    for _ in 0..n {
        let rest = b.get(at..).ok_or_else(err)?;
        let end = rest.iter().position(|&c| c == 0).ok_or_else(err)?;
        cols.push(String::from_utf8_lossy(&rest[..end]).into_owned());
        at += end + 1 + 18;
    }
    if at > b.len() {
        return Err(err());
    }
    Ok(cols)
}

fn parse_data_row(b: &[u8]) -> Result<Vec<Option<String>>, ProtocolError> {
    let err = || ProtocolError("malformed DataRow".into());
    let n = b.get(0..2).ok_or_else(err)?;
    let n = u16::from_be_bytes([n[0], n[1]]) as usize;
    let mut at = 2;
    let mut vals = Vec::with_capacity(n);
    for _ in 0..n {
        let len = be_i32(b, at).ok_or_else(err)?;
        at += 4;
        if len < 0 {
            vals.push(None);
        } else {
            let v = b.get(at..at + len as usize).ok_or_else(err)?;
            vals.push(Some(String::from_utf8_lossy(v).into_owned()));
            at += len as usize;
        }
    }
    Ok(vals)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_gucs() {
        assert_eq!(
            parse_server_version("15.8 (Debian 15.8-0+deb12u1)"),
            Some(150008)
        );
        assert_eq!(parse_server_version("16.2"), Some(160002));
        assert_eq!(parse_server_version("17devel"), Some(170000));
        assert_eq!(parse_server_version("9.6.3"), Some(90603));
        assert_eq!(max_proto_version(160002), 4);
        assert_eq!(max_proto_version(150008), 3);
        assert_eq!(max_proto_version(140000), 2);
        assert_eq!(max_proto_version(130010), 1);
        assert_eq!(parse_guc_duration("60s"), Some(Duration::from_secs(60)));
        assert_eq!(
            parse_guc_duration("500ms"),
            Some(Duration::from_millis(500))
        );
        assert_eq!(parse_guc_duration("1min"), Some(Duration::from_secs(60)));
        assert_eq!(parse_guc_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_guc_duration("x"), None);
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
    }

    #[test]
    fn row_parsing() {
        let mut t = vec![0, 1];
        t.extend_from_slice(b"slot_name\0");
        t.extend_from_slice(&[0; 18]);
        assert_eq!(parse_row_description(&t).unwrap(), vec!["slot_name"]);
        assert!(parse_row_description(&t[..t.len() - 1]).is_err());
        let mut d = vec![0, 2];
        d.extend_from_slice(&3i32.to_be_bytes());
        d.extend_from_slice(b"abc");
        d.extend_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(
            parse_data_row(&d).unwrap(),
            vec![Some("abc".to_string()), None]
        );
        assert!(parse_data_row(&d[..5]).is_err());
    }
}
