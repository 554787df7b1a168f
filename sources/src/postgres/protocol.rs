//! Wire framing for the replication connection: backend message frames, ErrorResponse
//! fields, and the streaming-replication messages carried in CopyData while the
//! connection is in CopyBoth mode.
//!
//! Backend frame (every server → client message after start-up):
//!
//! ```text
//! Byte1 tag | Int32 length (counts itself, not the tag) | length-4 bytes body
//! ```
//!
//! Inside CopyData (`d`) during `START_REPLICATION`, server → client:
//!
//! ```text
//! 'w' XLogData:          Int64 wal start | Int64 wal end | Int64 send time | payload…
//! 'k' Primary keepalive: Int64 wal end   | Int64 send time | Byte1 reply requested (1/0)
//! ```
//!
//! client → server:
//!
//! ```text
//! 'r' Standby status update: Int64 write | Int64 flush | Int64 apply | Int64 client time
//!                            | Byte1 reply requested
//! ```
//!
//! All integers are big-endian; times are microseconds since 2000-01-01 00:00:00 UTC
//! (the Postgres epoch). Frames are split off the read buffer as [`Bytes`] without
//! copying, so an XLogData payload is a slice of the bytes the socket delivered.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use cdc_schemas::Lsn;

/// Seconds between 1970-01-01 and 2000-01-01.
pub const PG_EPOCH_OFFSET_SECS: i64 = 946_684_800;

/// Largest backend message we accept (Postgres' own limit for a message is 1 GB).
pub const MAX_FRAME_LEN: usize = 1 << 30;

/// Microseconds since the Postgres epoch, now.
pub fn pg_now_micros() -> i64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    d.as_micros() as i64 - PG_EPOCH_OFFSET_SECS * 1_000_000
}

/// Converts a Postgres-epoch microsecond timestamp to milliseconds since 1970.
pub fn pg_micros_to_unix_ms(micros: i64) -> i64 {
    micros.div_euclid(1000) + PG_EPOCH_OFFSET_SECS * 1000
}

/// One backend message: its tag and its body (without tag and length).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub tag: u8,
    pub body: Bytes,
}

/// A violation of the wire protocol by the peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ProtocolError(pub String);

/// Splits one complete frame off the front of `buf`; `Ok(None)` when more bytes are
/// needed.
pub fn parse_frame(buf: &mut BytesMut) -> Result<Option<Frame>, ProtocolError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let tag = buf[0];
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if !(4..=MAX_FRAME_LEN).contains(&len) {
        return Err(ProtocolError(format!(
            "backend message {:?} has invalid length {len}",
            tag as char
        )));
    }
    if buf.len() < len + 1 {
        buf.reserve(len + 1 - buf.len());
        return Ok(None);
    }
    let mut frame = buf.split_to(len + 1);
    let _ = frame.split_to(5);
    Ok(Some(Frame {
        tag,
        body: frame.freeze(),
    }))
}

/// The fields of an ErrorResponse / NoticeResponse that matter to an operator.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PgServerError {
    /// `ERROR`, `FATAL`, `PANIC` (the non-localized severity when the server sends it).
    pub severity: String,
    /// The SQLSTATE, e.g. `42704`.
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

impl PgServerError {
    /// Parses an ErrorResponse/NoticeResponse body: (Byte1 field type, String value)*, 0.
    pub fn parse(body: &[u8]) -> PgServerError {
        let mut e = PgServerError::default();
        let mut localized_severity = String::new();
        let mut rest = body;
        while let Some((&field, tail)) = rest.split_first() {
            if field == 0 {
                break;
            }
            let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
            let value = String::from_utf8_lossy(&tail[..end]).into_owned();
            rest = tail.get(end + 1..).unwrap_or(&[]);
            match field {
                b'S' => localized_severity = value,
                b'V' => e.severity = value,
                b'C' => e.code = value,
                b'M' => e.message = value,
                b'D' => e.detail = Some(value),
                b'H' => e.hint = Some(value),
                _ => {}
            }
        }
        if e.severity.is_empty() {
            e.severity = localized_severity;
        }
        e
    }
}

impl fmt::Display for PgServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} (SQLSTATE {})",
            self.severity, self.message, self.code
        )?;
        if let Some(d) = &self.detail {
            write!(f, "; detail: {d}")?;
        }
        if let Some(h) = &self.hint {
            write!(f, "; hint: {h}")?;
        }
        Ok(())
    }
}

/// `w`: a chunk of WAL data (for logical replication: one output-plugin message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XLogData {
    /// The WAL position of the data (for pgoutput: the LSN the message is about; a
    /// Commit's is the transaction's end LSN).
    pub wal_start: Lsn,
    /// The server's current end of WAL.
    pub wal_end: Lsn,
    /// Server clock at sending, µs since 2000-01-01.
    pub send_time: i64,
    /// The output plugin's message, a slice of the received buffer.
    pub data: Bytes,
}

/// `k`: the server's keepalive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrimaryKeepalive {
    /// The server's current end of WAL (for a logical slot: how far it has decoded and
    /// sent).
    pub wal_end: Lsn,
    pub send_time: i64,
    /// The server wants a status update now (it is nearing `wal_sender_timeout`).
    pub reply_requested: bool,
}

/// A message the server sends inside CopyData during replication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicationMessage {
    XLogData(XLogData),
    Keepalive(PrimaryKeepalive),
}

fn be_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

impl ReplicationMessage {
    /// Parses a CopyData body received in CopyBoth mode.
    pub fn parse(body: Bytes) -> Result<ReplicationMessage, ProtocolError> {
        match body.first() {
            Some(b'w') => {
                if body.len() < 25 {
                    return Err(ProtocolError(format!(
                        "XLogData message of {} bytes is shorter than its 25-byte header",
                        body.len()
                    )));
                }
                Ok(ReplicationMessage::XLogData(XLogData {
                    wal_start: Lsn(be_u64(&body, 1)),
                    wal_end: Lsn(be_u64(&body, 9)),
                    send_time: be_u64(&body, 17) as i64,
                    data: body.slice(25..),
                }))
            }
            Some(b'k') => {
                if body.len() < 18 {
                    return Err(ProtocolError(format!(
                        "keepalive message of {} bytes, expected 18",
                        body.len()
                    )));
                }
                Ok(ReplicationMessage::Keepalive(PrimaryKeepalive {
                    wal_end: Lsn(be_u64(&body, 1)),
                    send_time: be_u64(&body, 9) as i64,
                    reply_requested: body[17] != 0,
                }))
            }
            Some(&t) => Err(ProtocolError(format!(
                "unknown replication message type {:?} (0x{t:02x})",
                t as char
            ))),
            None => Err(ProtocolError("empty CopyData message".into())),
        }
    }
}

/// `r`: what the client has written, flushed and applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StandbyStatusUpdate {
    pub write: Lsn,
    /// For a logical slot this becomes `confirmed_flush_lsn`: the server may discard WAL
    /// before it. Must only ever be a durable position.
    pub flush: Lsn,
    pub apply: Lsn,
    /// Client clock, µs since 2000-01-01.
    pub client_time: i64,
    pub reply_requested: bool,
}

impl StandbyStatusUpdate {
    /// Appends the update as a complete CopyData frame (`d` + length + `r` body).
    pub fn encode(&self, out: &mut BytesMut) {
        out.put_u8(b'd');
        out.put_i32(4 + 34);
        out.put_u8(b'r');
        out.put_u64(self.write.0);
        out.put_u64(self.flush.0);
        out.put_u64(self.apply.0);
        out.put_i64(self.client_time);
        out.put_u8(self.reply_requested as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_incrementally() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[b'Z', 0, 0, 0, 5]);
        assert_eq!(parse_frame(&mut buf).unwrap(), None);
        buf.extend_from_slice(b"I");
        buf.extend_from_slice(&[b'C', 0, 0]);
        let f = parse_frame(&mut buf).unwrap().unwrap();
        assert_eq!((f.tag, &f.body[..]), (b'Z', &b"I"[..]));
        assert_eq!(parse_frame(&mut buf).unwrap(), None);
        assert_eq!(buf.len(), 3);
        let mut bad = BytesMut::from(&[b'Z', 0, 0, 0, 2][..]);
        assert!(parse_frame(&mut bad).is_err());
    }

    #[test]
    fn error_fields() {
        let body =
            b"SERROR\0VERROR\0C42704\0Mreplication slot \"x\" does not exist\0Hcreate it\0\0";
        let e = PgServerError::parse(body);
        assert_eq!(e.severity, "ERROR");
        assert_eq!(e.code, "42704");
        assert_eq!(e.hint.as_deref(), Some("create it"));
        assert!(e.to_string().contains("does not exist"));
        // Truncated input does not panic.
        let _ = PgServerError::parse(b"SERR");
    }

    #[test]
    fn replication_messages() {
        let mut b = BytesMut::new();
        b.put_u8(b'w');
        b.put_u64(0x10);
        b.put_u64(0x20);
        b.put_i64(7);
        b.put_slice(b"Bpayload");
        let ReplicationMessage::XLogData(x) = ReplicationMessage::parse(b.freeze()).unwrap() else {
            panic!()
        };
        assert_eq!(
            (x.wal_start, x.wal_end, x.send_time),
            (Lsn(0x10), Lsn(0x20), 7)
        );
        assert_eq!(&x.data[..], b"Bpayload");
        let mut k = BytesMut::new();
        k.put_u8(b'k');
        k.put_u64(0x30);
        k.put_i64(9);
        k.put_u8(1);
        assert_eq!(
            ReplicationMessage::parse(k.freeze()).unwrap(),
            ReplicationMessage::Keepalive(PrimaryKeepalive {
                wal_end: Lsn(0x30),
                send_time: 9,
                reply_requested: true
            })
        );
        assert!(ReplicationMessage::parse(Bytes::from_static(b"w123")).is_err());
        assert!(ReplicationMessage::parse(Bytes::from_static(b"kshort")).is_err());
        assert!(ReplicationMessage::parse(Bytes::new()).is_err());
    }

    #[test]
    fn status_update_layout() {
        let mut out = BytesMut::new();
        StandbyStatusUpdate {
            write: Lsn(1),
            flush: Lsn(2),
            apply: Lsn(3),
            client_time: 4,
            reply_requested: false,
        }
        .encode(&mut out);
        assert_eq!(out.len(), 1 + 4 + 34);
        assert_eq!(&out[..6], &[b'd', 0, 0, 0, 38, b'r']);
        assert_eq!(out[6 + 15], 2); // low byte of flush
    }

    #[test]
    fn time_conversion() {
        assert_eq!(pg_micros_to_unix_ms(0), 946_684_800_000);
        assert!(pg_now_micros() > 0);
    }
}
