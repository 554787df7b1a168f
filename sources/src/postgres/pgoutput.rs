//! The pgoutput decoder: every message of logical replication protocol versions 1–4.
//!
//! Input is one XLogData payload (a [`Bytes`] slice of the received buffer); column data
//! in tuples stays a slice of it ([`TupleColumn::Text`] / [`TupleColumn::Binary`]), so
//! decoding copies no column bytes. Malformed input is an error naming the message type
//! and the byte offset; the decoder never panics (see the fuzz-style test).
//!
//! Layouts (all integers big-endian, `String` = NUL-terminated UTF-8, `[xid]` = Int32
//! transaction id present only inside a streamed block, between Stream Start and Stream
//! Stop, protocol 2+):
//!
//! ```text
//! B Begin            Int64 final lsn, Int64 commit ts, Int32 xid
//! C Commit           Int8 flags, Int64 commit lsn, Int64 end lsn, Int64 commit ts
//! O Origin           Int64 commit lsn, String name
//! R Relation         [xid] Int32 oid, String namespace, String name, Int8 replica identity,
//!                    Int16 ncols, ncols × (Int8 flags(1=key), String name, Int32 type oid,
//!                    Int32 typmod)
//! Y Type             [xid] Int32 oid, String namespace, String name
//! I Insert           [xid] Int32 relid, 'N', TupleData
//! U Update           [xid] Int32 relid, [('K'|'O'), TupleData], 'N', TupleData
//! D Delete           [xid] Int32 relid, ('K'|'O'), TupleData
//! T Truncate         [xid] Int32 nrels, Int8 options (1 cascade, 2 restart identity),
//!                    nrels × Int32 relid
//! M Message          [xid] Int8 flags (1 transactional), Int64 lsn, String prefix,
//!                    Int32 len, len bytes
//! S Stream Start     Int32 xid, Int8 first segment (1/0)
//! E Stream Stop      (empty)
//! c Stream Commit    Int32 xid, Int8 flags, Int64 commit lsn, Int64 end lsn, Int64 ts
//! A Stream Abort     Int32 xid, Int32 subxid [, Int64 abort lsn, Int64 abort ts]
//!                    (the last two with streaming = parallel, protocol 4)
//! b Begin Prepare    Int64 prepare lsn, Int64 end lsn, Int64 prepare ts, Int32 xid, String gid
//! P Prepare          Int8 flags, Int64 prepare lsn, Int64 end lsn, Int64 ts, Int32 xid, String gid
//! K Commit Prepared  Int8 flags, Int64 commit lsn, Int64 end lsn, Int64 ts, Int32 xid, String gid
//! r Rollback Prep.   Int8 flags, Int64 prepare end lsn, Int64 rollback end lsn,
//!                    Int64 prepare ts, Int64 rollback ts, Int32 xid, String gid
//! p Stream Prepare   Int8 flags, Int64 prepare lsn, Int64 end lsn, Int64 ts, Int32 xid, String gid
//!
//! TupleData          Int16 ncols, ncols × ('n' null | 'u' unchanged TOAST |
//!                    't' Int32 len + text | 'b' Int32 len + binary)
//! ```
//!
//! Timestamps are µs since 2000-01-01 UTC.

use std::fmt;

use bytes::Bytes;
use cdc_schemas::Lsn;

/// A malformed pgoutput message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed pgoutput {} message ({:?}) at byte {offset}: {reason}", type_name(*.msg_type), *.msg_type as char)]
pub struct DecodeError {
    pub msg_type: u8,
    pub offset: usize,
    pub reason: String,
}

/// The protocol name of a message type byte.
pub fn type_name(t: u8) -> &'static str {
    match t {
        b'B' => "Begin",
        b'C' => "Commit",
        b'O' => "Origin",
        b'R' => "Relation",
        b'Y' => "Type",
        b'I' => "Insert",
        b'U' => "Update",
        b'D' => "Delete",
        b'T' => "Truncate",
        b'M' => "Message",
        b'S' => "Stream Start",
        b'E' => "Stream Stop",
        b'c' => "Stream Commit",
        b'A' => "Stream Abort",
        b'b' => "Begin Prepare",
        b'P' => "Prepare",
        b'K' => "Commit Prepared",
        b'r' => "Rollback Prepared",
        b'p' => "Stream Prepare",
        _ => "unknown",
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Begin {
    /// The LSN of the commit record (the transaction's final LSN).
    pub final_lsn: Lsn,
    /// µs since 2000-01-01.
    pub commit_ts: i64,
    pub xid: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Commit {
    pub flags: u8,
    pub commit_lsn: Lsn,
    /// The end of the commit record: the position to confirm once durable.
    pub end_lsn: Lsn,
    pub commit_ts: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub commit_lsn: Lsn,
    pub name: String,
}

/// A table's replica identity: which old values Update/Delete carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaIdentity {
    /// `d`: the primary key.
    Default,
    /// `n`: nothing.
    Nothing,
    /// `f`: all columns.
    Full,
    /// `i`: the columns of a chosen unique index.
    Index,
    Other(u8),
}

impl ReplicaIdentity {
    pub fn from_byte(b: u8) -> Self {
        match b {
            b'd' => ReplicaIdentity::Default,
            b'n' => ReplicaIdentity::Nothing,
            b'f' => ReplicaIdentity::Full,
            b'i' => ReplicaIdentity::Index,
            o => ReplicaIdentity::Other(o),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelationColumn {
    /// Part of the replica identity key.
    pub key: bool,
    pub name: String,
    pub type_oid: u32,
    /// `atttypmod` (-1: none).
    pub type_modifier: i32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relation {
    pub xid: Option<u32>,
    pub id: u32,
    /// The schema; pgoutput sends an empty string for `pg_catalog`.
    pub namespace: String,
    pub name: String,
    pub replica_identity: ReplicaIdentity,
    pub columns: Vec<RelationColumn>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeMessage {
    pub xid: Option<u32>,
    pub oid: u32,
    pub namespace: String,
    pub name: String,
}

/// One column of a tuple.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TupleColumn {
    Null,
    /// A TOASTed value the change did not touch: not sent.
    UnchangedToast,
    /// Text format (the type's output function), a slice of the received buffer.
    Text(Bytes),
    /// Binary format (the type's send function).
    Binary(Bytes),
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TupleData {
    pub columns: Vec<TupleColumn>,
}

/// The old row of an Update or Delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OldTuple {
    /// `K`: only the replica identity key columns are set (others are null).
    Key(TupleData),
    /// `O`: the whole old row (REPLICA IDENTITY FULL).
    Full(TupleData),
}

impl OldTuple {
    pub fn tuple(&self) -> &TupleData {
        match self {
            OldTuple::Key(t) | OldTuple::Full(t) => t,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Insert {
    pub xid: Option<u32>,
    pub relation_id: u32,
    pub new: TupleData,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    pub xid: Option<u32>,
    pub relation_id: u32,
    pub old: Option<OldTuple>,
    pub new: TupleData,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delete {
    pub xid: Option<u32>,
    pub relation_id: u32,
    pub old: OldTuple,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncate {
    pub xid: Option<u32>,
    pub cascade: bool,
    pub restart_identity: bool,
    pub relation_ids: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogicalMessage {
    pub xid: Option<u32>,
    pub transactional: bool,
    pub lsn: Lsn,
    pub prefix: String,
    pub content: Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamStart {
    pub xid: u32,
    pub first_segment: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamCommit {
    pub xid: u32,
    pub flags: u8,
    pub commit_lsn: Lsn,
    pub end_lsn: Lsn,
    pub commit_ts: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamAbort {
    /// The top-level transaction.
    pub xid: u32,
    /// The aborted (sub)transaction; equal to `xid` when the whole transaction aborted.
    pub subxid: u32,
    /// Present with streaming = parallel (protocol 4).
    pub abort_lsn: Option<Lsn>,
    pub abort_ts: Option<i64>,
}

/// Begin Prepare, Prepare and Stream Prepare share this shape (`flags` is 0 for Begin
/// Prepare, which has none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareInfo {
    pub flags: u8,
    pub prepare_lsn: Lsn,
    pub end_lsn: Lsn,
    pub prepare_ts: i64,
    pub xid: u32,
    pub gid: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitPrepared {
    pub flags: u8,
    pub commit_lsn: Lsn,
    pub end_lsn: Lsn,
    pub commit_ts: i64,
    pub xid: u32,
    pub gid: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RollbackPrepared {
    pub flags: u8,
    pub prepare_end_lsn: Lsn,
    pub rollback_end_lsn: Lsn,
    pub prepare_ts: i64,
    pub rollback_ts: i64,
    pub xid: u32,
    pub gid: String,
}

/// One decoded pgoutput message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PgOutputMessage {
    Begin(Begin),
    Commit(Commit),
    Origin(Origin),
    Relation(Relation),
    Type(TypeMessage),
    Insert(Insert),
    Update(Update),
    Delete(Delete),
    Truncate(Truncate),
    Message(LogicalMessage),
    StreamStart(StreamStart),
    StreamStop,
    StreamCommit(StreamCommit),
    StreamAbort(StreamAbort),
    BeginPrepare(PrepareInfo),
    Prepare(PrepareInfo),
    CommitPrepared(CommitPrepared),
    RollbackPrepared(RollbackPrepared),
    StreamPrepare(PrepareInfo),
}

impl PgOutputMessage {
    /// The message's type byte.
    pub fn type_byte(&self) -> u8 {
        match self {
            PgOutputMessage::Begin(_) => b'B',
            PgOutputMessage::Commit(_) => b'C',
            PgOutputMessage::Origin(_) => b'O',
            PgOutputMessage::Relation(_) => b'R',
            PgOutputMessage::Type(_) => b'Y',
            PgOutputMessage::Insert(_) => b'I',
            PgOutputMessage::Update(_) => b'U',
            PgOutputMessage::Delete(_) => b'D',
            PgOutputMessage::Truncate(_) => b'T',
            PgOutputMessage::Message(_) => b'M',
            PgOutputMessage::StreamStart(_) => b'S',
            PgOutputMessage::StreamStop => b'E',
            PgOutputMessage::StreamCommit(_) => b'c',
            PgOutputMessage::StreamAbort(_) => b'A',
            PgOutputMessage::BeginPrepare(_) => b'b',
            PgOutputMessage::Prepare(_) => b'P',
            PgOutputMessage::CommitPrepared(_) => b'K',
            PgOutputMessage::RollbackPrepared(_) => b'r',
            PgOutputMessage::StreamPrepare(_) => b'p',
        }
    }
}

impl fmt::Display for PgOutputMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(type_name(self.type_byte()))
    }
}

struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
    ty: u8,
}

impl<'a> Reader<'a> {
    fn err(&self, reason: impl Into<String>) -> DecodeError {
        DecodeError {
            msg_type: self.ty,
            offset: self.pos,
            reason: reason.into(),
        }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        let buf: &'a [u8] = self.buf;
        match self.pos.checked_add(n).filter(|&e| e <= buf.len()) {
            Some(end) => {
                let s = &buf[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(self.err(format!(
                "truncated: {what} needs {n} bytes, {} left",
                buf.len().saturating_sub(self.pos)
            ))),
        }
    }

    fn u8(&mut self, what: &str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }

    fn i16(&mut self, what: &str) -> Result<i16, DecodeError> {
        let b = self.take(2, what)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn i32(&mut self, what: &str) -> Result<i32, DecodeError> {
        Ok(self.u32(what)? as i32)
    }

    fn i64(&mut self, what: &str) -> Result<i64, DecodeError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    fn lsn(&mut self, what: &str) -> Result<Lsn, DecodeError> {
        Ok(Lsn(self.i64(what)? as u64))
    }

    fn string(&mut self, what: &str) -> Result<String, DecodeError> {
        let rest = &self.buf[self.pos.min(self.buf.len())..];
        let Some(end) = rest.iter().position(|&b| b == 0) else {
            return Err(self.err(format!("{what}: string without terminating NUL")));
        };
        let s = std::str::from_utf8(&rest[..end])
            .map_err(|e| self.err(format!("{what}: not UTF-8: {e}")))?
            .to_string();
        self.pos += end + 1;
        Ok(s)
    }

    fn slice(&mut self, n: usize, what: &str) -> Result<Bytes, DecodeError> {
        let start = self.pos;
        self.take(n, what)?;
        Ok(self.buf.slice(start..start + n))
    }

    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn finish(&self) -> Result<(), DecodeError> {
        if self.remaining() != 0 {
            return Err(self.err(format!(
                "{} unexpected trailing bytes (a streamed-transaction xid mismatch?)",
                self.remaining()
            )));
        }
        Ok(())
    }

    fn tuple(&mut self) -> Result<TupleData, DecodeError> {
        let n = self.i16("column count")?;
        if n < 0 {
            return Err(self.err(format!("negative column count {n}")));
        }
        // Each column takes at least one byte: bound the allocation by the input.
        let mut columns = Vec::with_capacity((n as usize).min(self.remaining()));
        for i in 0..n {
            let kind = self.u8("column kind")?;
            let col = match kind {
                b'n' => TupleColumn::Null,
                b'u' => TupleColumn::UnchangedToast,
                b't' | b'b' => {
                    let len = self.i32("column length")?;
                    if len < 0 {
                        return Err(self.err(format!("column {i}: negative length {len}")));
                    }
                    let data = self.slice(len as usize, "column data")?;
                    if kind == b't' {
                        TupleColumn::Text(data)
                    } else {
                        TupleColumn::Binary(data)
                    }
                }
                other => {
                    return Err(self.err(format!(
                        "column {i}: unknown tuple column kind {:?}",
                        other as char
                    )))
                }
            };
            columns.push(col);
        }
        Ok(TupleData { columns })
    }

    fn xid_if(&mut self, in_stream: bool) -> Result<Option<u32>, DecodeError> {
        if in_stream {
            Ok(Some(self.u32("xid")?))
        } else {
            Ok(None)
        }
    }

    fn prepare_info(&mut self, with_flags: bool) -> Result<PrepareInfo, DecodeError> {
        let flags = if with_flags { self.u8("flags")? } else { 0 };
        Ok(PrepareInfo {
            flags,
            prepare_lsn: self.lsn("prepare lsn")?,
            end_lsn: self.lsn("end lsn")?,
            prepare_ts: self.i64("prepare timestamp")?,
            xid: self.u32("xid")?,
            gid: self.string("gid")?,
        })
    }
}

/// Decodes pgoutput messages, tracking whether it is inside a streamed block (between
/// Stream Start and Stream Stop), where data messages carry a leading xid.
#[derive(Clone, Debug, Default)]
pub struct PgOutputDecoder {
    in_stream: bool,
}

impl PgOutputDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// True between Stream Start and Stream Stop.
    pub fn in_stream(&self) -> bool {
        self.in_stream
    }

    /// Decodes the next message of the stream, following Stream Start / Stop.
    pub fn decode_next(&mut self, data: &Bytes) -> Result<PgOutputMessage, DecodeError> {
        let m = Self::decode(data, self.in_stream)?;
        match m {
            PgOutputMessage::StreamStart(_) => self.in_stream = true,
            PgOutputMessage::StreamStop => self.in_stream = false,
            _ => {}
        }
        Ok(m)
    }

    /// Decodes one message; `in_stream`: it was sent inside a streamed block.
    pub fn decode(data: &Bytes, in_stream: bool) -> Result<PgOutputMessage, DecodeError> {
        let Some(&ty) = data.first() else {
            return Err(DecodeError {
                msg_type: 0,
                offset: 0,
                reason: "empty message".into(),
            });
        };
        let mut r = Reader {
            buf: data,
            pos: 1,
            ty,
        };
        let m = match ty {
            b'B' => PgOutputMessage::Begin(Begin {
                final_lsn: r.lsn("final lsn")?,
                commit_ts: r.i64("commit timestamp")?,
                xid: r.u32("xid")?,
            }),
            b'C' => PgOutputMessage::Commit(Commit {
                flags: r.u8("flags")?,
                commit_lsn: r.lsn("commit lsn")?,
                end_lsn: r.lsn("end lsn")?,
                commit_ts: r.i64("commit timestamp")?,
            }),
            b'O' => PgOutputMessage::Origin(Origin {
                commit_lsn: r.lsn("commit lsn")?,
                name: r.string("origin name")?,
            }),
            b'R' => {
                let xid = r.xid_if(in_stream)?;
                let id = r.u32("relation id")?;
                let namespace = r.string("namespace")?;
                let name = r.string("relation name")?;
                let replica_identity = ReplicaIdentity::from_byte(r.u8("replica identity")?);
                let n = r.i16("column count")?;
                if n < 0 {
                    return Err(r.err(format!("negative column count {n}")));
                }
                let mut columns = Vec::with_capacity((n as usize).min(r.remaining() / 10));
                for _ in 0..n {
                    let flags = r.u8("column flags")?;
                    columns.push(RelationColumn {
                        key: flags & 1 != 0,
                        name: r.string("column name")?,
                        type_oid: r.u32("type oid")?,
                        type_modifier: r.i32("type modifier")?,
                    });
                }
                PgOutputMessage::Relation(Relation {
                    xid,
                    id,
                    namespace,
                    name,
                    replica_identity,
                    columns,
                })
            }
            b'Y' => PgOutputMessage::Type(TypeMessage {
                xid: r.xid_if(in_stream)?,
                oid: r.u32("type oid")?,
                namespace: r.string("namespace")?,
                name: r.string("type name")?,
            }),
            b'I' => {
                let xid = r.xid_if(in_stream)?;
                let relation_id = r.u32("relation id")?;
                match r.u8("tuple marker")? {
                    b'N' => {}
                    o => return Err(r.err(format!("expected 'N', found {:?}", o as char))),
                }
                PgOutputMessage::Insert(Insert {
                    xid,
                    relation_id,
                    new: r.tuple()?,
                })
            }
            b'U' => {
                let xid = r.xid_if(in_stream)?;
                let relation_id = r.u32("relation id")?;
                let mut old = None;
                let new = loop {
                    match r.u8("tuple marker")? {
                        b'K' if old.is_none() => old = Some(OldTuple::Key(r.tuple()?)),
                        b'O' if old.is_none() => old = Some(OldTuple::Full(r.tuple()?)),
                        b'N' => break r.tuple()?,
                        o => {
                            return Err(
                                r.err(format!("expected 'K', 'O' or 'N', found {:?}", o as char))
                            )
                        }
                    }
                };
                PgOutputMessage::Update(Update {
                    xid,
                    relation_id,
                    old,
                    new,
                })
            }
            b'D' => {
                let xid = r.xid_if(in_stream)?;
                let relation_id = r.u32("relation id")?;
                let old = match r.u8("tuple marker")? {
                    b'K' => OldTuple::Key(r.tuple()?),
                    b'O' => OldTuple::Full(r.tuple()?),
                    o => return Err(r.err(format!("expected 'K' or 'O', found {:?}", o as char))),
                };
                PgOutputMessage::Delete(Delete {
                    xid,
                    relation_id,
                    old,
                })
            }
            b'T' => {
                let xid = r.xid_if(in_stream)?;
                let n = r.i32("relation count")?;
                if n < 0 {
                    return Err(r.err(format!("negative relation count {n}")));
                }
                let options = r.u8("options")?;
                let mut relation_ids = Vec::with_capacity((n as usize).min(r.remaining() / 4));
                for _ in 0..n {
                    relation_ids.push(r.u32("relation id")?);
                }
                PgOutputMessage::Truncate(Truncate {
                    xid,
                    cascade: options & 1 != 0,
                    restart_identity: options & 2 != 0,
                    relation_ids,
                })
            }
            b'M' => {
                let xid = r.xid_if(in_stream)?;
                let flags = r.u8("flags")?;
                let lsn = r.lsn("lsn")?;
                let prefix = r.string("prefix")?;
                let len = r.i32("content length")?;
                if len < 0 {
                    return Err(r.err(format!("negative content length {len}")));
                }
                PgOutputMessage::Message(LogicalMessage {
                    xid,
                    transactional: flags & 1 != 0,
                    lsn,
                    prefix,
                    content: r.slice(len as usize, "content")?,
                })
            }
            b'S' => PgOutputMessage::StreamStart(StreamStart {
                xid: r.u32("xid")?,
                first_segment: r.u8("first segment flag")? == 1,
            }),
            b'E' => PgOutputMessage::StreamStop,
            b'c' => PgOutputMessage::StreamCommit(StreamCommit {
                xid: r.u32("xid")?,
                flags: r.u8("flags")?,
                commit_lsn: r.lsn("commit lsn")?,
                end_lsn: r.lsn("end lsn")?,
                commit_ts: r.i64("commit timestamp")?,
            }),
            b'A' => {
                let xid = r.u32("xid")?;
                let subxid = r.u32("subtransaction xid")?;
                let (abort_lsn, abort_ts) = if r.remaining() > 0 {
                    (Some(r.lsn("abort lsn")?), Some(r.i64("abort timestamp")?))
                } else {
                    (None, None)
                };
                PgOutputMessage::StreamAbort(StreamAbort {
                    xid,
                    subxid,
                    abort_lsn,
                    abort_ts,
                })
            }
            b'b' => PgOutputMessage::BeginPrepare(r.prepare_info(false)?),
            b'P' => PgOutputMessage::Prepare(r.prepare_info(true)?),
            b'p' => PgOutputMessage::StreamPrepare(r.prepare_info(true)?),
            b'K' => PgOutputMessage::CommitPrepared(CommitPrepared {
                flags: r.u8("flags")?,
                commit_lsn: r.lsn("commit lsn")?,
                end_lsn: r.lsn("end lsn")?,
                commit_ts: r.i64("commit timestamp")?,
                xid: r.u32("xid")?,
                gid: r.string("gid")?,
            }),
            b'r' => PgOutputMessage::RollbackPrepared(RollbackPrepared {
                flags: r.u8("flags")?,
                prepare_end_lsn: r.lsn("prepare end lsn")?,
                rollback_end_lsn: r.lsn("rollback end lsn")?,
                prepare_ts: r.i64("prepare timestamp")?,
                rollback_ts: r.i64("rollback timestamp")?,
                xid: r.u32("xid")?,
                gid: r.string("gid")?,
            }),
            _ => {
                return Err(DecodeError {
                    msg_type: ty,
                    offset: 0,
                    reason: format!("unknown message type 0x{ty:02x}"),
                })
            }
        };
        r.finish()?;
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Builds messages the way pgoutput writes them.
    #[derive(Default)]
    struct W(Vec<u8>);
    impl W {
        fn t(ty: u8) -> W {
            W(vec![ty])
        }
        fn u8(mut self, v: u8) -> W {
            self.0.push(v);
            self
        }
        fn i16(mut self, v: i16) -> W {
            self.0.extend_from_slice(&v.to_be_bytes());
            self
        }
        fn u32(mut self, v: u32) -> W {
            self.0.extend_from_slice(&v.to_be_bytes());
            self
        }
        fn i64(mut self, v: i64) -> W {
            self.0.extend_from_slice(&v.to_be_bytes());
            self
        }
        fn s(mut self, v: &str) -> W {
            self.0.extend_from_slice(v.as_bytes());
            self.0.push(0);
            self
        }
        fn text(self, v: &str) -> W {
            let mut w = self.u8(b't').u32(v.len() as u32);
            w.0.extend_from_slice(v.as_bytes());
            w
        }
        fn b(self) -> Bytes {
            Bytes::from(self.0)
        }
    }

    fn dec(w: W) -> PgOutputMessage {
        PgOutputDecoder::decode(&w.b(), false).unwrap()
    }

    /// One sample of every message type (outside a stream), used as fuzz seeds too.
    fn samples() -> Vec<(Bytes, bool)> {
        let tuple = |w: W| {
            w.i16(4)
                .u8(b'n')
                .u8(b'u')
                .text("héllo")
                .u8(b'b')
                .u32(2)
                .u8(1)
                .u8(2)
        };
        vec![
            (W::t(b'B').i64(100).i64(5).u32(7).b(), false),
            (W::t(b'C').u8(0).i64(90).i64(100).i64(5).b(), false),
            (W::t(b'O').i64(90).s("node1").b(), false),
            (
                W::t(b'R')
                    .u32(16384)
                    .s("public")
                    .s("t")
                    .u8(b'd')
                    .i16(2)
                    .u8(1)
                    .s("id")
                    .u32(23)
                    .u32(u32::MAX)
                    .u8(0)
                    .s("v")
                    .u32(1043)
                    .u32(14)
                    .b(),
                false,
            ),
            (W::t(b'Y').u32(50000).s("public").s("mood").b(), false),
            (tuple(W::t(b'I').u32(16384).u8(b'N')).b(), false),
            (
                tuple(tuple(W::t(b'U').u32(16384).u8(b'O')).u8(b'N')).b(),
                false,
            ),
            (tuple(W::t(b'D').u32(16384).u8(b'K')).b(), false),
            (W::t(b'T').u32(2).u8(3).u32(1).u32(2).b(), false),
            (
                W::t(b'M')
                    .u8(1)
                    .i64(55)
                    .s("pfx")
                    .u32(3)
                    .u8(1)
                    .u8(2)
                    .u8(3)
                    .b(),
                false,
            ),
            (W::t(b'S').u32(9).u8(1).b(), false),
            (W::t(b'E').b(), false),
            (W::t(b'c').u32(9).u8(0).i64(1).i64(2).i64(3).b(), false),
            (W::t(b'A').u32(9).u32(10).b(), false),
            (W::t(b'A').u32(9).u32(9).i64(44).i64(45).b(), false),
            (W::t(b'b').i64(1).i64(2).i64(3).u32(4).s("gid").b(), false),
            (
                W::t(b'P').u8(0).i64(1).i64(2).i64(3).u32(4).s("gid").b(),
                false,
            ),
            (
                W::t(b'K').u8(0).i64(1).i64(2).i64(3).u32(4).s("gid").b(),
                false,
            ),
            (
                W::t(b'r')
                    .u8(0)
                    .i64(1)
                    .i64(2)
                    .i64(3)
                    .i64(4)
                    .u32(5)
                    .s("gid")
                    .b(),
                false,
            ),
            (
                W::t(b'p').u8(0).i64(1).i64(2).i64(3).u32(4).s("gid").b(),
                false,
            ),
            (tuple(W::t(b'I').u32(77).u32(16384).u8(b'N')).b(), true),
            (W::t(b'M').u32(77).u8(1).i64(55).s("p").u32(0).b(), true),
        ]
    }

    #[test]
    fn every_sample_decodes() {
        for (b, s) in samples() {
            let m = PgOutputDecoder::decode(&b, s).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(m.type_byte(), b[0]);
        }
    }

    #[test]
    fn begin_commit_relation() {
        assert_eq!(
            dec(W::t(b'B').i64(0x100).i64(5).u32(7)),
            PgOutputMessage::Begin(Begin {
                final_lsn: Lsn(0x100),
                commit_ts: 5,
                xid: 7
            })
        );
        let PgOutputMessage::Commit(c) = dec(W::t(b'C').u8(0).i64(90).i64(100).i64(5)) else {
            panic!()
        };
        assert_eq!((c.commit_lsn, c.end_lsn), (Lsn(90), Lsn(100)));
        let (b, _) = &samples()[3];
        let PgOutputMessage::Relation(r) = PgOutputDecoder::decode(b, false).unwrap() else {
            panic!()
        };
        assert_eq!(r.namespace, "public");
        assert_eq!(r.replica_identity, ReplicaIdentity::Default);
        assert_eq!(r.columns.len(), 2);
        assert!(r.columns[0].key && !r.columns[1].key);
        assert_eq!(r.columns[0].type_modifier, -1);
        assert_eq!(r.columns[1].type_modifier, 14);
    }

    #[test]
    fn tuples_are_slices_of_the_input() {
        let (b, _) = &samples()[5];
        let PgOutputMessage::Insert(i) = PgOutputDecoder::decode(b, false).unwrap() else {
            panic!()
        };
        assert_eq!(i.new.columns[0], TupleColumn::Null);
        assert_eq!(i.new.columns[1], TupleColumn::UnchangedToast);
        let TupleColumn::Text(t) = &i.new.columns[2] else {
            panic!()
        };
        assert_eq!(&t[..], "héllo".as_bytes());
        // Zero-copy: the slice points into the message buffer.
        let range = b.as_ptr() as usize..b.as_ptr() as usize + b.len();
        assert!(range.contains(&(t.as_ptr() as usize)));
        assert_eq!(
            i.new.columns[3],
            TupleColumn::Binary(Bytes::from_static(&[1, 2]))
        );
    }

    #[test]
    fn update_delete_truncate_message_stream() {
        let (b, _) = &samples()[6];
        let PgOutputMessage::Update(u) = PgOutputDecoder::decode(b, false).unwrap() else {
            panic!()
        };
        assert!(matches!(u.old, Some(OldTuple::Full(_))));
        let PgOutputMessage::Truncate(t) = dec(W::t(b'T').u32(2).u8(3).u32(1).u32(2)) else {
            panic!()
        };
        assert!(t.cascade && t.restart_identity);
        assert_eq!(t.relation_ids, vec![1, 2]);
        let PgOutputMessage::StreamAbort(a) = dec(W::t(b'A').u32(9).u32(9).i64(44).i64(45)) else {
            panic!()
        };
        assert_eq!((a.abort_lsn, a.abort_ts), (Some(Lsn(44)), Some(45)));
        // Stream tracking: data messages inside S..E carry an xid.
        let mut d = PgOutputDecoder::new();
        d.decode_next(&W::t(b'S').u32(77).u8(1).b()).unwrap();
        assert!(d.in_stream());
        let (b, _) = &samples()[20];
        let PgOutputMessage::Insert(i) = d.decode_next(b).unwrap() else {
            panic!()
        };
        assert_eq!(i.xid, Some(77));
        d.decode_next(&W::t(b'E').b()).unwrap();
        assert!(!d.in_stream());
        // The same bytes outside a stream are malformed: trailing bytes.
        assert!(d.decode_next(b).is_err());
    }

    #[test]
    fn errors_name_type_and_offset() {
        let e = PgOutputDecoder::decode(&W::t(b'B').i64(1).b(), false).unwrap_err();
        assert_eq!((e.msg_type, e.offset), (b'B', 9));
        assert!(e.to_string().contains("Begin"), "{e}");
        let e = PgOutputDecoder::decode(&W::t(b'I').u32(1).u8(b'X').b(), false).unwrap_err();
        assert_eq!(e.offset, 6);
        let e = PgOutputDecoder::decode(&Bytes::from_static(b"Z"), false).unwrap_err();
        assert!(e.to_string().contains("unknown"));
        assert!(PgOutputDecoder::decode(&Bytes::new(), false).is_err());
        // A huge column count with no data fails fast instead of allocating.
        let e = PgOutputDecoder::decode(&W::t(b'I').u32(1).u8(b'N').i16(i16::MAX).b(), false);
        assert!(e.is_err());
        let e = PgOutputDecoder::decode(&W::t(b'T').u32(u32::MAX >> 1).u8(0).b(), false);
        assert!(e.is_err());
    }

    #[test]
    fn fuzz_never_panics() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
        let seeds = samples();
        let types = b"BCORYIUDTMSEcAbPKrpZ";
        let mut decoded = 0;
        for i in 0..60_000 {
            let (mut v, in_stream) = if i % 4 == 0 {
                // Pure noise with a plausible type byte.
                let len = rng.gen_range(0..64);
                let mut v: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                if !v.is_empty() {
                    v[0] = types[rng.gen_range(0..types.len())];
                }
                (v, rng.gen())
            } else {
                let (b, s) = &seeds[rng.gen_range(0..seeds.len())];
                (b.to_vec(), if rng.gen_ratio(1, 8) { !s } else { *s })
            };
            // Mutations: flip bytes, truncate, extend, splice.
            for _ in 0..rng.gen_range(0..4) {
                match rng.gen_range(0..4) {
                    0 if !v.is_empty() => {
                        let at = rng.gen_range(0..v.len());
                        v[at] = rng.gen();
                    }
                    1 if !v.is_empty() => {
                        let at = rng.gen_range(0..v.len());
                        v.truncate(at);
                    }
                    2 => {
                        let extra = rng.gen_range(1..8);
                        v.extend((0..extra).map(|_| rng.gen::<u8>()));
                    }
                    _ if v.len() > 4 => {
                        // Plant an extreme length/count somewhere.
                        let at = rng.gen_range(0..v.len() - 4);
                        let x: u32 = if rng.gen() { u32::MAX } else { 0x7fff_fff0 };
                        v[at..at + 4].copy_from_slice(&x.to_be_bytes());
                    }
                    _ => {}
                }
            }
            let b = Bytes::from(v);
            if PgOutputDecoder::decode(&b, in_stream).is_ok() {
                decoded += 1;
            }
        }
        // Sanity: the mutator leaves a fair share of messages intact.
        assert!(decoded > 1000, "{decoded}");
    }
}
