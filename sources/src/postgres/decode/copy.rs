//! Parsing the data of `COPY … TO STDOUT` into rows, in text or binary format.
//!
//! Owns the COPY framing: text lines (tab-separated fields, `\N` for NULL, backslash
//! escapes; [`unescape_copy`], [`parse_copy_line`]) and the binary stream (signature,
//! header, per row a field count and length-prefixed fields, the `-1` trailer), both
//! behind [`CopyDecoder`], which also joins rows split across CopyData messages. The
//! values themselves are parsed by [`super::text`] (text format) and [`super::binary`]
//! (binary format); [`binary_plan`] picks the binary decoders from the type table.
//!
//! Invariants: a table is read in binary format only when every column has a binary
//! decoder, so a row never mixes formats; both formats give the same [`Row`] for the same
//! data; a truncated stream is an error at [`CopyDecoder::finish`], never a short row.
//! Decoding is the snapshot's hot path: fields without escapes are parsed in place and
//! the unescape buffer is reused across rows.

use cdc_schemas::{Row, Value};

use super::binary::{be, decode_binary, BinKind};
use super::builtin_scalar;
use super::text::parse_value;
use crate::postgres::relation::RelationInfo;

/// Undoes COPY text escaping of one field.
pub fn unescape_copy(field: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let mut i = 0;
    while i < field.len() {
        // Copy the run up to the next backslash in one go.
        let run = field[i..]
            .iter()
            .position(|b| *b == b'\\')
            .unwrap_or(field.len() - i);
        out.extend_from_slice(&field[i..i + run]);
        i += run;
        if i >= field.len() {
            break;
        }
        if i + 1 == field.len() {
            out.push(b'\\');
            break;
        }
        let c = field[i + 1];
        i += 2;
        match c {
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'0'..=b'7' => {
                let mut v = (c - b'0') as u32;
                let mut n = 1;
                while n < 3 && i < field.len() && (b'0'..=b'7').contains(&field[i]) {
                    v = v * 8 + (field[i] - b'0') as u32;
                    i += 1;
                    n += 1;
                }
                out.push(v as u8);
            }
            b'x' => {
                let mut v = 0u32;
                let mut n = 0;
                while n < 2 && i < field.len() && field[i].is_ascii_hexdigit() {
                    v = v * 16 + (field[i] as char).to_digit(16).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                out.push(v as u8);
            }
            other => out.push(other),
        }
    }
}

/// Parses one COPY text line into a row of `rel`.
pub fn parse_copy_line(rel: &RelationInfo, line: &[u8], buf: &mut Vec<u8>) -> Result<Row, String> {
    let mut values = Vec::with_capacity(rel.columns.len());
    let mut rest = line;
    for (i, c) in rel.columns.iter().enumerate() {
        if i > 0 {
            if rest.is_empty() {
                return Err(format!(
                    "COPY line has fewer fields than {} columns",
                    rel.columns.len()
                ));
            }
            rest = &rest[1..];
        }
        let end = rest.iter().position(|b| *b == b'\t').unwrap_or(rest.len());
        let f = &rest[..end];
        rest = &rest[end..];
        if f == b"\\N" {
            values.push(Value::Null);
            continue;
        }
        // Most fields have nothing escaped: parse them in place.
        let text = if f.contains(&b'\\') {
            unescape_copy(f, buf);
            buf.as_slice()
        } else {
            f
        };
        values.push(parse_value(&c.kind, text).map_err(|e| format!("column {}: {e}", c.name))?);
    }
    Ok(Row::new(values))
}

/// The binary decoders for `rel`'s columns when every column has one; `None` otherwise
/// (the table is then read in text format: arrays, enums, domains, composites, network
/// and other text-like types). Derived from the type table's `binary` column; computed
/// once per table, not per row.
pub fn binary_plan(rel: &RelationInfo) -> Option<Vec<BinKind>> {
    rel.columns
        .iter()
        .map(|c| {
            let t = builtin_scalar(c.type_oid)?;
            let b = t.binary?;
            (c.kind == t.text).then_some(b)
        })
        .collect()
}

/// The binary COPY signature and the fixed part of its header.
const BINARY_SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";

/// Turns the CopyData messages of one `COPY … TO STDOUT` into rows, in either format.
/// Rows may span messages (the server sends one message per row, but the protocol does
/// not promise it): an incomplete tail is kept until the next message.
pub struct CopyDecoder {
    /// `None`: text format.
    binary: Option<Vec<BinKind>>,
    header_done: bool,
    trailer_seen: bool,
    partial: Vec<u8>,
    unescaped: Vec<u8>,
}

impl CopyDecoder {
    pub fn text() -> Self {
        Self::new(None)
    }

    pub fn binary(plan: Vec<BinKind>) -> Self {
        Self::new(Some(plan))
    }

    fn new(binary: Option<Vec<BinKind>>) -> Self {
        CopyDecoder {
            binary,
            header_done: false,
            trailer_seen: false,
            partial: Vec::new(),
            unescaped: Vec::new(),
        }
    }

    pub fn is_binary(&self) -> bool {
        self.binary.is_some()
    }

    /// Decodes the complete rows in `data` (after what earlier messages left over).
    pub fn feed(
        &mut self,
        rel: &RelationInfo,
        data: &[u8],
        row: &mut dyn FnMut(Row) -> Result<(), String>,
    ) -> Result<(), String> {
        if self.partial.is_empty() {
            let used = self.rows(rel, data, row)?;
            self.partial.extend_from_slice(&data[used..]);
        } else {
            let mut buf = std::mem::take(&mut self.partial);
            buf.extend_from_slice(data);
            let used = self.rows(rel, &buf, row)?;
            buf.drain(..used);
            self.partial = buf;
        }
        Ok(())
    }

    /// The end of the data: anything left over is a truncated row.
    pub fn finish(
        &mut self,
        rel: &RelationInfo,
        row: &mut dyn FnMut(Row) -> Result<(), String>,
    ) -> Result<(), String> {
        let rest = std::mem::take(&mut self.partial);
        match &self.binary {
            None if !rest.is_empty() => row(parse_copy_line(rel, &rest, &mut self.unescaped)?),
            Some(_) if !rest.is_empty() || !self.trailer_seen => {
                Err("the binary COPY data ended inside a row".into())
            }
            _ => Ok(()),
        }
    }

    /// Decodes the complete rows at the start of `buf`; returns the bytes used.
    fn rows(
        &mut self,
        rel: &RelationInfo,
        buf: &[u8],
        row: &mut dyn FnMut(Row) -> Result<(), String>,
    ) -> Result<usize, String> {
        let Some(plan) = &self.binary else {
            let mut used = 0;
            while let Some(nl) = buf[used..].iter().position(|b| *b == b'\n') {
                row(parse_copy_line(
                    rel,
                    &buf[used..used + nl],
                    &mut self.unescaped,
                )?)?;
                used += nl + 1;
            }
            return Ok(used);
        };
        let mut pos = 0;
        if !self.header_done {
            // Signature, flags (i32), header extension length (i32), extension.
            if buf.len() < BINARY_SIGNATURE.len() + 8 {
                return Ok(0);
            }
            if !buf.starts_with(BINARY_SIGNATURE) {
                return Err("not a binary COPY stream".into());
            }
            let ext = u32::from_be_bytes(be(buf, BINARY_SIGNATURE.len() + 4)?) as usize;
            let start = BINARY_SIGNATURE.len() + 8 + ext;
            if buf.len() < start {
                return Ok(0);
            }
            pos = start;
            self.header_done = true;
        }
        let mut values = Vec::new();
        while !self.trailer_seen && buf.len() >= pos + 2 {
            let fields = i16::from_be_bytes([buf[pos], buf[pos + 1]]);
            if fields == -1 {
                self.trailer_seen = true;
                pos += 2;
                break;
            }
            if fields as usize != plan.len() {
                return Err(format!(
                    "binary COPY row has {fields} fields, the table {} columns",
                    plan.len()
                ));
            }
            let mut p = pos + 2;
            values.reserve_exact(plan.len());
            let mut complete = true;
            for (kind, c) in plan.iter().zip(&rel.columns) {
                let Some(len) = buf.get(p..p + 4) else {
                    complete = false;
                    break;
                };
                let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
                p += 4;
                if len < 0 {
                    values.push(Value::Null);
                    continue;
                }
                let Some(field) = buf.get(p..p + len as usize) else {
                    complete = false;
                    break;
                };
                p += len as usize;
                values.push(
                    decode_binary(*kind, field).map_err(|e| format!("column {}: {e}", c.name))?,
                );
            }
            if !complete {
                break;
            }
            row(Row::new(std::mem::take(&mut values)))?;
            pos = p;
        }
        Ok(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_unescape() {
        let mut out = Vec::new();
        unescape_copy(b"a\\tb\\nc\\\\d\\101\\x41", &mut out);
        assert_eq!(out, b"a\tb\nc\\dAA");
        unescape_copy(b"plain", &mut out);
        assert_eq!(out, b"plain");
        unescape_copy(b"end\\", &mut out);
        assert_eq!(out, b"end\\");
        unescape_copy(b"\\\\", &mut out);
        assert_eq!(out, b"\\");
    }
}
