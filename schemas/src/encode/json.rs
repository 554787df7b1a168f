//! The Kafka Connect JSON converter's output, written directly into a byte buffer.
//!
//! Owns: JSON string escaping, number formatting (NaN and ±infinity as the strings
//! `"NaN"`, `"Infinity"`, `"-Infinity"`, as Jackson writes them for the JSON converter),
//! the payload form of every `Conv`, and the rendering of a [`ConnectSchema`] as the
//! converter's `"schema"` object (key order as `JsonConverter.asJsonSchema` emits it),
//! and `JsonWriter`, the JSON side of the encoder's format seam (`writer.rs`): keys,
//! braces, `null`s and the schemas-enabled wrapper around a record.
//!
//! Invariant: every value function appends exactly one complete JSON value (or nothing on
//! error, except that a failed row may leave a partial value the caller discards by
//! truncating to its saved length).

use base64::Engine;

use crate::encode::config::BinaryHandlingMode;
use crate::encode::connect::{ColumnPlan, ConnectSchema, ConnectType, Conv};
use crate::encode::convert::{self, mismatch, ValueError};
use crate::encode::hidden::{self, Hidden, HiddenReason};
use crate::encode::temporal;
use crate::encode::writer::{Field, FormatWriter, IdsMissing, ValueCtx};
use crate::value::{Row, Value};

/// Appends `s` as a JSON string (quotes included). Only `"`, `\` and control characters
/// are escaped; everything else stays UTF-8, as Jackson does.
pub fn write_str(buf: &mut Vec<u8>, s: &str) {
    buf.reserve(s.len() + 2);
    buf.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        // Skip 8 bytes at a time while none of them needs escaping (SWAR: no byte below
        // 0x20, none equal to '"' or '\\'); most text never leaves this loop.
        if let Some(chunk) = bytes.get(i..i + 8) {
            let x = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
            if !needs_escape8(x) {
                i += 8;
                continue;
            }
        }
        let b = bytes[i];
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => {
                buf.extend_from_slice(&bytes[start..i]);
                const HEX: &[u8; 16] = b"0123456789abcdef";
                buf.extend_from_slice(b"\\u00");
                buf.push(HEX[(b >> 4) as usize]);
                buf.push(HEX[(b & 0xf) as usize]);
                i += 1;
                start = i;
                continue;
            }
            _ => {
                i += 1;
                continue;
            }
        };
        buf.extend_from_slice(&bytes[start..i]);
        buf.extend_from_slice(esc);
        i += 1;
        start = i;
    }
    buf.extend_from_slice(&bytes[start..]);
    buf.push(b'"');
}

/// True when any of the 8 bytes in `x` is a control character, `"` or `\\`.
#[inline]
fn needs_escape8(x: u64) -> bool {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let has_zero = |v: u64| v.wrapping_sub(LO) & !v & HI;
    let below_space = x.wrapping_sub(LO * 0x20) & !x & HI;
    (below_space | has_zero(x ^ (LO * b'"' as u64)) | has_zero(x ^ (LO * b'\\' as u64))) != 0
}

pub fn write_i64(buf: &mut Vec<u8>, v: i64) {
    let mut b = itoa::Buffer::new();
    buf.extend_from_slice(b.format(v).as_bytes());
}

pub fn write_u64(buf: &mut Vec<u8>, v: u64) {
    let mut b = itoa::Buffer::new();
    buf.extend_from_slice(b.format(v).as_bytes());
}

pub fn write_f64(buf: &mut Vec<u8>, v: f64) {
    if v.is_finite() {
        let mut b = ryu::Buffer::new();
        buf.extend_from_slice(b.format_finite(v).as_bytes());
    } else {
        write_non_finite(buf, v.is_nan(), v > 0.0);
    }
}

pub fn write_f32(buf: &mut Vec<u8>, v: f32) {
    if v.is_finite() {
        let mut b = ryu::Buffer::new();
        buf.extend_from_slice(b.format_finite(v).as_bytes());
    } else {
        write_non_finite(buf, v.is_nan(), v > 0.0);
    }
}

fn write_non_finite(buf: &mut Vec<u8>, nan: bool, positive: bool) {
    buf.extend_from_slice(if nan {
        b"\"NaN\""
    } else if positive {
        b"\"Infinity\""
    } else {
        b"\"-Infinity\""
    });
}

/// Appends `bytes` as a JSON string of base64 (standard or URL-safe alphabet, padded).
pub fn write_base64(buf: &mut Vec<u8>, bytes: &[u8], url_safe: bool) {
    let start = buf.len();
    let n = base64::encoded_len(bytes.len(), true).unwrap_or(0);
    buf.resize(start + n + 2, b'"');
    let out = &mut buf[start + 1..start + 1 + n];
    let written = if url_safe {
        base64::engine::general_purpose::URL_SAFE.encode_slice(bytes, out)
    } else {
        base64::engine::general_purpose::STANDARD.encode_slice(bytes, out)
    };
    debug_assert_eq!(written.ok(), Some(n));
}

fn write_binary(buf: &mut Vec<u8>, bytes: &[u8], mode: BinaryHandlingMode) {
    match mode {
        BinaryHandlingMode::Bytes | BinaryHandlingMode::Base64 => write_base64(buf, bytes, false),
        BinaryHandlingMode::Base64UrlSafe => write_base64(buf, bytes, true),
        BinaryHandlingMode::Hex => {
            buf.push(b'"');
            convert::push_hex(buf, bytes);
            buf.push(b'"');
        }
    }
}

/// Writes one non-NULL value (or the unavailable placeholder for [`Value::Unchanged`]).
pub(crate) fn write_value(
    buf: &mut Vec<u8>,
    conv: &Conv,
    v: &Value,
    ctx: &ValueCtx<'_>,
) -> Result<(), ValueError> {
    // A `Value::Raw` fits no arm below: its mismatch error takes `carry_hidden`'s cold
    // path, which keeps the hot path free of the check.
    if let Value::Unchanged = v {
        return write_placeholder(buf, conv, ctx.placeholder);
    }
    match conv {
        Conv::Bool => match v {
            Value::Bool(b) => buf.extend_from_slice(if *b { b"true" } else { b"false" }),
            other => return Err(mismatch("Bool", other)),
        },
        Conv::BitBool => {
            let b = convert::first_bit(v)?;
            buf.extend_from_slice(if b { b"true" } else { b"false" });
        }
        Conv::Int16 => write_i64(
            buf,
            convert::int_in(v, i16::MIN as i64, i16::MAX as i64, "Int16")?,
        ),
        Conv::Int32 => write_i64(
            buf,
            convert::int_in(v, i32::MIN as i64, i32::MAX as i64, "Int32")?,
        ),
        Conv::Int64 | Conv::UInt64Long => {
            write_i64(buf, convert::int_in(v, i64::MIN, i64::MAX, "Int64")?)
        }
        Conv::Year => write_i64(
            buf,
            convert::int_in(v, i32::MIN as i64, i32::MAX as i64, "Year")?,
        ),
        Conv::UInt64Precise => {
            write_base64(buf, convert::unsigned_decimal(v)?.as_slice(), false);
        }
        Conv::Float32 => match v {
            Value::Float32(f) => write_f32(buf, *f),
            other => return Err(mismatch("Float32", other)),
        },
        Conv::Float64 => match v {
            Value::Float64(f) => write_f64(buf, *f),
            Value::Float32(f) => write_f64(buf, *f as f64),
            other => return Err(mismatch("Float64", other)),
        },
        Conv::DecimalPrecise { scale } => match v {
            Value::Decimal(d) => {
                write_base64(buf, convert::unscaled_at(d, *scale)?.as_slice(), false)
            }
            other => return Err(mismatch("Decimal", other)),
        },
        Conv::DecimalVariable => match v {
            Value::Decimal(d) => {
                let (bytes, scale) = convert::unscaled_own(d)?;
                buf.extend_from_slice(b"{\"scale\":");
                write_i64(buf, scale as i64);
                buf.extend_from_slice(b",\"value\":");
                write_base64(buf, bytes.as_slice(), false);
                buf.push(b'}');
            }
            other => return Err(mismatch("Decimal", other)),
        },
        Conv::DecimalDouble => write_f64(buf, convert::decimal_f64(v)?),
        Conv::DecimalString => match v {
            Value::Decimal(d) => write_str(buf, &d.to_string()),
            other => return Err(mismatch("Decimal", other)),
        },
        Conv::Text => match v {
            Value::Text(s) | Value::Json(s) => write_str(buf, s),
            other => return Err(mismatch("Text", other)),
        },
        Conv::Bytes(mode) => match v {
            Value::Bytes(b) => write_binary(buf, b, *mode),
            other => return Err(mismatch("Bytes", other)),
        },
        Conv::Uuid => match v {
            Value::Uuid(u) => {
                buf.push(b'"');
                buf.extend_from_slice(&convert::uuid_text(u));
                buf.push(b'"');
            }
            Value::Text(s) => write_str(buf, s),
            other => return Err(mismatch("Uuid", other)),
        },
        Conv::DateDays => match v {
            Value::Date(d) => write_i64(buf, *d as i64),
            other => return Err(mismatch("Date", other)),
        },
        Conv::TimeMillis => match v {
            Value::Time(us) => write_i64(buf, us.div_euclid(1000)),
            other => return Err(mismatch("Time", other)),
        },
        Conv::TimeMicros => match v {
            Value::Time(us) => write_i64(buf, *us),
            other => return Err(mismatch("Time", other)),
        },
        Conv::TimestampMillis => match v {
            Value::Timestamp(us) | Value::TimestampTz(us) => {
                write_i64(buf, temporal::micros_to_millis(*us))
            }
            other => return Err(mismatch("Timestamp", other)),
        },
        Conv::TimestampMicros => match v {
            Value::Timestamp(us) | Value::TimestampTz(us) => write_i64(buf, *us),
            other => return Err(mismatch("Timestamp", other)),
        },
        Conv::ZonedTimestamp { frac } => match v {
            Value::TimestampTz(us) | Value::Timestamp(us) => {
                buf.push(b'"');
                temporal::push_zoned_timestamp(buf, *us, *frac);
                buf.push(b'"');
            }
            other => return Err(mismatch("TimestampTz", other)),
        },
        Conv::ZonedTime => match v {
            Value::TimeTz {
                micros,
                offset_seconds,
            } => {
                buf.push(b'"');
                temporal::push_zoned_time(buf, *micros, *offset_seconds);
                buf.push(b'"');
            }
            Value::Time(us) => {
                buf.push(b'"');
                temporal::push_zoned_time(buf, *us, 0);
                buf.push(b'"');
            }
            other => return Err(mismatch("TimeTz", other)),
        },
        Conv::IntervalMicros => match v {
            Value::Interval {
                months,
                days,
                micros,
            } => write_i64(buf, temporal::interval_micros(*months, *days, *micros)),
            other => return Err(mismatch("Interval", other)),
        },
        Conv::IntervalIso => match v {
            Value::Interval {
                months,
                days,
                micros,
            } => {
                buf.push(b'"');
                temporal::push_interval_iso(buf, *months, *days, *micros);
                buf.push(b'"');
            }
            other => return Err(mismatch("Interval", other)),
        },
        Conv::Bits { minimal } => match v {
            Value::Bits { len, bytes } => {
                write_base64(buf, &convert::bits_le(*len, bytes, *minimal), false)
            }
            other => return Err(mismatch("Bits", other)),
        },
        Conv::Geometry { point } => {
            let g = convert::geometry_parts(v, *point)?;
            buf.push(b'{');
            if *point {
                buf.extend_from_slice(b"\"x\":");
                write_f64(buf, g.xy.0);
                buf.extend_from_slice(b",\"y\":");
                write_f64(buf, g.xy.1);
                buf.push(b',');
            }
            buf.extend_from_slice(b"\"wkb\":");
            write_base64(buf, g.wkb, false);
            buf.extend_from_slice(b",\"srid\":");
            match g.srid {
                Some(s) => write_i64(buf, s as i64),
                None => buf.extend_from_slice(b"null"),
            }
            buf.push(b'}');
        }
        Conv::Array(inner) => match v {
            Value::Array(items) => write_items(buf, inner, items, ctx)?,
            other => return Err(mismatch("Array", other)),
        },
    }
    Ok(())
}

/// An array's items; a nested array (a multi-dimensional value) keeps its nesting.
fn write_items(
    buf: &mut Vec<u8>,
    inner: &Conv,
    items: &[Value],
    ctx: &ValueCtx<'_>,
) -> Result<(), ValueError> {
    buf.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        match item {
            Value::Null => buf.extend_from_slice(b"null"),
            Value::Array(sub) if !matches!(inner, Conv::Array(_)) => {
                if !ctx.nest_arrays {
                    return Err(nested_error());
                }
                write_items(buf, inner, sub, ctx)?
            }
            item => write_value(buf, inner, item, ctx)?,
        }
    }
    buf.push(b']');
    Ok(())
}

#[cold]
pub(crate) fn nested_error() -> ValueError {
    ValueError::unrepresentable(
        HiddenReason::NestedArray,
        "a multi-dimensional array in an array column: the field's schema has one level",
    )
}

/// A value `write_row` could not write: carried by a header with its stand-in in the
/// record (see `hidden.rs`), unless the mode (or the kind of error) says to stop. `start`
/// is where the value began; whatever was written of it is dropped.
#[cold]
#[inline(never)]
fn carry_hidden<'p>(
    buf: &mut Vec<u8>,
    start: usize,
    p: &'p ColumnPlan,
    v: &Value,
    e: ValueError,
    ctx: &ValueCtx<'_>,
    hidden: &mut Hidden<'_>,
) -> Result<(), (&'p ColumnPlan, ValueError)> {
    buf.truncate(start);
    if let Some((conv, exact)) = hidden::exact_form(&p.conv, v) {
        return write_value(buf, &conv, &exact, ctx).map_err(|e| (p, e));
    }
    if let Value::Raw(r) = v {
        // Schemaless JSON can hold a multi-dimensional array as it is.
        if ctx.nest_arrays && matches!(r.typed, Value::Array(_)) {
            if write_value(buf, &p.conv, &r.typed, ctx).is_ok() {
                return Ok(());
            }
            buf.truncate(start);
        }
    }
    let Some(reason) = hidden::reason(&p.conv, v, &e) else {
        return Err((p, e));
    };
    if !hidden.note(p, v, reason) {
        return Err((p, hidden::fail_error(v, e)));
    }
    match hidden::stand_in(&p.conv, v, p.optional, ctx.placeholder) {
        None => buf.extend_from_slice(b"null"),
        Some(s) => write_value(buf, &p.conv, &s, ctx).map_err(|e| (p, e))?,
    }
    Ok(())
}

fn write_placeholder(buf: &mut Vec<u8>, conv: &Conv, placeholder: &str) -> Result<(), ValueError> {
    if conv.is_stringy() {
        write_str(buf, placeholder);
    } else if conv.is_bytes() {
        write_base64(buf, placeholder.as_bytes(), false);
    } else if let Conv::Array(inner) = conv {
        // Debezium's unchanged-TOAST placeholder for arrays: a one-element array.
        buf.push(b'[');
        write_placeholder(buf, inner, placeholder)?;
        buf.push(b']');
    } else {
        return Err(unchanged_not_representable());
    }
    Ok(())
}

#[cold]
pub(crate) fn unchanged_not_representable() -> ValueError {
    ValueError::unrepresentable(
        HiddenReason::UnchangedToast,
        "the source did not send this unchanged TOASTed value and this column's type has no \
         placeholder form; set the table's REPLICA IDENTITY FULL (or source.toast = \"reselect\") \
         so updates carry every value",
    )
}

/// Writes a row as a JSON object of the planned columns. Returns the failing column on error.
pub(crate) fn write_row<'p>(
    buf: &mut Vec<u8>,
    plans: &'p [ColumnPlan],
    row: &Row,
    ctx: &ValueCtx<'_>,
    hidden: &mut Hidden<'_>,
) -> Result<(), (&'p ColumnPlan, ValueError)> {
    buf.push(b'{');
    for (i, p) in plans.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        buf.extend_from_slice(&p.json_key);
        let v = row.0.get(p.index).unwrap_or(&Value::Null);
        if v.is_null() {
            if !p.optional {
                return Err((p, ValueError::NullInRequired));
            }
            buf.extend_from_slice(b"null");
        } else {
            let start = buf.len();
            if let Err(e) = write_value(buf, &p.conv, v, ctx) {
                carry_hidden(buf, start, p, v, e, ctx, hidden)?;
            }
        }
    }
    buf.push(b'}');
    Ok(())
}

/// Renders a Connect schema as the JSON converter's `"schema"` object; `field` is the
/// struct field name when the schema is a field's.
pub fn write_connect_schema(buf: &mut Vec<u8>, s: &ConnectSchema, field: Option<&str>) {
    buf.extend_from_slice(b"{\"type\":");
    write_str(buf, s.ty.json_name());
    match &s.ty {
        ConnectType::Struct(fields) => {
            buf.extend_from_slice(b",\"fields\":[");
            for (i, f) in fields.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                write_connect_schema(buf, &f.schema, Some(&f.name));
            }
            buf.push(b']');
        }
        ConnectType::Array(items) => {
            buf.extend_from_slice(b",\"items\":");
            write_connect_schema(buf, items, None);
        }
        _ => {}
    }
    buf.extend_from_slice(if s.optional {
        b",\"optional\":true"
    } else {
        b",\"optional\":false"
    });
    if let Some(n) = &s.name {
        buf.extend_from_slice(b",\"name\":");
        write_str(buf, n);
    }
    if let Some(v) = s.version {
        buf.extend_from_slice(b",\"version\":");
        write_i64(buf, v as i64);
    }
    if let Some(d) = &s.doc {
        buf.extend_from_slice(b",\"doc\":");
        write_str(buf, d);
    }
    if !s.parameters.is_empty() {
        buf.extend_from_slice(b",\"parameters\":{");
        for (i, (k, v)) in s.parameters.iter().enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            write_str(buf, k);
            buf.push(b':');
            write_str(buf, v);
        }
        buf.push(b'}');
    }
    if let Some(d) = &s.default {
        buf.extend_from_slice(b",\"default\":");
        match d {
            serde_json::Value::String(d) => write_str(buf, d),
            d => buf.extend_from_slice(d.to_string().as_bytes()),
        }
    }
    if let Some(f) = field {
        buf.extend_from_slice(b",\"field\":");
        write_str(buf, f);
    }
    buf.push(b'}');
}

/// The JSON converter's [`FormatWriter`]: struct fields are named, unions untagged, and a
/// record with schemas enabled is wrapped as `{"schema":…,"payload":<record>}`.
pub(crate) struct JsonWriter {
    /// `{"schema":<schema>,"payload":` with schemas enabled, else empty; a non-empty head
    /// is closed by one `}` after the record.
    key_head: Vec<u8>,
    value_head: Vec<u8>,
    /// Schemaless: multi-dimensional arrays keep their nesting.
    nest_arrays: bool,
}

impl JsonWriter {
    pub(crate) fn new(
        schemas_enable: bool,
        key: Option<&ConnectSchema>,
        value: &ConnectSchema,
    ) -> JsonWriter {
        let head = |s: &ConnectSchema| {
            let mut b = Vec::new();
            if schemas_enable {
                b.extend_from_slice(b"{\"schema\":");
                write_connect_schema(&mut b, s, None);
                b.extend_from_slice(b",\"payload\":");
            }
            b
        };
        JsonWriter {
            key_head: key.map(head).unwrap_or_default(),
            value_head: head(value),
            nest_arrays: !schemas_enable,
        }
    }
}

impl FormatWriter for JsonWriter {
    const MEMOIZE: bool = true;

    #[inline]
    fn open_key(&self, out: &mut Vec<u8>, _id: Option<u32>) -> Result<(), IdsMissing> {
        out.extend_from_slice(&self.key_head);
        Ok(())
    }

    #[inline]
    fn close_key(&self, out: &mut Vec<u8>) {
        if !self.key_head.is_empty() {
            out.push(b'}');
        }
    }

    #[inline]
    fn open_value(&self, out: &mut Vec<u8>, _id: Option<u32>) -> Result<(), IdsMissing> {
        out.extend_from_slice(&self.value_head);
        Ok(())
    }

    #[inline]
    fn close_value(&self, out: &mut Vec<u8>) {
        if !self.value_head.is_empty() {
            out.push(b'}');
        }
    }

    #[inline]
    fn field(&self, out: &mut Vec<u8>, f: Field) {
        out.extend_from_slice(f.json);
    }

    #[inline]
    fn end_struct(&self, out: &mut Vec<u8>) {
        out.push(b'}');
    }

    #[inline]
    fn branch(&self, _out: &mut Vec<u8>, _index: i64) {}

    #[inline]
    fn null(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"null");
    }

    #[inline]
    fn string(&self, out: &mut Vec<u8>, s: &str) {
        write_str(out, s);
    }

    #[inline]
    fn symbol(&self, out: &mut Vec<u8>, s: &'static str) {
        debug_assert!(!s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\'));
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    }

    #[inline]
    fn long(&self, out: &mut Vec<u8>, v: i64) {
        write_i64(out, v);
    }

    #[inline]
    fn pg_sequence(&self, out: &mut Vec<u8>, commit_lsn: u64, lsn: u64) {
        // The array's quotes escaped inside the string, written directly: no escaping pass.
        out.extend_from_slice(b"\"[");
        if commit_lsn == 0 {
            out.extend_from_slice(b"null");
        } else {
            out.extend_from_slice(b"\\\"");
            write_u64(out, commit_lsn);
            out.extend_from_slice(b"\\\"");
        }
        out.extend_from_slice(b",\\\"");
        write_u64(out, lsn);
        out.extend_from_slice(b"\\\"]\"");
    }

    #[inline]
    fn open_array(&self, out: &mut Vec<u8>, _len: usize) {
        out.push(b'[');
    }

    #[inline]
    fn array_item(&self, out: &mut Vec<u8>, index: usize) {
        if index > 0 {
            out.push(b',');
        }
    }

    #[inline]
    fn close_array(&self, out: &mut Vec<u8>) {
        out.push(b']');
    }

    #[inline]
    fn row<'p>(
        &self,
        out: &mut Vec<u8>,
        plans: &'p [ColumnPlan],
        row: &Row,
        placeholder: &str,
        hidden: &mut Hidden<'_>,
    ) -> Result<(), (&'p ColumnPlan, ValueError)> {
        let ctx = ValueCtx {
            placeholder,
            nest_arrays: self.nest_arrays,
        };
        write_row(out, plans, row, &ctx, hidden)
    }

    #[inline]
    fn value(
        &self,
        out: &mut Vec<u8>,
        conv: &Conv,
        v: &Value,
        placeholder: &str,
    ) -> Result<(), ValueError> {
        let ctx = ValueCtx {
            placeholder,
            nest_arrays: self.nest_arrays,
        };
        write_value(out, conv, v, &ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut b = Vec::new();
        f(&mut b);
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn strings_escape_like_jackson() {
        assert_eq!(
            s(|b| write_str(b, "a\"b\\c\n\u{1}é€😀")),
            "\"a\\\"b\\\\c\\n\\u0001é€😀\""
        );
        assert_eq!(s(|b| write_str(b, "")), "\"\"");
        let back: String = serde_json::from_str(&s(|b| write_str(b, "\u{7f}\u{0}\t"))).unwrap();
        assert_eq!(back, "\u{7f}\u{0}\t");
    }

    proptest::proptest! {
        #[test]
        fn any_string_round_trips(x in proptest::prelude::any::<String>(), pad in "[\"\\\\\\x00-\\x1fa]{0,12}") {
            let text = format!("{pad}{x}{pad}");
            let back: String = serde_json::from_str(&s(|b| write_str(b, &text))).unwrap();
            proptest::prop_assert_eq!(back, text);
        }
    }

    #[test]
    fn numbers() {
        assert_eq!(s(|b| write_f64(b, f64::NAN)), "\"NaN\"");
        assert_eq!(s(|b| write_f64(b, f64::NEG_INFINITY)), "\"-Infinity\"");
        assert_eq!(s(|b| write_f32(b, 0.1)), "0.1");
        assert_eq!(s(|b| write_i64(b, i64::MIN)), "-9223372036854775808");
    }

    #[test]
    fn base64_forms() {
        assert_eq!(
            s(|b| write_base64(b, &[0x01, 0xd4, 0xc0], false)),
            "\"AdTA\""
        );
        assert_eq!(s(|b| write_base64(b, &[], false)), "\"\"");
        assert_eq!(s(|b| write_base64(b, &[0xfb, 0xff], true)), "\"-_8=\"");
    }
}
