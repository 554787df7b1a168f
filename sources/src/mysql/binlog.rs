//! The binlog connection of a MySQL / MariaDB source: registering as a replica, asking
//! for the binlog from a position (MariaDB GTID state, MySQL / MariaDB file + offset), the
//! heartbeat that makes a dead connection noticed, and the decoders of MariaDB's own
//! events, which `mysql_common` returns as unknown.
//!
//! # MariaDB positioning
//!
//! Before `COM_BINLOG_DUMP` the session announces `@mariadb_slave_capability = 4`
//! (`MARIA_SLAVE_CAPABILITY_GTID`): without it the server rewrites every GTID event into a
//! `BEGIN` query event and drops GTID lists, and we could not record GTID positions. With a
//! GTID state the request carries `@slave_connect_state` (the domain → last-applied GTID
//! map), strict mode off, and an empty file name: the server finds where to start in its
//! binlogs and sends only event groups after that state. Without one (a server that never
//! logged a transaction, or GTIDs off) the request names file and offset.
//!
//! # MySQL positioning
//!
//! With a GTID set (`@@gtid_mode = ON`: the snapshot read `@@gtid_executed`, the stream
//! adds each group's GTID at its commit) the request is `COM_BINLOG_DUMP_GTID` with the
//! set as SIDs ([`mysql_sids`]) and an empty file name: the server sends every
//! transaction not in the set, whatever the files are called (failover, renumbering). A
//! set with tagged GTIDs (MySQL 8.3+, `uuid:tag:n`) needs the tagged request format that
//! `mysql_common` does not write; such a start positions by file and offset instead.
//!
//! # Events
//!
//! - `GTID_EVENT` (162): seq_no u64, domain_id u32, flags u8, then (flag
//!   `FL_GROUP_COMMIT_ID`) commit_id u64 or (`FL_PREPARED_XA` / `FL_COMPLETED_XA`) an XID.
//!   The server id is the event header's. `FL_STANDALONE`: no `BEGIN`/`XID` follows, the
//!   group is one statement (DDL).
//! - `GTID_LIST` (163): count u32 (low 28 bits), then count × (domain u32, server u32,
//!   seq u64): the binlog state at the start of a file.
//! - `ANNOTATE_ROWS` (160): the statement text of the row events that follow.
//! - `BINLOG_CHECKPOINT` (161): name length u32, then the file name.
//!
//! Invariant: the decoders are total over their input (a short or malformed event is an
//! error value, never a panic).

use std::time::Duration;

use cdc_schemas::gtid::MariaGtid;
use cdc_schemas::GtidSet;
use futures_util::StreamExt;
use mysql_async::binlog::events::{Event, RowsEventData, TableMapEvent};
use mysql_async::binlog::value::BinlogValue;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn};
use mysql_common::constants::ColumnType;
use mysql_common::io::ParseBuf;
use mysql_common::packets::{GnoInterval, Sid};

use super::conn::{MySqlConnectError, MySqlEndpoint};
use super::decode::jsonb::{bin_decimal_text, check_shape};
use crate::SourceError;

/// MariaDB event types `mysql_common` does not know.
pub const ANNOTATE_ROWS_EVENT: u8 = 160;
pub const BINLOG_CHECKPOINT_EVENT: u8 = 161;
pub const MARIADB_GTID_EVENT: u8 = 162;
pub const GTID_LIST_EVENT: u8 = 163;
pub const START_ENCRYPTION_EVENT: u8 = 164;
/// `QUERY_COMPRESSED_EVENT` .. `DELETE_ROWS_COMPRESSED_EVENT_V1` (`log_bin_compress`).
pub const FIRST_COMPRESSED_EVENT: u8 = 165;
pub const LAST_COMPRESSED_EVENT: u8 = 171;

/// MySQL's `TRANSACTION_PAYLOAD_EVENT` (8.0.20+, `binlog_transaction_compression = ON`):
/// a whole transaction's events, compressed. Not decoded: the stream stops on it
/// ([`transaction_payload_refused`]) rather than skip the changes inside.
pub const TRANSACTION_PAYLOAD_EVENT: u8 = 40;

/// The error of a [`TRANSACTION_PAYLOAD_EVENT`]. Its body is never parsed (`mysql_common`
/// 0.35.5's parser panics on a payload shorter than its header says).
pub fn transaction_payload_refused() -> SourceError {
    SourceError::definite(
        "reading the binlog",
        "the binlog holds a compressed transaction (TRANSACTION_PAYLOAD_EVENT, binlog_transaction_compression = ON), which this connector does not decode",
        "SET GLOBAL binlog_transaction_compression = OFF (and in my.cnf); the compressed part of the binlog cannot be captured: take a new snapshot after it",
    )
}

/// Rows events: `WRITE/UPDATE/DELETE_ROWS_EVENT_V1` (23-25), `_V2` (30-32, with extra
/// data after the post-header) and MySQL's `PARTIAL_UPDATE_ROWS_EVENT` (39, v2 layout).
pub fn is_rows_event(ty: u8) -> bool {
    matches!(ty, 23..=25 | 30..=32 | 39)
}

/// Checks what `mysql_common` 0.35.5 would overflow on before it parses a rows event
/// (`data`: the body after the common header): a column count so near `u64::MAX` that
/// its bitmap's length `(n + 7) / 8` overflows (a panic with overflow checks, a slice out
/// of range later without). No server writes one; the table map's count is bounded by
/// the bytes that follow it, this one is not.
pub fn check_rows_event(ty: u8, data: &[u8]) -> Result<(), String> {
    // Post-header: table id (6 bytes), flags (u16); v2: extra data length (u16, itself
    // included) and the extra data.
    let mut at = 8;
    if matches!(ty, 30..=32 | 39) {
        let Some(extra) = data.get(8..10) else {
            return Ok(());
        };
        at += (u16::from_le_bytes([extra[0], extra[1]]) as usize).max(2);
    }
    // The column count, a length-encoded integer: only the 8-byte form (0xfe) can be
    // that large.
    if data.get(at) == Some(&0xfe) {
        if let Some(n) = u64_at(data, at + 1) {
            if (n as usize).checked_add(7).is_none() {
                return Err(format!("a rows event with {n} columns"));
            }
        }
    }
    Ok(())
}

/// `GTID_EVENT` flags.
pub const FL_STANDALONE: u8 = 1;
pub const FL_GROUP_COMMIT_ID: u8 = 2;
pub const FL_DDL: u8 = 32;
pub const FL_PREPARED_XA: u8 = 64;
pub const FL_COMPLETED_XA: u8 = 128;

/// Which server dialect the binlog speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    MariaDb,
    MySql,
}

impl Flavor {
    /// From `SELECT VERSION()`.
    pub fn of_version(version: &str) -> Flavor {
        if version.to_ascii_lowercase().contains("mariadb") {
            Flavor::MariaDb
        } else {
            Flavor::MySql
        }
    }
}

/// Where to start reading the binlog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BinlogStart {
    pub file: String,
    pub pos: u64,
    /// MariaDB: the GTID state to connect with (used when not empty).
    pub gtid_set: Option<GtidSet>,
}

impl BinlogStart {
    /// The GTID state the request is positioned by, if any.
    pub fn gtid_state(&self) -> Option<&GtidSet> {
        self.gtid_set.as_ref().filter(|g| !g.is_empty())
    }
}

/// A MariaDB `GTID_EVENT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MariaGtidEvent {
    pub gtid: MariaGtid,
    pub flags: u8,
    pub commit_id: Option<u64>,
}

impl MariaGtidEvent {
    /// No `BEGIN` / `XID` follows: the group is a single statement.
    pub fn standalone(&self) -> bool {
        self.flags & FL_STANDALONE != 0
    }
}

/// A MariaDB event that is not what its layout says.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed MariaDB {event} event ({len} bytes): {what}")]
pub struct EventFormatError {
    pub event: &'static str,
    pub len: usize,
    pub what: &'static str,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes(s.try_into().expect("4 bytes")))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 8)
        .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
}

/// Decodes a `GTID_EVENT` body (`server_id` from the event header).
pub fn parse_gtid_event(data: &[u8], server_id: u32) -> Result<MariaGtidEvent, EventFormatError> {
    let err = |what| EventFormatError {
        event: "GTID",
        len: data.len(),
        what,
    };
    let seq = u64_at(data, 0).ok_or_else(|| err("shorter than seq_no"))?;
    let domain = u32_at(data, 8).ok_or_else(|| err("shorter than domain_id"))?;
    let flags = *data.get(12).ok_or_else(|| err("no flags byte"))?;
    let commit_id = if flags & FL_GROUP_COMMIT_ID != 0 {
        Some(u64_at(data, 13).ok_or_else(|| err("FL_GROUP_COMMIT_ID without a commit_id"))?)
    } else {
        None
    };
    Ok(MariaGtidEvent {
        gtid: MariaGtid {
            domain,
            server: server_id,
            seq,
        },
        flags,
        commit_id,
    })
}

/// Decodes a `GTID_LIST` body: the GTIDs it lists, in order.
pub fn parse_gtid_list(data: &[u8]) -> Result<Vec<MariaGtid>, EventFormatError> {
    let err = |what| EventFormatError {
        event: "GTID_LIST",
        len: data.len(),
        what,
    };
    let count = (u32_at(data, 0).ok_or_else(|| err("no count"))? & 0x0fff_ffff) as usize;
    let need = 4 + count
        .checked_mul(16)
        .ok_or_else(|| err("count overflows"))?;
    if data.len() < need {
        return Err(err("shorter than its count of GTIDs"));
    }
    Ok((0..count)
        .map(|i| {
            let at = 4 + 16 * i;
            MariaGtid {
                domain: u32_at(data, at).expect("checked length"),
                server: u32_at(data, at + 4).expect("checked length"),
                seq: u64_at(data, at + 8).expect("checked length"),
            }
        })
        .collect())
}

/// Decodes a `BINLOG_CHECKPOINT` body: the oldest binlog file still needed for crash
/// recovery.
pub fn parse_binlog_checkpoint(data: &[u8]) -> Result<String, EventFormatError> {
    let err = |what| EventFormatError {
        event: "BINLOG_CHECKPOINT",
        len: data.len(),
        what,
    };
    let n = u32_at(data, 0).ok_or_else(|| err("no name length"))? as usize;
    let name = data
        .get(4..4 + n)
        .ok_or_else(|| err("shorter than its name length"))?;
    Ok(String::from_utf8_lossy(name).into_owned())
}

/// Decodes an `ANNOTATE_ROWS` body: the statement text (never logged: it holds values).
pub fn parse_annotate_rows(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// The row images of a rows event, parsed without `mysql_common`'s per-row column
/// objects: each value is parsed in place (borrowing the event's bytes) into `before` /
/// `after`, which are reused from row to row, and `f` is called with the row's index and
/// its images (`None` for a column the image does not hold).
///
/// Layout (both MySQL and MariaDB, v1 and v2): per row, the before image (update,
/// delete) then the after image (write, update); an image is a NULL bitmap of one bit
/// per column present in the event's column bitmap, then the non-NULL values in column
/// order, each in its type's binlog encoding (the table map gives type and metadata).
pub fn for_each_row<'a>(
    r: &'a RowsEventData<'a>,
    tme: &'a TableMapEvent<'a>,
    unsigned: &[bool],
    before: &mut Vec<Option<BinlogValue<'a>>>,
    after: &mut Vec<Option<BinlogValue<'a>>>,
    mut f: impl FnMut(
        u32,
        Option<&[Option<BinlogValue<'a>>]>,
        Option<&[Option<BinlogValue<'a>>]>,
    ) -> Result<(), SourceError>,
) -> Result<(), SourceError> {
    let bad = |what: String| {
        SourceError::definite(
            format!(
                "decoding a rows event of {}.{}",
                tme.database_name(),
                tme.table_name()
            ),
            what,
            "report this as a bug, with the table's definition",
        )
    };
    if let RowsEventData::PartialUpdateRowsEvent(_) = r {
        return Err(SourceError::definite(
            "reading the binlog",
            "partial JSON updates (binlog_row_value_options = PARTIAL_JSON) do not carry full after images",
            "SET GLOBAL binlog_row_value_options = ''; and remove it from my.cnf",
        ));
    }
    let n = r.num_columns() as usize;
    let mut types = Vec::with_capacity(n);
    for i in 0..n {
        let t = match tme.get_column_type(i) {
            Ok(Some(t)) => t,
            Ok(None) => return Err(bad(format!("the table map has no type for column {i}"))),
            Err(e) => return Err(bad(format!("column {i}: {e}"))),
        };
        let meta = tme.get_column_metadata(i).unwrap_or(&[]);
        if let Err(e) = check_column_meta(t, meta) {
            return Err(bad(format!("column {i} ({t:?}): {e}")));
        }
        types.push((t, meta));
    }
    let before_cols: Option<Vec<bool>> = r
        .columns_before_image()
        .map(|b| (0..n).map(|i| b.get(i).is_some_and(|x| *x)).collect());
    let after_cols: Option<Vec<bool>> = r
        .columns_after_image()
        .map(|b| (0..n).map(|i| b.get(i).is_some_and(|x| *x)).collect());
    let mut buf = ParseBuf(r.rows_data());
    let read = |buf: &mut ParseBuf<'a>,
                cols: &[bool],
                out: &mut Vec<Option<BinlogValue<'a>>>|
     -> Result<(), SourceError> {
        out.clear();
        let present = cols.iter().filter(|c| **c).count();
        let nulls: &[u8] = buf
            .checked_eat(present.div_ceil(8))
            .ok_or_else(|| bad("a row image shorter than its NULL bitmap".into()))?;
        let mut k = 0usize;
        for (i, &(t, meta)) in types.iter().enumerate() {
            if !cols[i] {
                out.push(None);
                continue;
            }
            let null = nulls[k / 8] >> (k % 8) & 1 == 1;
            k += 1;
            if null {
                out.push(Some(BinlogValue::Value(mysql_common::Value::NULL)));
            } else {
                let u = unsigned.get(i).copied().unwrap_or(false);
                let v = if t == ColumnType::MYSQL_TYPE_TIME2 && matches!(meta.first(), Some(1 | 2))
                {
                    time2_centis(buf).ok_or_else(|| bad(format!("column {i} ({t:?}): truncated")))
                } else if t == ColumnType::MYSQL_TYPE_NEWDECIMAL {
                    decimal(buf, meta[0], meta[1]).map_err(|e| bad(format!("column {i}: {e}")))
                } else if t == ColumnType::MYSQL_TYPE_DATETIME2
                    && buf.0.first().is_some_and(|b| b & 0x80 == 0)
                {
                    // Its sign bit clear: before year 0, which the server never writes;
                    // `mysql_common` 0.35.5 overflows negating such a value.
                    Err(bad(format!("column {i} ({t:?}): a negative DATETIME")))
                } else {
                    if t == ColumnType::MYSQL_TYPE_JSON {
                        // Its length (u32), then the document: only a tree may reach the
                        // text renderer, which follows offsets as they are.
                        let len = buf
                            .0
                            .get(..4)
                            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                        if let Some(doc) = len.and_then(|n| buf.0.get(4..4 + n as usize)) {
                            check_shape(doc)
                                .map_err(|e| bad(format!("column {i} ({t:?}): binary JSON {e}")))?;
                        }
                    }
                    buf.parse::<BinlogValue<'a>>((t, meta, u, false))
                        .map_err(|e| bad(format!("column {i} ({t:?}): {e}")))
                }?;
                out.push(Some(v));
            }
        }
        Ok(())
    };
    let mut index = 0u32;
    while !buf.is_empty() {
        let left = buf.len();
        let b = match &before_cols {
            Some(cols) => {
                read(&mut buf, cols, before)?;
                Some(before.as_slice())
            }
            None => None,
        };
        let a = match &after_cols {
            Some(cols) => {
                read(&mut buf, cols, after)?;
                Some(after.as_slice())
            }
            None => None,
        };
        if buf.len() == left {
            // Images of no column: the rest would never be consumed.
            return Err(bad(
                "a row image of no bytes (an event without columns)".into()
            ));
        }
        f(index, b, a)?;
        index += 1;
    }
    Ok(())
}

/// Checks a table map's metadata of one column before `mysql_common`'s value parser reads
/// it: that parser indexes the metadata bytes of its type unchecked and takes a
/// DECIMAL's precision and scale as given (a short or inconsistent table map would panic
/// there, or underflow).
fn check_column_meta(t: ColumnType, meta: &[u8]) -> Result<(), String> {
    use ColumnType as C;
    let need = match t {
        C::MYSQL_TYPE_STRING
        | C::MYSQL_TYPE_VARCHAR
        | C::MYSQL_TYPE_VAR_STRING
        | C::MYSQL_TYPE_BIT
        | C::MYSQL_TYPE_NEWDECIMAL
        | C::MYSQL_TYPE_ENUM
        | C::MYSQL_TYPE_SET => 2,
        C::MYSQL_TYPE_TIMESTAMP2
        | C::MYSQL_TYPE_DATETIME2
        | C::MYSQL_TYPE_TIME2
        | C::MYSQL_TYPE_TINY_BLOB
        | C::MYSQL_TYPE_MEDIUM_BLOB
        | C::MYSQL_TYPE_LONG_BLOB
        | C::MYSQL_TYPE_BLOB
        | C::MYSQL_TYPE_GEOMETRY
        | C::MYSQL_TYPE_VECTOR => 1,
        // A multi-valued index's element type: never a table column.
        C::MYSQL_TYPE_TYPED_ARRAY => return Err("a typed array is not a column type".into()),
        _ => 0,
    };
    if meta.len() < need {
        return Err(format!(
            "the table map has {} metadata bytes, the type {need}",
            meta.len()
        ));
    }
    if t == C::MYSQL_TYPE_NEWDECIMAL {
        let (precision, scale) = (meta[0], meta[1]);
        if !(1..=65).contains(&precision) || scale > 30 || scale > precision {
            return Err(format!(
                "DECIMAL({precision},{scale}) is not a valid decimal type"
            ));
        }
    }
    Ok(())
}

/// A DECIMAL(`precision`, `scale`) value of a row image, as the text `mysql_common`
/// gives (`-12.340`), decoded by [`bin_decimal_text`]: `mysql_common` 0.35.5 does not
/// check that each digit group fits its digits (an overflow panic with overflow checks,
/// a wrong number without). The metadata was checked by [`check_column_meta`].
fn decimal<'a>(
    buf: &mut ParseBuf<'_>,
    precision: u8,
    scale: u8,
) -> Result<BinlogValue<'a>, String> {
    let (p, s) = (precision as usize, scale as usize);
    let size = |digits: usize| digits / 9 * 4 + [0, 1, 1, 2, 2, 3, 3, 4, 4, 4][digits % 9];
    let bin = buf
        .checked_eat(size(p - s) + size(s))
        .ok_or("a DECIMAL value cut short")?;
    let text = bin_decimal_text(bin, p, s)?;
    Ok(BinlogValue::Value(mysql_common::Value::Bytes(
        text.into_bytes(),
    )))
}

/// A `TIME(1)` or `TIME(2)` value of a row image (`MYSQL_TYPE_TIME2`, 1 or 2 fractional
/// digits: 3 bytes big-endian `hh:mm:ss` + 0x800000, then one byte of hundredths), read as
/// MySQL's `my_time_packed_from_binary` does. `mysql_common` 0.35.5 holds that byte
/// unsigned: a negative time with a fraction overflows there (a panic with overflow
/// checks, a value 625 hours too large without).
fn time2_centis<'a>(buf: &mut ParseBuf<'_>) -> Option<BinlogValue<'a>> {
    let b = buf.checked_eat(4)?;
    let mut int = i64::from(u32::from_be_bytes([0, b[0], b[1], b[2]])) - 0x80_0000;
    let mut frac = i64::from(b[3]);
    if int < 0 && frac > 0 {
        // The fraction counts up from the next (less negative) second.
        int += 1;
        frac -= 0x100;
    }
    let packed = (int << 24) + frac * 10_000;
    Some(BinlogValue::Value(
        mysql_common::binlog::misc::time_from_packed(packed),
    ))
}

/// An open binlog stream.
pub struct BinlogConn {
    pub stream: BinlogStream,
    /// Reads time out after this long without any event (heartbeats included).
    pub read_timeout: Duration,
    /// The server checksums events (`binlog_checksum = CRC32`). Events read before the
    /// first format description (the fake rotate at the start) still carry the 4 bytes:
    /// the reader learns the algorithm from that description.
    pub checksum: bool,
}

/// A failure of the binlog connection, classified.
pub fn my_err(what: &str, e: mysql_async::Error) -> SourceError {
    use mysql_async::Error as E;
    match &e {
        // MariaDB: ER_SLAVE_SAME_ID (4052); MySQL: 1236 with that text.
        E::Server(s) if s.code == 4052 || (s.code == 1236 && same_replica_id(&s.message)) => SourceError::definite(
            what.to_string(),
            format!(
                "the server dropped this replica connection: {} (error {}): another replica connected with the same server_id",
                s.message, s.code
            ),
            "give each connector (and each replica server) its own source.server_id",
        )
        .caused_by(e),
        E::Server(s) if s.code == 1236 => SourceError::definite(
            what.to_string(),
            format!(
                "the server cannot send the binlog from the stored position: {} (error 1236). The binlog files holding changes since the position were purged (or the server's binlog was reset); those changes are lost to this connector",
                s.message
            ),
            PURGED_FIX,
        )
        .caused_by(e),
        E::Server(s) if matches!(s.code, 1045 | 1227 | 1142 | 1044) => SourceError::definite(
            what.to_string(),
            format!("the server refused: {} (error {})", s.message, s.code),
            "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT, RELOAD ON *.* TO the connector's user",
        )
        .caused_by(e),
        E::Server(s) => SourceError::transient(
            what.to_string(),
            format!("server error {}: {}", s.code, s.message),
        )
        .caused_by(e),
        _ => SourceError::transient(what.to_string(), e.to_string()).caused_by(e),
    }
}

/// True for the server's answer to a position it no longer has (error 1236).
pub fn is_purged(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(s) if s.code == 1236 && !same_replica_id(&s.message))
}

/// Error 1236 also reports a second replica with this connection's server id (MySQL:
/// "A slave with the same server_uuid/server_id as this slave has connected to the
/// master"); the server's own wording is all that tells the two apart.
fn same_replica_id(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("same server_uuid") || m.contains("same server_id") || m.contains("same server id")
}

/// The fix of a stored position the server no longer has (the dump's error 1236, the
/// retention watch's start-up check).
pub const PURGED_FIX: &str = "set snapshot.mode = \"when_needed\" to take a new snapshot (records are then re-read as op r), or start over with an empty log dir; to prevent it, keep binlogs longer (binlog_expire_logs_seconds) than the connector may be stopped";

/// A failed connection attempt as a source error: an unreachable server is transient
/// (the supervisor retries), bad credentials or TLS settings are definite.
pub fn connect_err(e: MySqlConnectError) -> SourceError {
    if e.is_transient() {
        SourceError::transient("connecting to MySQL", e.to_string()).caused_by(e)
    } else {
        SourceError::definite("connecting to MySQL", e.message.clone(), e.fix.clone()).caused_by(e)
    }
}

/// Connects a binlog stream from `start`. `heartbeat` is the server's heartbeat period.
/// A position the server no longer has is reported by the first [`BinlogConn::next`].
pub async fn open(
    ep: &MySqlEndpoint,
    server_id: u32,
    flavor: Flavor,
    start: &BinlogStart,
    heartbeat: Duration,
) -> Result<BinlogConn, SourceError> {
    let mut conn: Conn = ep.connect().await.map_err(connect_err)?;
    let nanos = heartbeat.as_nanos().min(u64::MAX as u128) as u64;
    let mut setup = format!("SET @master_heartbeat_period = {nanos}");
    if flavor == Flavor::MariaDb {
        setup.push_str("; SET @mariadb_slave_capability = 4");
        if let Some(g) = start.gtid_state() {
            // The set's text is digits, dashes and commas only (GtidSet's Display).
            setup.push_str(&format!(
                "; SET @slave_connect_state = '{g}'; SET @slave_gtid_strict_mode = 0; SET @slave_gtid_ignore_duplicates = 0"
            ));
        }
    }
    conn.query_drop(setup)
        .await
        .map_err(|e| my_err("preparing the binlog connection", e))?;
    let checksum: Option<String> = conn
        .query_first("SELECT @@GLOBAL.binlog_checksum")
        .await
        .map_err(|e| my_err("preparing the binlog connection", e))?;
    let checksum = checksum.is_some_and(|c| !c.eq_ignore_ascii_case("NONE"));
    let mysql_gtids = match (flavor, start.gtid_state()) {
        (Flavor::MySql, Some(set)) => {
            let sids = mysql_sids(set);
            if sids.is_none() {
                tracing::warn!("the stored GTID set has tagged GTIDs, which this connector cannot request by: positioning by binlog file and offset");
            }
            sids
        }
        _ => None,
    };
    let by_gtid = flavor == Flavor::MariaDb && start.gtid_state().is_some();
    let request = if let Some(sids) = mysql_gtids {
        BinlogStreamRequest::new(server_id)
            .with_gtid()
            .with_filename(b"")
            .with_pos(4)
            .with_gtid_set(sids)
    } else if by_gtid {
        BinlogStreamRequest::new(server_id)
            .with_filename(b"")
            .with_pos(4)
    } else {
        BinlogStreamRequest::new(server_id)
            .with_filename(start.file.as_bytes())
            .with_pos(start.pos.max(4))
    };
    let stream = conn
        .get_binlog_stream(request)
        .await
        .map_err(|e| my_err("requesting the binlog", e))?;
    Ok(BinlogConn {
        stream,
        read_timeout: heartbeat * 3 + Duration::from_secs(2),
        checksum,
    })
}

/// A MySQL GTID set as the SIDs of `COM_BINLOG_DUMP_GTID`: per source uuid its 16 bytes
/// and its intervals, half-open (`[start, end)`, so `uuid:1-5` is `(1, 6)`). `None` for a
/// MariaDB set, an empty one, or one with tagged GTIDs (see the module docs).
pub fn mysql_sids(set: &GtidSet) -> Option<Vec<Sid<'static>>> {
    let GtidSet::MySql(m) = set else {
        return None;
    };
    if m.is_empty() || m.keys().any(|(_, tag)| !tag.is_empty()) {
        return None;
    }
    let mut sids = Vec::with_capacity(m.len());
    for ((uuid, _), intervals) in m {
        let hex: String = uuid.chars().filter(|c| *c != '-').collect();
        if hex.len() != 32 {
            return None;
        }
        let mut bytes = [0u8; 16];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
        }
        sids.push(
            Sid::new(bytes).with_intervals(
                intervals
                    .iter()
                    .map(|&(a, b)| GnoInterval::new(a, b.saturating_add(1)))
                    .collect(),
            ),
        );
    }
    Some(sids)
}

/// What reading the next event gave.
pub enum Next {
    Event(Event),
    /// The server ended the stream.
    End,
}

impl BinlogConn {
    /// The next event; a read silent for longer than `read_timeout` is a lost connection.
    pub async fn next(&mut self) -> Result<Next, mysql_async::Error> {
        match tokio::time::timeout(self.read_timeout, self.stream.next()).await {
            Ok(Some(Ok(ev))) => Ok(Next::Event(ev)),
            Ok(Some(Err(e))) => Err(e),
            Ok(None) => Ok(Next::End),
            Err(_) => Err(mysql_async::Error::Io(mysql_async::IoError::Io(
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no binlog event or heartbeat for {:?}: the connection is considered dead",
                        self.read_timeout
                    ),
                ),
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One event with the v4 header (timestamp, type, server id, size, log pos, flags).
    fn event(ty: u8, body: &[u8]) -> Vec<u8> {
        let mut e = 1_700_000_000u32.to_le_bytes().to_vec();
        e.push(ty);
        e.extend_from_slice(&1u32.to_le_bytes());
        e.extend_from_slice(&(19 + body.len() as u32).to_le_bytes());
        e.extend_from_slice(&[0; 6]);
        e.extend_from_slice(body);
        e
    }

    /// A table map of one nullable column (`ty`, `meta`) and a WRITE_ROWS v2 event whose
    /// rows are `rows` (each: NULL bitmap, then the value), read as the stream reads them,
    /// through [`for_each_row`]: the after images, or its error.
    fn write_rows(
        ty: u8,
        meta: &[u8],
        present: u8,
        rows: &[u8],
    ) -> Result<Vec<Vec<Option<BinlogValue<'static>>>>, SourceError> {
        use mysql_common::binlog::consts::BinlogVersion;
        use mysql_common::binlog::EventStreamReader;
        let mut map = vec![7, 0, 0, 0, 0, 0, 1, 0, 1, b'd', 0, 1, b't', 0, 1, ty];
        map.push(meta.len() as u8);
        map.extend_from_slice(meta);
        map.push(1);
        let mut write = vec![7, 0, 0, 0, 0, 0, 1, 0, 2, 0, 1, present];
        write.extend_from_slice(rows);
        let mut reader = EventStreamReader::new(BinlogVersion::Version4);
        reader.read(&event(19, &map)[..]).unwrap().unwrap();
        let ev = reader.read(&event(30, &write)[..]).unwrap().unwrap();
        let Some(mysql_async::binlog::events::EventData::RowsEvent(r)) = ev.read_data().unwrap()
        else {
            panic!("not a rows event")
        };
        let tme = reader.get_tme(7).unwrap();
        let (mut before, mut after) = (Vec::new(), Vec::new());
        let mut out = Vec::new();
        for_each_row(&r, tme, &[], &mut before, &mut after, |_, _, a| {
            out.push(
                a.unwrap()
                    .iter()
                    .map(|v| v.clone().map(|v| v.into_owned()))
                    .collect(),
            );
            Ok(())
        })?;
        Ok(out)
    }

    fn value(v: mysql_common::Value) -> Vec<Vec<Option<BinlogValue<'static>>>> {
        vec![vec![Some(BinlogValue::Value(v))]]
    }

    /// Found by the `binlog` fuzz target: `mysql_common` 0.35.5 reads a negative TIME(1)
    /// or TIME(2) with a fraction with an unsigned fraction (an overflow panic with
    /// overflow checks, 625 hours off without). MySQL writes -00:00:01.50 as the second
    /// -2 (0x800000 - 2) and the fraction byte -50 (0xce).
    #[test]
    fn time_with_hundredths_negative_and_positive() {
        use mysql_common::Value::Time;
        let t2 = 19; // MYSQL_TYPE_TIME2
        let neg = write_rows(t2, &[2], 1, &[0, 0x7f, 0xff, 0xfe, 0xce]).unwrap();
        assert_eq!(neg, value(Time(true, 0, 0, 0, 1, 500_000)));
        // 12:34:56.5 and -838:59:59.1 (TIME(1), at its lower limit).
        let hms = |h: u32, m: u32, s: u32| (h << 12) | (m << 6) | s;
        let mut pos = vec![0];
        pos.extend_from_slice(&(0x80_0000 + hms(12, 34, 56)).to_be_bytes()[1..]);
        pos.push(50);
        assert_eq!(
            write_rows(t2, &[1], 1, &pos).unwrap(),
            value(Time(false, 0, 12, 34, 56, 500_000))
        );
        let mut min = vec![0];
        min.extend_from_slice(&(0x80_0000 - hms(838, 59, 59) - 1).to_be_bytes()[1..]);
        min.push((-10i8) as u8);
        assert_eq!(
            write_rows(t2, &[1], 1, &min).unwrap(),
            value(Time(true, 34, 22, 59, 59, 100_000))
        );
        assert!(
            write_rows(t2, &[2], 1, &[0, 0x80, 0, 0]).is_err(),
            "cut short"
        );
    }

    /// Found by the `binlog` fuzz target: `mysql_common` 0.35.5 multiplies a DECIMAL's
    /// last digit group without checking it fits its digits (an overflow panic with
    /// overflow checks, a wrong number without); its precision and scale are taken as
    /// given (a scale above the precision underflows).
    #[test]
    fn decimals_are_checked() {
        let dec = 246; // MYSQL_TYPE_NEWDECIMAL
                       // DECIMAL(10,2) 123.45: 8 integer digits in 4 bytes, 2 fraction digits in 1.
        let ok = write_rows(dec, &[10, 2], 1, &[0, 0x80, 0, 0, 0x7b, 0x2d]).unwrap();
        assert_eq!(ok, value(mysql_common::Value::Bytes(b"123.45".to_vec())));
        let neg = write_rows(dec, &[10, 2], 1, &[0, 0x7f, 0xff, 0xff, 0x84, 0xd2]).unwrap();
        assert_eq!(neg, value(mysql_common::Value::Bytes(b"-123.45".to_vec())));
        // A two-digit group holding 255; DECIMAL(65,30) with 0xff.. groups.
        assert!(write_rows(dec, &[10, 2], 1, &[0, 0x80, 0, 0, 0x7b, 0xff]).is_err());
        let crash = [0x80u8]
            .iter()
            .chain(&[0xff; 29])
            .copied()
            .collect::<Vec<u8>>();
        assert!(write_rows(dec, &[65, 30], 1, &[&[0][..], &crash].concat()).is_err());
        // Scale above precision, precision 0 or above 65.
        for meta in [[2, 5], [0, 0], [66, 2], [40, 31]] {
            let e = write_rows(dec, &meta, 1, &[0, 0x80, 0, 0, 0, 0]).unwrap_err();
            assert!(e.to_string().contains("not a valid decimal"), "{e}");
        }
    }

    /// Found by the `binlog` fuzz target: a DATETIME before year 0 (its sign bit clear),
    /// which `mysql_common` 0.35.5 overflows negating; and metadata shorter than the
    /// type's, which its value parser indexes unchecked.
    #[test]
    fn negative_datetimes_and_short_metadata_are_errors() {
        let e = write_rows(18, &[0], 1, &[0, 0, 0, 0, 0, 0]).unwrap_err();
        assert!(e.to_string().contains("negative DATETIME"), "{e}");
        // 2024-02-29 23:59:59, DATETIME(0).
        let ymd = ((2024u64 * 13 + 2) << 5) | 29;
        let v = ((ymd << 17) | (23 << 12) | (59 << 6) | 59) + 0x80_0000_0000;
        let ok = write_rows(18, &[0], 1, &[&[0][..], &v.to_be_bytes()[3..]].concat()).unwrap();
        assert_eq!(
            ok,
            value(mysql_common::Value::Date(2024, 2, 29, 23, 59, 59, 0))
        );
        // VARCHAR, BIT, STRING and BLOB without their metadata bytes.
        for ty in [15u8, 16, 254, 252, 17, 18] {
            let e = write_rows(ty, &[], 1, &[0, 1, 2, 3, 4]).unwrap_err();
            assert!(e.to_string().contains("metadata"), "type {ty}: {e}");
        }
    }

    /// A column count near `u64::MAX` overflows `mysql_common`'s bitmap length (a panic
    /// in fuzz builds: libFuzzer's "deadly signal"): refused before it is parsed; ordinary
    /// counts pass.
    #[test]
    fn rows_events_with_overflowing_column_counts_are_refused() {
        let mut v2 = vec![7, 0, 0, 0, 0, 0, 1, 0, 2, 0, 0xfe];
        v2.extend_from_slice(&[0xff; 8]);
        assert!(check_rows_event(30, &v2).unwrap_err().contains("columns"));
        let mut v1 = vec![7, 0, 0, 0, 0, 0, 1, 0, 0xfe];
        v1.extend_from_slice(&(u64::MAX - 3).to_le_bytes());
        assert!(check_rows_event(23, &v1).is_err());
        // v2 with 4 bytes of extra data, then 3 columns; a large but not overflowing count.
        check_rows_event(31, &[7, 0, 0, 0, 0, 0, 1, 0, 6, 0, 9, 9, 9, 9, 3, 0xff]).unwrap();
        let mut big = vec![7, 0, 0, 0, 0, 0, 1, 0, 2, 0, 0xfe];
        big.extend_from_slice(&(1u64 << 40).to_le_bytes());
        check_rows_event(32, &big).unwrap();
        check_rows_event(30, &[7, 0]).unwrap();
        assert!(is_rows_event(25) && is_rows_event(39) && !is_rows_event(19));
    }

    /// A JSON value whose entries point at the same bytes (a DAG: its text doubles with
    /// each level) is refused by the row decoder before anything renders it.
    #[test]
    fn json_values_that_are_not_trees_are_refused() {
        use crate::mysql::decode::jsonb::test_docs::{shared, tree_of_two};
        let row = |doc: &[u8]| {
            let mut row = vec![0u8];
            row.extend_from_slice(&(doc.len() as u32).to_le_bytes());
            row.extend_from_slice(doc);
            row
        };
        let e = write_rows(245, &[4], 1, &row(&shared(40))).unwrap_err();
        assert!(e.to_string().contains("not a tree"), "{e}");
        let rows = write_rows(245, &[4], 1, &row(&tree_of_two())).unwrap();
        assert_eq!(rows.len(), 1);
    }

    /// Found by the `binlog` fuzz target: a rows event whose column bitmap names no
    /// column has rows of no bytes, and reading them never ended.
    #[test]
    fn rows_of_no_column_end_with_an_error() {
        let e = write_rows(3, &[], 0, &[1, 2, 3]).unwrap_err();
        assert!(e.to_string().contains("no bytes"), "{e}");
        // The same event with the column present reads its one INT row.
        let ok = write_rows(3, &[], 1, &[0, 1, 0, 0, 0]).unwrap();
        assert_eq!(ok, value(mysql_common::Value::Int(1)));
    }

    /// Found by the `binlog` fuzz target: `mysql_common` 0.35.5 panics parsing a
    /// TRANSACTION_PAYLOAD_EVENT shorter than its header says. The stream never parses
    /// one: it stops with this error (it cannot decode the compressed changes inside).
    #[test]
    fn compressed_transactions_are_refused() {
        let e = transaction_payload_refused();
        assert!(!e.is_transient());
        assert!(
            e.to_string().contains("binlog_transaction_compression"),
            "{e}"
        );
    }

    #[test]
    fn gtid_event() {
        let mut b = Vec::new();
        b.extend_from_slice(&100u64.to_le_bytes());
        b.extend_from_slice(&2u32.to_le_bytes());
        b.push(FL_STANDALONE | FL_DDL);
        let e = parse_gtid_event(&b, 7).unwrap();
        assert_eq!(e.gtid.to_string(), "2-7-100");
        assert!(e.standalone());
        assert_eq!(e.commit_id, None);

        let mut b = Vec::new();
        b.extend_from_slice(&5u64.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.push(FL_GROUP_COMMIT_ID | 4);
        b.extend_from_slice(&99u64.to_le_bytes());
        b.extend_from_slice(&[0, 0, 0]); // later additions (flags_extra, …) are ignored
        let e = parse_gtid_event(&b, 1).unwrap();
        assert_eq!(e.gtid.to_string(), "0-1-5");
        assert!(!e.standalone());
        assert_eq!(e.commit_id, Some(99));

        assert!(parse_gtid_event(&b[..10], 1).is_err());
        assert!(
            parse_gtid_event(&b[..15], 1).is_err(),
            "commit id cut short"
        );
    }

    #[test]
    fn gtid_list_event() {
        // The example of MariaDB's documentation: Gtid list [0-10124-3584].
        let body = [
            0x01, 0, 0, 0, 0, 0, 0, 0, 0x8c, 0x27, 0, 0, 0, 0x0e, 0, 0, 0, 0, 0, 0,
        ];
        let l = parse_gtid_list(&body).unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].to_string(), "0-10124-3584");
        // Flags in the count's top bits are not part of the count.
        let mut flagged = body;
        flagged[3] = 0x10;
        assert_eq!(parse_gtid_list(&flagged).unwrap(), l);
        assert!(parse_gtid_list(&body[..19]).is_err());
        assert!(parse_gtid_list(&[]).is_err());
        assert_eq!(parse_gtid_list(&[0, 0, 0, 0]).unwrap(), vec![]);
    }

    #[test]
    fn checkpoint_and_annotate() {
        let mut b = 13u32.to_le_bytes().to_vec();
        b.extend_from_slice(b"binlog.000002");
        assert_eq!(parse_binlog_checkpoint(&b).unwrap(), "binlog.000002");
        assert!(parse_binlog_checkpoint(&b[..10]).is_err());
        assert_eq!(
            parse_annotate_rows(b"INSERT INTO t VALUES (1)"),
            "INSERT INTO t VALUES (1)"
        );
    }

    #[test]
    fn error_1236_purged_or_duplicate_replica() {
        let e = |m: &str| {
            mysql_async::Error::Server(mysql_async::ServerError {
                code: 1236,
                message: m.into(),
                state: "HY000".into(),
            })
        };
        let purged = e("Could not find GTID state requested by slave in any binlog files. Probably the slave state is too old and required binlog files have been purged.");
        assert!(is_purged(&purged));
        assert!(my_err("x", purged).to_string().contains("when_needed"));
        let dup = e("A slave with the same server_uuid/server_id as this slave has connected to the master; the first event '' at 4, the last event read from '' at 4");
        assert!(!is_purged(&dup));
        assert!(my_err("x", dup).to_string().contains("source.server_id"));
    }

    /// `COM_BINLOG_DUMP_GTID` as the MySQL documentation lays it out: command 0x1e,
    /// flags u16 (`BINLOG_THROUGH_GTID` when SIDs follow), server_id u32, name length u32, name, pos u64, data length u32, then the
    /// SIDs: count u64, per SID the uuid's 16 bytes, interval count u64, intervals as
    /// (start u64, end u64) with `end` exclusive. All little-endian.
    #[test]
    fn mysql_gtid_set_as_dump_gtid_request() {
        use mysql_common::packets::ComBinlogDumpGtid;
        use mysql_common::proto::MySerialize;
        let set: GtidSet =
            "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5:7,00000000-0000-0000-0000-000000000001:3"
                .parse()
                .unwrap();
        let sids = mysql_sids(&set).unwrap();
        let mut got = Vec::new();
        ComBinlogDumpGtid::new(9)
            .with_filename(&b""[..])
            .with_pos(4)
            .with_sids(sids)
            .serialize(&mut got);
        let mut want = vec![0x1e];
        // BINLOG_THROUGH_GTID (0x04): the SIDs follow.
        want.extend_from_slice(&4u16.to_le_bytes());
        want.extend_from_slice(&9u32.to_le_bytes());
        want.extend_from_slice(&0u32.to_le_bytes());
        want.extend_from_slice(&4u64.to_le_bytes());
        let mut data = 2u64.to_le_bytes().to_vec();
        // The set's order: uuids sorted as text.
        let mut one = [0u8; 16];
        one[15] = 1;
        data.extend_from_slice(&one);
        data.extend_from_slice(&1u64.to_le_bytes());
        data.extend_from_slice(&3u64.to_le_bytes());
        data.extend_from_slice(&4u64.to_le_bytes());
        data.extend_from_slice(&[
            0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42,
            0x95, 0x62,
        ]);
        data.extend_from_slice(&2u64.to_le_bytes());
        for (a, b) in [(1u64, 6u64), (7, 8)] {
            data.extend_from_slice(&a.to_le_bytes());
            data.extend_from_slice(&b.to_le_bytes());
        }
        want.extend_from_slice(&(data.len() as u32).to_le_bytes());
        want.extend_from_slice(&data);
        assert_eq!(got, want);
    }

    #[test]
    fn no_sids_for_mariadb_empty_or_tagged_sets() {
        assert!(mysql_sids(&"0-1-5".parse().unwrap()).is_none());
        assert!(mysql_sids(&GtidSet::empty_mysql()).is_none());
        let mut tagged = GtidSet::empty_mysql();
        tagged.add_mysql("3e11fa47-71ca-11e1-9e33-c80aa9429562", "blue", 1);
        assert!(mysql_sids(&tagged).is_none());
    }

    #[test]
    fn start_uses_gtids_only_when_there_are_some() {
        let s = BinlogStart {
            file: "b.000001".into(),
            pos: 4,
            gtid_set: Some(GtidSet::empty_mariadb()),
        };
        assert!(s.gtid_state().is_none());
        let s = BinlogStart {
            gtid_set: Some("0-1-5".parse().unwrap()),
            ..s
        };
        assert_eq!(s.gtid_state().unwrap().to_string(), "0-1-5");
    }
}
