//! The Avro side of [`super::redelete`]: a delete envelope rewritten from the last record
//! of a key, given the record's writer schema (the registry's schema for the id in its
//! Confluent frame).
//!
//! The datum is walked with the schema, without decoding values: each envelope field's
//! byte range is found by skipping (Avro 1.11 binary encoding: varint `int`/`long`, 4/8-byte
//! `float`/`double`, length-prefixed `bytes`/`string`, union = branch index + value, record
//! = fields in order, array/map = blocks of items ending with a 0 count, a negative count
//! followed by the block's byte size, enum = index, fixed = its size). The delete is the
//! same frame, then the fields in schema order with `before` = the bytes of `after`
//! (Debezium's `before` and `after` are the same `["null", Value]` union), `after` = the
//! union's null branch, `op` = `"d"`, `ts_ms` (and `ts_us`, `ts_ns`) = the new time, every other field (`source`,
//! `transaction`, …) copied as it was.

use std::collections::HashMap;

use serde_json::Value as J;

use crate::encode::avro::{write_long, write_string};

/// What the rewrite could not do.
#[derive(Debug, thiserror::Error)]
pub enum AvroRedeleteError {
    #[error("the writer schema: {0}")]
    Schema(String),
    #[error("the datum does not match its writer schema at byte {0}")]
    Datum(usize),
    #[error("the writer schema is not a change envelope (no {0:?} field)")]
    NotEnvelope(&'static str),
}

type Result<T> = std::result::Result<T, AvroRedeleteError>;

#[derive(Debug, Clone)]
enum Node {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Record(Vec<(String, usize)>),
    Enum,
    Array(usize),
    Map(usize),
    Union(Vec<usize>),
    Fixed(usize),
    /// A record being parsed (its fields come later).
    Pending,
}

/// A parsed writer schema.
#[derive(Debug)]
pub struct WriterSchema {
    nodes: Vec<Node>,
    root: usize,
}

impl WriterSchema {
    pub fn parse(text: &str) -> Result<WriterSchema> {
        let j: J =
            serde_json::from_str(text).map_err(|e| AvroRedeleteError::Schema(e.to_string()))?;
        let mut p = Parser {
            nodes: Vec::new(),
            names: HashMap::new(),
        };
        let root = p.parse(&j, None)?;
        Ok(WriterSchema {
            nodes: p.nodes,
            root,
        })
    }

    /// The envelope's fields: (name, type, byte range) over `datum` (without the frame).
    fn fields(&self, datum: &[u8]) -> Result<Vec<(&str, usize, std::ops::Range<usize>)>> {
        let Node::Record(fields) = &self.nodes[self.root] else {
            return Err(AvroRedeleteError::NotEnvelope("op"));
        };
        let mut pos = 0;
        let mut out = Vec::with_capacity(fields.len());
        for (name, ty) in fields {
            let end = self.skip(datum, pos, *ty)?;
            out.push((name.as_str(), *ty, pos..end));
            pos = end;
        }
        if pos != datum.len() {
            return Err(AvroRedeleteError::Datum(pos));
        }
        Ok(out)
    }

    fn skip(&self, d: &[u8], pos: usize, node: usize) -> Result<usize> {
        let fixed = |n: usize| {
            if pos + n <= d.len() {
                Ok(pos + n)
            } else {
                Err(AvroRedeleteError::Datum(pos))
            }
        };
        match &self.nodes[node] {
            Node::Null => Ok(pos),
            Node::Boolean => fixed(1),
            Node::Int | Node::Long | Node::Enum => read_long(d, pos).map(|(_, p)| p),
            Node::Float => fixed(4),
            Node::Double => fixed(8),
            Node::Fixed(n) => fixed(*n),
            Node::Bytes | Node::String => {
                let (len, p) = read_long(d, pos)?;
                let len = usize::try_from(len).map_err(|_| AvroRedeleteError::Datum(pos))?;
                if p + len > d.len() {
                    return Err(AvroRedeleteError::Datum(p));
                }
                Ok(p + len)
            }
            Node::Record(fields) => fields
                .iter()
                .try_fold(pos, |p, (_, ty)| self.skip(d, p, *ty)),
            Node::Union(branches) => {
                let (i, p) = read_long(d, pos)?;
                let b = usize::try_from(i)
                    .ok()
                    .and_then(|i| branches.get(i))
                    .ok_or(AvroRedeleteError::Datum(pos))?;
                self.skip(d, p, *b)
            }
            Node::Array(items) | Node::Map(items) => {
                let is_map = matches!(self.nodes[node], Node::Map(_));
                let mut p = pos;
                loop {
                    let (count, q) = read_long(d, p)?;
                    p = q;
                    if count == 0 {
                        return Ok(p);
                    }
                    if count < 0 {
                        // A block with its byte size: skip it whole.
                        let (size, q) = read_long(d, p)?;
                        let size =
                            usize::try_from(size).map_err(|_| AvroRedeleteError::Datum(p))?;
                        if q + size > d.len() {
                            return Err(AvroRedeleteError::Datum(q));
                        }
                        p = q + size;
                        continue;
                    }
                    for _ in 0..count {
                        if is_map {
                            let (len, q) = read_long(d, p)?;
                            p = q + usize::try_from(len)
                                .map_err(|_| AvroRedeleteError::Datum(q))?;
                        }
                        p = self.skip(d, p, *items)?;
                    }
                }
            }
            Node::Pending => Err(AvroRedeleteError::Schema(
                "a record used inside itself before its end".into(),
            )),
        }
    }

    /// The union branch of `node` holding `want`.
    fn branch(&self, node: usize, want: fn(&Node) -> bool) -> Option<usize> {
        match &self.nodes[node] {
            Node::Union(b) => b.iter().position(|&n| want(&self.nodes[n])),
            _ => None,
        }
    }

    /// Whether `datum` (no frame) is a delete envelope.
    pub fn is_delete(&self, datum: &[u8]) -> Result<bool> {
        let fields = self.fields(datum)?;
        let (_, _, r) = fields
            .iter()
            .find(|f| f.0 == "op")
            .ok_or(AvroRedeleteError::NotEnvelope("op"))?;
        Ok(read_string(datum, r.start)? == b"d")
    }

    /// The delete made from `last` (a framed datum of this schema), stamped `ts_ms`;
    /// `Ok(None)` when `last` holds no row (a delete, a truncate, a message).
    pub fn delete_from_last(&self, last: &[u8], ts_ms: i64) -> Result<Option<Vec<u8>>> {
        if last.len() < 5 || last[0] != 0 {
            return Err(AvroRedeleteError::Datum(0));
        }
        let datum = &last[5..];
        let fields = self.fields(datum)?;
        let field = |name: &'static str| {
            fields
                .iter()
                .find(|f| f.0 == name)
                .cloned()
                .ok_or(AvroRedeleteError::NotEnvelope(name))
        };
        let (_, after_ty, after) = field("after")?;
        let (_, before_ty, _) = field("before")?;
        let (_, _, op) = field("op")?;
        if !matches!(read_string(datum, op.start)?, b"c" | b"r" | b"u") {
            return Ok(None);
        }
        let null = self
            .branch(after_ty, |n| matches!(n, Node::Null))
            .ok_or(AvroRedeleteError::NotEnvelope("after"))?;
        if read_long(datum, after.start)?.0 == null as i64 {
            return Ok(None);
        }
        // `before` takes `after`'s bytes: the same union (by structure: its branches).
        if !self.same_shape(before_ty, after_ty) {
            return Err(AvroRedeleteError::NotEnvelope("before"));
        }
        let mut out = Vec::with_capacity(last.len() + after.len());
        out.extend_from_slice(&last[..5]);
        for (name, ty, range) in &fields {
            match *name {
                "before" => out.extend_from_slice(&datum[after.clone()]),
                "after" => write_long(&mut out, null as i64),
                "op" => write_string(&mut out, "d"),
                // The processing-time fields say when the delete was made, all three alike.
                "ts_ms" | "ts_us" | "ts_ns" => {
                    let t = match *name {
                        "ts_ms" => ts_ms,
                        "ts_us" => ts_ms.saturating_mul(1_000),
                        _ => ts_ms.saturating_mul(1_000_000),
                    };
                    match &self.nodes[*ty] {
                        Node::Long => write_long(&mut out, t),
                        Node::Union(_) => match self.branch(*ty, |n| matches!(n, Node::Long)) {
                            Some(b) => {
                                write_long(&mut out, b as i64);
                                write_long(&mut out, t);
                            }
                            None => out.extend_from_slice(&datum[range.clone()]),
                        },
                        _ => out.extend_from_slice(&datum[range.clone()]),
                    }
                }
                _ => out.extend_from_slice(&datum[range.clone()]),
            }
        }
        Ok(Some(out))
    }

    fn same_shape(&self, a: usize, b: usize) -> bool {
        if a == b {
            return true;
        }
        match (&self.nodes[a], &self.nodes[b]) {
            (Node::Union(x), Node::Union(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(p, q)| self.same_shape(*p, *q))
            }
            (Node::Null, Node::Null) => true,
            _ => false,
        }
    }
}

struct Parser {
    nodes: Vec<Node>,
    names: HashMap<String, usize>,
}

impl Parser {
    fn push(&mut self, n: Node) -> usize {
        self.nodes.push(n);
        self.nodes.len() - 1
    }

    fn primitive(name: &str) -> Option<Node> {
        Some(match name {
            "null" => Node::Null,
            "boolean" => Node::Boolean,
            "int" => Node::Int,
            "long" => Node::Long,
            "float" => Node::Float,
            "double" => Node::Double,
            "bytes" => Node::Bytes,
            "string" => Node::String,
            _ => return None,
        })
    }

    fn full_name(name: &str, ns: Option<&str>) -> String {
        match ns {
            Some(ns) if !name.contains('.') && !ns.is_empty() => format!("{ns}.{name}"),
            _ => name.to_string(),
        }
    }

    fn parse(&mut self, j: &J, ns: Option<&str>) -> Result<usize> {
        match j {
            J::String(s) => {
                if let Some(p) = Self::primitive(s) {
                    return Ok(self.push(p));
                }
                let full = Self::full_name(s, ns);
                self.names
                    .get(&full)
                    .or_else(|| self.names.get(s.as_str()))
                    .copied()
                    .ok_or_else(|| AvroRedeleteError::Schema(format!("unknown type {s:?}")))
            }
            J::Array(items) => {
                let branches = items
                    .iter()
                    .map(|i| self.parse(i, ns))
                    .collect::<Result<Vec<_>>>()?;
                Ok(self.push(Node::Union(branches)))
            }
            J::Object(m) => {
                let ty = m
                    .get("type")
                    .ok_or_else(|| AvroRedeleteError::Schema("a type without \"type\"".into()))?;
                let kind = match ty {
                    J::String(k) => k.as_str(),
                    // {"type": {...}} or {"type": [...]}: the inner type.
                    other => return self.parse(other, ns),
                };
                let named = |m: &serde_json::Map<String, J>| -> Result<(String, Option<String>)> {
                    let name = m.get("name").and_then(J::as_str).ok_or_else(|| {
                        AvroRedeleteError::Schema(format!("a {kind} without a name"))
                    })?;
                    let own_ns = m.get("namespace").and_then(J::as_str).or(ns);
                    let full = Self::full_name(name, own_ns);
                    let inner_ns = full.rsplit_once('.').map(|(n, _)| n.to_string());
                    Ok((full, inner_ns))
                };
                match kind {
                    "record" | "error" => {
                        let (full, inner_ns) = named(m)?;
                        let at = self.push(Node::Pending);
                        self.names.insert(full, at);
                        let mut fields = Vec::new();
                        for f in m.get("fields").and_then(J::as_array).into_iter().flatten() {
                            let name = f.get("name").and_then(J::as_str).ok_or_else(|| {
                                AvroRedeleteError::Schema("a field without a name".into())
                            })?;
                            let ty = f.get("type").ok_or_else(|| {
                                AvroRedeleteError::Schema(format!("field {name:?} without a type"))
                            })?;
                            let t = self.parse(ty, inner_ns.as_deref())?;
                            fields.push((name.to_string(), t));
                        }
                        self.nodes[at] = Node::Record(fields);
                        Ok(at)
                    }
                    "enum" => {
                        let (full, _) = named(m)?;
                        let at = self.push(Node::Enum);
                        self.names.insert(full, at);
                        Ok(at)
                    }
                    "fixed" => {
                        let (full, _) = named(m)?;
                        let size = m.get("size").and_then(J::as_u64).ok_or_else(|| {
                            AvroRedeleteError::Schema("a fixed without a size".into())
                        })?;
                        let at = self.push(Node::Fixed(size as usize));
                        self.names.insert(full, at);
                        Ok(at)
                    }
                    "array" => {
                        let items = m.get("items").ok_or_else(|| {
                            AvroRedeleteError::Schema("an array without items".into())
                        })?;
                        let i = self.parse(items, ns)?;
                        Ok(self.push(Node::Array(i)))
                    }
                    "map" => {
                        let values = m.get("values").ok_or_else(|| {
                            AvroRedeleteError::Schema("a map without values".into())
                        })?;
                        let v = self.parse(values, ns)?;
                        Ok(self.push(Node::Map(v)))
                    }
                    // A primitive with attributes (logical types, connect.* properties).
                    other => Self::primitive(other).map(|p| self.push(p)).ok_or_else(|| {
                        AvroRedeleteError::Schema(format!("unknown type {other:?}"))
                    }),
                }
            }
            _ => Err(AvroRedeleteError::Schema(format!("not a type: {j}"))),
        }
    }
}

/// A zig-zag varint `long` at `pos`: (value, next position).
fn read_long(d: &[u8], pos: usize) -> Result<(i64, usize)> {
    let mut z: u64 = 0;
    let mut shift = 0;
    let mut p = pos;
    loop {
        let b = *d.get(p).ok_or(AvroRedeleteError::Datum(p))?;
        p += 1;
        if shift >= 64 {
            return Err(AvroRedeleteError::Datum(pos));
        }
        z |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    Ok((((z >> 1) as i64) ^ -((z & 1) as i64), p))
}

/// The bytes of a `string` at `pos`.
fn read_string(d: &[u8], pos: usize) -> Result<&[u8]> {
    let (len, p) = read_long(d, pos)?;
    let len = usize::try_from(len).map_err(|_| AvroRedeleteError::Datum(pos))?;
    d.get(p..p + len).ok_or(AvroRedeleteError::Datum(p))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use apache_avro::types::Value as A;

    use super::*;
    use crate::encode::{
        ConnectorKind, Encoder, EncoderConfig, RecordFormat, SchemaIds, SourceInfo,
    };
    use crate::{
        ChangeEvent, Column, ColumnType, Lsn, PgPosition, Row, SourcePosition, TableId,
        TableSchema, Value,
    };

    fn table() -> Arc<TableSchema> {
        let cols = vec![
            Column::new("id", ColumnType::Int64, "int8").not_null(),
            Column::new("name", ColumnType::Text { max_len: None }, "text"),
            Column::new("n", ColumnType::Int32, "int4"),
            Column::new(
                "tags",
                ColumnType::Array(Box::new(ColumnType::Int32)),
                "_int4",
            ),
            Column::new(
                "at",
                ColumnType::TimestampTz { precision: None },
                "timestamptz",
            ),
            Column::new("ok", ColumnType::Bool, "bool"),
            Column::new("f", ColumnType::Float64, "float8"),
        ];
        Arc::new(TableSchema::new(TableId::new("public", "t"), cols, &["id"]).unwrap())
    }

    fn row(id: i64, name: &str) -> Row {
        Row::new(vec![
            Value::Int64(id),
            Value::Text(name.into()),
            Value::Null,
            Value::Array(vec![Value::Int32(1), Value::Null, Value::Int32(-300)]),
            Value::TimestampTz(1_700_000_000_123_456),
            Value::Bool(true),
            Value::Float64(-0.5),
        ])
    }

    fn encoder() -> Encoder {
        let cfg = EncoderConfig::new(
            SourceInfo::new(ConnectorKind::Postgres, "t", "db"),
            RecordFormat::Avro,
        );
        let mut e = Encoder::new(&cfg, &table()).unwrap();
        e.set_schema_ids(SchemaIds {
            key: Some(1),
            value: 2,
        });
        e
    }

    fn value_of(e: &Encoder, ev: &ChangeEvent) -> Vec<u8> {
        e.records(ev, 5_000_000).unwrap().remove(0).value.unwrap()
    }

    fn pos() -> SourcePosition {
        SourcePosition::Postgres(PgPosition {
            commit_lsn: Lsn(10),
            lsn: Lsn(9),
            tx_id: Some(3),
            xmin: None,
        })
    }

    fn fields(v: A) -> Vec<(String, A)> {
        match v {
            A::Record(f) => f,
            other => panic!("not a record: {other:?}"),
        }
    }

    #[test]
    fn a_delete_rewritten_from_an_update_decodes_with_the_writer_schema() {
        let e = encoder();
        let t = table();
        let schema = apache_avro::Schema::parse_str(e.avro_value_schema()).unwrap();
        let w = WriterSchema::parse(e.avro_value_schema()).unwrap();
        let last = value_of(
            &e,
            &ChangeEvent::update(t.clone(), Some(row(7, "old")), row(7, "new"), pos(), 1).unwrap(),
        );
        assert!(!w.is_delete(&last[5..]).unwrap());
        let d = w.delete_from_last(&last, 42).unwrap().unwrap();
        assert_eq!(&d[..5], &last[..5], "the same frame (schema id)");
        assert!(w.is_delete(&d[5..]).unwrap());
        let got = fields(apache_avro::from_avro_datum(&schema, &mut &d[5..], None).unwrap());
        let old = fields(apache_avro::from_avro_datum(&schema, &mut &last[5..], None).unwrap());
        let get = |f: &[(String, A)], n: &str| f.iter().find(|x| x.0 == n).unwrap().1.clone();
        assert_eq!(
            get(&got, "before"),
            get(&old, "after"),
            "before = the last row"
        );
        assert_eq!(get(&got, "after"), A::Union(0, Box::new(A::Null)));
        assert_eq!(get(&got, "op"), A::String("d".into()));
        assert_eq!(get(&got, "ts_ms"), A::Union(1, Box::new(A::Long(42))));
        assert_eq!(get(&got, "source"), get(&old, "source"));
        assert_eq!(get(&got, "transaction"), get(&old, "transaction"));
        // The same as the encoder's own delete of that row, but for ts_ms.
        let own = value_of(
            &e,
            &ChangeEvent::delete(t, row(7, "new"), pos(), 1).unwrap(),
        );
        let own = fields(apache_avro::from_avro_datum(&schema, &mut &own[5..], None).unwrap());
        assert_eq!(get(&got, "before"), get(&own, "before"));
    }

    #[test]
    fn no_delete_from_a_delete_nor_from_a_datum_that_does_not_match() {
        let e = encoder();
        let w = WriterSchema::parse(e.avro_value_schema()).unwrap();
        let del = value_of(
            &e,
            &ChangeEvent::delete(table(), row(1, "x"), pos(), 1).unwrap(),
        );
        assert!(w.is_delete(&del[5..]).unwrap());
        assert!(w.delete_from_last(&del, 1).unwrap().is_none());
        let read = value_of(
            &e,
            &ChangeEvent::read(table(), row(1, "x"), pos(), 1).unwrap(),
        );
        assert!(
            w.delete_from_last(&read[..read.len() - 3], 1).is_err(),
            "truncated"
        );
        assert!(
            w.delete_from_last(b"\x01\0\0\0\x02", 1).is_err(),
            "not a frame"
        );
        assert!(WriterSchema::parse("{\"type\":\"nope\"}").is_err());
    }
}
