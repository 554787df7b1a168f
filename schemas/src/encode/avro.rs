//! Avro binary encoding of values and rows, and the Confluent wire-format frame.
//!
//! Byte layout written here (Avro 1.11 specification, "Binary Encoding"):
//! - `int`/`long`: zig-zag then base-128 varint, least significant group first;
//! - `float`/`double`: IEEE 754 little-endian (NaN and ±infinity kept bit-exact);
//! - `bytes`/`string`: a `long` length, then the bytes (strings as UTF-8);
//! - `boolean`: one byte, 0 or 1;
//! - union: the branch index as a `long`, then the value (nullable columns are
//!   `["null", T]`: index 0 for NULL, 1 for a value);
//! - record: the fields in schema order, nothing between them;
//! - array: one block of `count` (a `long`) items, then a `0` terminator (an empty array is
//!   the terminator alone).
//!
//! Confluent wire format: `0x00`, the schema id as 4 bytes big-endian, the datum.
//!
//! `AvroWriter` is the Avro side of the encoder's format seam (`writer.rs`): frames,
//! union indexes, and nothing for field names or struct ends.
//!
//! Invariant: `write_value` writes exactly the datum the schema derived for the same
//! [`Conv`] by [`crate::encode::avro_schema`] describes.

use crate::encode::config::BinaryHandlingMode;
use crate::encode::connect::{ColumnPlan, Conv};
use crate::encode::convert::{self, mismatch, ValueError};
use crate::encode::hidden::{self, Hidden};
use crate::encode::json::{self, unchanged_not_representable};
use crate::encode::temporal;
use crate::encode::writer::{Field, FormatWriter, IdsMissing};
use crate::value::{Row, Value};

/// Appends the Confluent wire-format header.
#[inline]
pub fn write_frame(buf: &mut Vec<u8>, schema_id: u32) {
    buf.push(0);
    buf.extend_from_slice(&schema_id.to_be_bytes());
}

#[inline]
pub fn write_long(buf: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        buf.push((z as u8) | 0x80);
        z >>= 7;
    }
    buf.push(z as u8);
}

#[inline]
pub fn write_bytes(buf: &mut Vec<u8>, b: &[u8]) {
    write_long(buf, b.len() as i64);
    buf.extend_from_slice(b);
}

#[inline]
pub fn write_string(buf: &mut Vec<u8>, s: &str) {
    write_bytes(buf, s.as_bytes());
}

#[inline]
pub fn write_bool(buf: &mut Vec<u8>, b: bool) {
    buf.push(b as u8);
}

/// Writes a string whose length is only known after formatting it: reserve one length
/// byte (enough for up to 63 bytes, which every temporal text is), fix it up afterwards,
/// and shift the text in the rare case the length needs more varint bytes.
pub(crate) fn write_formatted(buf: &mut Vec<u8>, f: impl FnOnce(&mut Vec<u8>)) {
    let start = buf.len();
    buf.push(0);
    f(buf);
    let len = buf.len() - start - 1;
    if len <= 63 {
        buf[start] = (len as u8) << 1;
    } else {
        let mut prefix = Vec::with_capacity(10);
        write_long(&mut prefix, len as i64);
        buf.splice(start..start + 1, prefix);
    }
}

fn write_binary(buf: &mut Vec<u8>, bytes: &[u8], mode: BinaryHandlingMode) {
    use base64::Engine;
    match mode {
        BinaryHandlingMode::Bytes => write_bytes(buf, bytes),
        BinaryHandlingMode::Base64 | BinaryHandlingMode::Base64UrlSafe => {
            let n = base64::encoded_len(bytes.len(), true).unwrap_or(0);
            write_long(buf, n as i64);
            let start = buf.len();
            buf.resize(start + n, 0);
            let engine = if mode == BinaryHandlingMode::Base64 {
                &base64::engine::general_purpose::STANDARD
            } else {
                &base64::engine::general_purpose::URL_SAFE
            };
            let _ = engine.encode_slice(bytes, &mut buf[start..]);
        }
        BinaryHandlingMode::Hex => {
            write_long(buf, bytes.len() as i64 * 2);
            convert::push_hex(buf, bytes);
        }
    }
}

/// Writes one non-NULL value (or the unavailable placeholder for [`Value::Unchanged`]).
pub(crate) fn write_value(
    buf: &mut Vec<u8>,
    conv: &Conv,
    v: &Value,
    placeholder: &str,
) -> Result<(), ValueError> {
    // A `Value::Raw` fits no arm below (Avro has no place for a value outside its
    // schema): its mismatch error takes `carry_hidden`'s cold path.
    if let Value::Unchanged = v {
        return write_placeholder(buf, conv, placeholder);
    }
    match conv {
        Conv::Bool => match v {
            Value::Bool(b) => write_bool(buf, *b),
            other => return Err(mismatch("Bool", other)),
        },
        Conv::BitBool => write_bool(buf, convert::first_bit(v)?),
        Conv::Int16 => write_long(
            buf,
            convert::int_in(v, i16::MIN as i64, i16::MAX as i64, "Int16")?,
        ),
        Conv::Int32 => write_long(
            buf,
            convert::int_in(v, i32::MIN as i64, i32::MAX as i64, "Int32")?,
        ),
        Conv::Int64 | Conv::UInt64Long => {
            write_long(buf, convert::int_in(v, i64::MIN, i64::MAX, "Int64")?)
        }
        Conv::Year => write_long(
            buf,
            convert::int_in(v, i32::MIN as i64, i32::MAX as i64, "Year")?,
        ),
        Conv::UInt64Precise => write_bytes(buf, convert::unsigned_decimal(v)?.as_slice()),
        Conv::Float32 => match v {
            Value::Float32(f) => buf.extend_from_slice(&f.to_le_bytes()),
            other => return Err(mismatch("Float32", other)),
        },
        Conv::Float64 => match v {
            Value::Float64(f) => buf.extend_from_slice(&f.to_le_bytes()),
            Value::Float32(f) => buf.extend_from_slice(&(*f as f64).to_le_bytes()),
            other => return Err(mismatch("Float64", other)),
        },
        Conv::DecimalPrecise { scale } => match v {
            Value::Decimal(d) => write_bytes(buf, convert::unscaled_at(d, *scale)?.as_slice()),
            other => return Err(mismatch("Decimal", other)),
        },
        Conv::DecimalVariable => match v {
            Value::Decimal(d) => {
                let (bytes, scale) = convert::unscaled_own(d)?;
                write_long(buf, scale as i64);
                write_bytes(buf, bytes.as_slice());
            }
            other => return Err(mismatch("Decimal", other)),
        },
        Conv::DecimalDouble => buf.extend_from_slice(&convert::decimal_f64(v)?.to_le_bytes()),
        Conv::DecimalString => match v {
            Value::Decimal(d) => write_string(buf, &d.to_string()),
            other => return Err(mismatch("Decimal", other)),
        },
        Conv::Text => match v {
            Value::Text(s) | Value::Json(s) => write_string(buf, s),
            other => return Err(mismatch("Text", other)),
        },
        Conv::Bytes(mode) => match v {
            Value::Bytes(b) => write_binary(buf, b, *mode),
            other => return Err(mismatch("Bytes", other)),
        },
        Conv::Uuid => match v {
            Value::Uuid(u) => write_bytes(buf, &convert::uuid_text(u)),
            Value::Text(s) => write_string(buf, s),
            other => return Err(mismatch("Uuid", other)),
        },
        Conv::DateDays => match v {
            Value::Date(d) => write_long(buf, *d as i64),
            other => return Err(mismatch("Date", other)),
        },
        Conv::TimeMillis => match v {
            Value::Time(us) => write_long(buf, us.div_euclid(1000)),
            other => return Err(mismatch("Time", other)),
        },
        Conv::TimeMicros => match v {
            Value::Time(us) => write_long(buf, *us),
            other => return Err(mismatch("Time", other)),
        },
        Conv::TimestampMillis => match v {
            Value::Timestamp(us) | Value::TimestampTz(us) => {
                write_long(buf, temporal::micros_to_millis(*us))
            }
            other => return Err(mismatch("Timestamp", other)),
        },
        Conv::TimestampMicros => match v {
            Value::Timestamp(us) | Value::TimestampTz(us) => write_long(buf, *us),
            other => return Err(mismatch("Timestamp", other)),
        },
        Conv::ZonedTimestamp { frac } => match v {
            Value::TimestampTz(us) | Value::Timestamp(us) => {
                write_formatted(buf, |b| temporal::push_zoned_timestamp(b, *us, *frac))
            }
            other => return Err(mismatch("TimestampTz", other)),
        },
        Conv::ZonedTime => match v {
            Value::TimeTz {
                micros,
                offset_seconds,
            } => write_formatted(buf, |b| {
                temporal::push_zoned_time(b, *micros, *offset_seconds)
            }),
            Value::Time(us) => write_formatted(buf, |b| temporal::push_zoned_time(b, *us, 0)),
            other => return Err(mismatch("TimeTz", other)),
        },
        Conv::IntervalMicros => match v {
            Value::Interval {
                months,
                days,
                micros,
            } => write_long(buf, temporal::interval_micros(*months, *days, *micros)),
            other => return Err(mismatch("Interval", other)),
        },
        Conv::IntervalIso => match v {
            Value::Interval {
                months,
                days,
                micros,
            } => write_formatted(buf, |b| {
                temporal::push_interval_iso(b, *months, *days, *micros)
            }),
            other => return Err(mismatch("Interval", other)),
        },
        Conv::Bits { minimal } => match v {
            Value::Bits { len, bytes } => {
                write_bytes(buf, &convert::bits_le(*len, bytes, *minimal))
            }
            other => return Err(mismatch("Bits", other)),
        },
        Conv::Geometry { point } => {
            let g = convert::geometry_parts(v, *point)?;
            if *point {
                buf.extend_from_slice(&g.xy.0.to_le_bytes());
                buf.extend_from_slice(&g.xy.1.to_le_bytes());
                // `wkb` is optional in Point: union index 1.
                write_long(buf, 1);
            }
            write_bytes(buf, g.wkb);
            match g.srid {
                Some(s) => {
                    write_long(buf, 1);
                    write_long(buf, s as i64);
                }
                None => write_long(buf, 0),
            }
        }
        Conv::Array(inner) => match v {
            Value::Array(items) => {
                // Array elements are optional: union ["null", T].
                if !items.is_empty() {
                    write_long(buf, items.len() as i64);
                    // A nested array where the schema has one level fails as a mismatch:
                    // `carry_hidden` tells it apart (`hidden::reason`).
                    for item in items {
                        if item.is_null() {
                            write_long(buf, 0);
                        } else {
                            write_long(buf, 1);
                            write_value(buf, inner, item, placeholder)?;
                        }
                    }
                }
                write_long(buf, 0);
            }
            other => return Err(mismatch("Array", other)),
        },
    }
    Ok(())
}

fn write_placeholder(buf: &mut Vec<u8>, conv: &Conv, placeholder: &str) -> Result<(), ValueError> {
    match conv {
        Conv::Bytes(mode) => write_binary(buf, placeholder.as_bytes(), *mode),
        c if c.is_stringy() => write_string(buf, placeholder),
        c if c.is_bytes() => write_bytes(buf, placeholder.as_bytes()),
        Conv::Array(inner) => {
            write_long(buf, 1);
            write_long(buf, 1);
            write_placeholder(buf, inner, placeholder)?;
            write_long(buf, 0);
        }
        _ => return Err(unchanged_not_representable()),
    }
    Ok(())
}

/// Writes a row as an Avro record of the planned columns. Inlined into its two callers
/// (key and envelope), as it was before it had a cold path: measurably faster.
#[inline(always)]
pub(crate) fn write_row<'p>(
    buf: &mut Vec<u8>,
    plans: &'p [ColumnPlan],
    row: &Row,
    placeholder: &str,
    hidden: &mut Hidden<'_>,
) -> Result<(), (&'p ColumnPlan, ValueError)> {
    for p in plans {
        let v = row.0.get(p.index).unwrap_or(&Value::Null);
        let start = buf.len();
        if p.optional {
            if v.is_null() {
                buf.push(0);
                continue;
            }
            buf.push(2); // union index 1, zig-zag encoded
        } else if v.is_null() {
            return Err((p, ValueError::NullInRequired));
        }
        if let Err(e) = write_value(buf, &p.conv, v, placeholder) {
            carry_hidden(buf, start, p, v, e, placeholder, hidden)?;
        }
    }
    Ok(())
}

/// A value `write_row` could not write (see `json::carry_hidden`); `start` is before its
/// union branch.
#[cold]
#[inline(never)]
fn carry_hidden<'p>(
    buf: &mut Vec<u8>,
    start: usize,
    p: &'p ColumnPlan,
    v: &Value,
    e: ValueError,
    placeholder: &str,
    hidden: &mut Hidden<'_>,
) -> Result<(), (&'p ColumnPlan, ValueError)> {
    buf.truncate(start);
    if let Some((conv, exact)) = hidden::exact_form(&p.conv, v) {
        if p.optional {
            buf.push(2);
        }
        return write_value(buf, &conv, &exact, placeholder).map_err(|e| (p, e));
    }
    let Some(reason) = hidden::reason(&p.conv, v, &e) else {
        return Err((p, e));
    };
    if !hidden.note(p, v, reason) {
        return Err((p, hidden::fail_error(v, e)));
    }
    match hidden::stand_in(&p.conv, v, p.optional, placeholder) {
        None => buf.push(0),
        Some(s) => {
            if p.optional {
                buf.push(2);
            }
            write_value(buf, &p.conv, &s, placeholder).map_err(|e| (p, e))?;
        }
    }
    Ok(())
}

/// The Avro [`FormatWriter`]: records framed with their schema id, fields positional,
/// unions tagged with the branch index.
pub(crate) struct AvroWriter;

impl FormatWriter for AvroWriter {
    const MEMOIZE: bool = false;

    #[inline]
    fn open_key(&self, out: &mut Vec<u8>, id: Option<u32>) -> Result<(), IdsMissing> {
        write_frame(out, id.ok_or(IdsMissing)?);
        Ok(())
    }

    #[inline]
    fn close_key(&self, _out: &mut Vec<u8>) {}

    #[inline]
    fn open_value(&self, out: &mut Vec<u8>, id: Option<u32>) -> Result<(), IdsMissing> {
        write_frame(out, id.ok_or(IdsMissing)?);
        Ok(())
    }

    #[inline]
    fn close_value(&self, _out: &mut Vec<u8>) {}

    #[inline]
    fn field(&self, _out: &mut Vec<u8>, _f: Field) {}

    #[inline]
    fn end_struct(&self, _out: &mut Vec<u8>) {}

    #[inline]
    fn branch(&self, out: &mut Vec<u8>, index: i64) {
        write_long(out, index);
    }

    #[inline]
    fn null(&self, out: &mut Vec<u8>) {
        write_long(out, 0);
    }

    #[inline]
    fn string(&self, out: &mut Vec<u8>, s: &str) {
        write_string(out, s);
    }

    #[inline]
    fn symbol(&self, out: &mut Vec<u8>, s: &'static str) {
        write_string(out, s);
    }

    #[inline]
    fn long(&self, out: &mut Vec<u8>, v: i64) {
        write_long(out, v);
    }

    #[inline]
    fn pg_sequence(&self, out: &mut Vec<u8>, commit_lsn: u64, lsn: u64) {
        // At most 47 bytes: fits write_formatted's one-byte length, no allocation.
        write_formatted(out, |seq| {
            seq.push(b'[');
            if commit_lsn == 0 {
                seq.extend_from_slice(b"null");
            } else {
                seq.push(b'"');
                json::write_u64(seq, commit_lsn);
                seq.push(b'"');
            }
            seq.extend_from_slice(b",\"");
            json::write_u64(seq, lsn);
            seq.extend_from_slice(b"\"]");
        });
    }

    #[inline]
    fn open_array(&self, out: &mut Vec<u8>, len: usize) {
        if len > 0 {
            write_long(out, len as i64);
        }
    }

    #[inline]
    fn array_item(&self, _out: &mut Vec<u8>, _index: usize) {}

    #[inline]
    fn close_array(&self, out: &mut Vec<u8>) {
        write_long(out, 0);
    }

    #[inline(always)]
    fn row<'p>(
        &self,
        out: &mut Vec<u8>,
        plans: &'p [ColumnPlan],
        row: &Row,
        placeholder: &str,
        hidden: &mut Hidden<'_>,
    ) -> Result<(), (&'p ColumnPlan, ValueError)> {
        write_row(out, plans, row, placeholder, hidden)
    }

    #[inline]
    fn value(
        &self,
        out: &mut Vec<u8>,
        conv: &Conv,
        v: &Value,
        placeholder: &str,
    ) -> Result<(), ValueError> {
        write_value(out, conv, v, placeholder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_varints() {
        let enc = |v: i64| {
            let mut b = Vec::new();
            write_long(&mut b, v);
            b
        };
        assert_eq!(enc(0), [0]);
        assert_eq!(enc(-1), [1]);
        assert_eq!(enc(1), [2]);
        assert_eq!(enc(-64), [0x7f]);
        assert_eq!(enc(64), [0x80, 0x01]);
        assert_eq!(enc(i64::MAX).len(), 10);
        assert_eq!(
            enc(i64::MIN),
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
    }

    /// MySQL spatial columns as Debezium's Geometry / Point structs, read back with the
    /// writer schema by an independent Avro reader.
    #[test]
    fn mysql_geometry_and_point_structs() {
        use crate::encode::ConnectorKind;
        use crate::encode::{Encoder, EncoderConfig, RecordFormat, SchemaIds, SourceInfo};
        use crate::{
            ChangeEvent, Column, ColumnType, MySqlPosition, SourcePosition, TableId, TableSchema,
        };
        use apache_avro::types::Value as A;
        let cols = vec![
            Column::new("id", ColumnType::Int32, "int").not_null(),
            Column::new("g", ColumnType::Geometry { point: false }, "geometry"),
            Column::new("p", ColumnType::Geometry { point: true }, "point").not_null(),
        ];
        let t =
            std::sync::Arc::new(TableSchema::new(TableId::new("db", "t"), cols, &["id"]).unwrap());
        let cfg = EncoderConfig::new(
            SourceInfo::new(ConnectorKind::MySql, "srv", ""),
            RecordFormat::Avro,
        );
        let mut e = Encoder::new(&cfg, &t).unwrap();
        e.set_schema_ids(SchemaIds {
            key: Some(1),
            value: 2,
        });
        let mut g = 4326u32.to_le_bytes().to_vec();
        g.extend_from_slice(&[1, 2, 0, 0, 0, 0, 0, 0, 0]); // LINESTRING EMPTY
        let mut p = 0u32.to_le_bytes().to_vec();
        p.extend_from_slice(&[1, 1, 0, 0, 0]);
        p.extend_from_slice(&1.5f64.to_le_bytes());
        p.extend_from_slice(&(-2f64).to_le_bytes());
        let row = crate::Row::new(vec![
            Value::Int32(1),
            Value::Bytes(g.clone()),
            Value::Bytes(p.clone()),
        ]);
        let ev = ChangeEvent::create(t, row, SourcePosition::Mysql(MySqlPosition::default()), 1)
            .unwrap();
        let schema = apache_avro::Schema::parse_str(e.avro_value_schema()).unwrap();
        let rec = e.records(&ev, 5).unwrap().remove(0).value.unwrap();
        let v = apache_avro::from_avro_datum(&schema, &mut &rec[5..], None).unwrap();
        let A::Record(fields) = v else { panic!() };
        let after = &fields.iter().find(|f| f.0 == "after").unwrap().1;
        let A::Union(1, after) = after else {
            panic!("{after:?}")
        };
        let A::Record(cols) = &**after else { panic!() };
        let get = |n: &str| cols.iter().find(|c| c.0 == n).unwrap().1.clone();
        assert_eq!(
            get("g"),
            A::Union(
                1,
                Box::new(A::Record(vec![
                    ("wkb".into(), A::Bytes(g[4..].to_vec())),
                    ("srid".into(), A::Union(1, Box::new(A::Int(4326)))),
                ]))
            )
        );
        assert_eq!(
            get("p"),
            A::Record(vec![
                ("x".into(), A::Double(1.5)),
                ("y".into(), A::Double(-2.0)),
                (
                    "wkb".into(),
                    A::Union(1, Box::new(A::Bytes(p[4..].to_vec())))
                ),
                ("srid".into(), A::Union(0, Box::new(A::Null))),
            ])
        );
        assert!(e
            .avro_value_schema()
            .contains("\"io.debezium.data.geometry.Point\""));
    }

    #[test]
    fn formatted_strings_get_their_length() {
        let mut b = Vec::new();
        write_formatted(&mut b, |b| b.extend_from_slice(b"abc"));
        assert_eq!(b, [6, b'a', b'b', b'c']);
        let mut b = Vec::new();
        write_formatted(&mut b, |b| b.extend_from_slice(&[b'x'; 100]));
        assert_eq!(&b[..2], &[0xc8, 0x01]);
        assert_eq!(b.len(), 102);
    }
}
