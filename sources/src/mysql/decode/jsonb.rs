//! MySQL's binary JSON (a `JSON` column in a row event, parsed by `mysql_common` into a
//! [`jsonb::Value`]) as the text MySQL itself prints for the value, so a row read by the
//! snapshot (`SELECT`, the server's text) and the same row read from the binlog are the
//! same [`Value::Json`].
//!
//! MySQL's text form: `{"k": v, "k2": v2}` and `[1, 2]` (a space after `:` and `,`), object
//! members in stored order (MySQL sorts keys by length, then bytes), strings escaped with
//! `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t` and `\u00XX` for other control characters.
//! Opaque scalars: a DECIMAL prints as its digits (`1.50`), DATE as `"2015-01-15"`, TIME
//! and DATETIME/TIMESTAMP with six fractional digits (`"23:24:25.000000"`), any other
//! type as `"base64:type<n>:<base64 of the bytes>"`. Doubles print as the shortest text
//! that reads back as the same double (`1.5`, `1.0`, `1e300`).
//!
//! Invariant: [`to_text`] is total on anything `mysql_common` hands over: a malformed
//! document (which MySQL would not write) gives `Err` with a description, and the caller
//! keeps it as [`Value::raw`]. Its work is bounded by the document's size only for a
//! tree: `mysql_common` follows offsets as they are, so entries pointing at the same
//! bytes make a document whose text doubles with each level. The row decoder checks each
//! document's shape on its raw bytes first ([`check_shape`]: every value reached at most
//! once per byte, nesting at most MySQL's 100 levels), so only trees reach [`to_text`].
//!
//! [`Value::Json`]: cdc_schemas::Value::Json
//! [`Value::raw`]: cdc_schemas::Value::raw

use std::fmt::Write as _;

use mysql_async::binlog::jsonb;
use mysql_async::consts::ColumnType;

/// MySQL's own limit on a JSON document's nesting (`JSON_DOCUMENT_MAX_DEPTH`): deeper
/// documents are refused on write, so none is in a binlog.
pub const MAX_DEPTH: usize = 100;

/// Checks the shape of a binary JSON document, `doc` being a JSON column's bytes (type
/// byte, then the value): nesting at most [`MAX_DEPTH`] levels, and no value reached twice
/// (offsets of two entries pointing at the same bytes, which no server writes). In a tree
/// every value but the root has an entry of at least 3 bytes of its own, so a walk that
/// reaches more values than `doc` has bytes is not over a tree: it stops there, so the
/// check's work is bounded by the document's size. Other malformations (a size past the
/// end, a bad type) are left to the parser, which reports them.
pub fn check_shape(doc: &[u8]) -> Result<(), String> {
    let Some((&t, value)) = doc.split_first() else {
        return Ok(());
    };
    let mut budget = doc.len();
    walk(t, value, 0, &mut budget)
}

fn walk(t: u8, data: &[u8], depth: usize, budget: &mut usize) -> Result<(), String> {
    *budget = budget.checked_sub(1).ok_or_else(|| {
        "entries of the document point at the same values (it is not a tree)".to_string()
    })?;
    // 0x00 small object, 0x01 large object, 0x02 small array, 0x03 large array.
    if t > 0x03 {
        return Ok(());
    }
    if depth >= MAX_DEPTH {
        return Err(format!("nested deeper than {MAX_DEPTH} levels"));
    }
    let large = t & 1 == 1;
    let object = t < 0x02;
    let osz = if large { 4 } else { 2 };
    let read = |at: usize| -> Option<usize> {
        let b = data.get(at..at + osz)?;
        Some(if large {
            u32::from_le_bytes(b.try_into().ok()?) as usize
        } else {
            u16::from_le_bytes(b.try_into().ok()?) as usize
        })
    };
    let (Some(count), Some(size)) = (read(0), read(osz)) else {
        return Ok(());
    };
    let Some(body) = data.get(..size) else {
        return Ok(());
    };
    // Value entries follow the header and, in an object, the key entries (offset, u16 length).
    let entries = 2 * osz + if object { count * (osz + 2) } else { 0 };
    for i in 0..count {
        let e = entries + i * (1 + osz);
        let Some(&vt) = body.get(e) else {
            return Ok(());
        };
        // Literals and 16-bit integers (and 32-bit ones in a large container) are inline.
        let inline = matches!(vt, 0x04..=0x06) || (large && matches!(vt, 0x07 | 0x08));
        if inline {
            continue;
        }
        let off = {
            let b = body.get(e + 1..e + 1 + osz);
            match b {
                Some(b) if large => u32::from_le_bytes(b.try_into().unwrap_or_default()) as usize,
                Some(b) => u16::from_le_bytes(b.try_into().unwrap_or_default()) as usize,
                None => return Ok(()),
            }
        };
        if let Some(child) = body.get(off..) {
            walk(vt, child, depth + 1, budget)?;
        }
    }
    Ok(())
}

/// The MySQL text of a binary JSON document.
pub fn to_text(v: &jsonb::Value<'_>) -> Result<String, String> {
    let mut out = String::with_capacity(64);
    write_value(v, &mut out, 0)?;
    Ok(out)
}

fn write_value(v: &jsonb::Value<'_>, out: &mut String, depth: usize) -> Result<(), String> {
    use jsonb::Value as J;
    if depth >= MAX_DEPTH && v.element_count().is_some() {
        return Err(format!("nested deeper than {MAX_DEPTH} levels"));
    }
    match v {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::I16(x) => push_int(out, *x as i64),
        J::U16(x) => push_int(out, *x as i64),
        J::I32(x) => push_int(out, *x as i64),
        J::U32(x) => push_int(out, *x as i64),
        J::I64(x) => push_int(out, *x),
        J::U64(x) => {
            let _ = write!(out, "{x}");
        }
        J::F64(x) => push_double(out, *x),
        J::String(s) => push_string(out, s.str_raw())?,
        // Small and large containers differ only in the width of their offsets.
        J::SmallArray(a) => write_array(a.iter(), out, depth)?,
        J::LargeArray(a) => write_array(a.iter(), out, depth)?,
        J::SmallObject(o) => write_object(o.iter(), out, depth)?,
        J::LargeObject(o) => write_object(o.iter(), out, depth)?,
        J::Opaque(o) => push_opaque(out, o.value_type(), o.data_raw())?,
    }
    Ok(())
}

/// `[a, b]`: the elements, `, ` between them.
fn write_array<'a>(
    elems: impl Iterator<Item = std::io::Result<jsonb::Value<'a>>>,
    out: &mut String,
    depth: usize,
) -> Result<(), String> {
    out.push('[');
    for (i, e) in elems.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_value(&e.map_err(|e| e.to_string())?, out, depth + 1)?;
    }
    out.push(']');
    Ok(())
}

/// `{"k": v, "k2": v2}`: the members in stored order.
fn write_object<'a>(
    members: impl Iterator<Item = std::io::Result<(jsonb::ObjectKey<'a>, jsonb::Value<'a>)>>,
    out: &mut String,
    depth: usize,
) -> Result<(), String> {
    out.push('{');
    for (i, e) in members.enumerate() {
        let (k, v) = e.map_err(|e| e.to_string())?;
        if i > 0 {
            out.push_str(", ");
        }
        push_string(out, k.value_raw())?;
        out.push_str(": ");
        write_value(&v, out, depth + 1)?;
    }
    out.push('}');
    Ok(())
}

fn push_int(out: &mut String, x: i64) {
    let _ = write!(out, "{x}");
}

fn push_double(out: &mut String, x: f64) {
    if x.is_finite() {
        // `{:?}` is the shortest round-trip form, with `.0` on integral values and an
        // exponent for very large or small magnitudes.
        let _ = write!(out, "{x:?}");
    } else {
        // MySQL cannot store NaN or infinities in JSON; written as null, never invalid JSON.
        out.push_str("null");
    }
}

fn push_string(out: &mut String, raw: &[u8]) -> Result<(), String> {
    let s = std::str::from_utf8(raw).map_err(|e| format!("JSON string is not UTF-8: {e}"))?;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    Ok(())
}

fn push_opaque(out: &mut String, ty: ColumnType, data: &[u8]) -> Result<(), String> {
    match ty {
        ColumnType::MYSQL_TYPE_NEWDECIMAL => {
            let (&p, rest) = data.split_first().ok_or("empty JSON decimal")?;
            let (&s, bin) = rest.split_first().ok_or("short JSON decimal")?;
            out.push_str(&bin_decimal_text(bin, p as usize, s as usize)?);
        }
        ColumnType::MYSQL_TYPE_DATE
        | ColumnType::MYSQL_TYPE_DATETIME
        | ColumnType::MYSQL_TYPE_TIMESTAMP
        | ColumnType::MYSQL_TYPE_TIME => {
            let packed = data
                .first_chunk::<8>()
                .map(|b| i64::from_le_bytes(*b))
                .ok_or("short JSON temporal value")?;
            out.push('"');
            if ty == ColumnType::MYSQL_TYPE_TIME {
                push_packed_time(out, packed);
            } else {
                push_packed_datetime(out, packed, ty != ColumnType::MYSQL_TYPE_DATE);
            }
            out.push('"');
        }
        other => {
            let _ = write!(out, "\"base64:type{}:", other as u8);
            push_base64(out, data);
            out.push('"');
        }
    }
    Ok(())
}

/// `[-]HH:MM:SS.ffffff` of MySQL's packed TIME (`hms << 24 | µs`, negated when negative).
fn push_packed_time(out: &mut String, packed: i64) {
    if packed < 0 {
        out.push('-');
    }
    let p = packed.unsigned_abs();
    let us = p & 0xff_ffff;
    let hms = p >> 24;
    let (h, m, s) = (hms >> 12, (hms >> 6) & 63, hms & 63);
    let _ = write!(out, "{h:02}:{m:02}:{s:02}.{us:06}");
}

/// `YYYY-MM-DD[ HH:MM:SS.ffffff]` of MySQL's packed DATETIME / DATE.
fn push_packed_datetime(out: &mut String, packed: i64, with_time: bool) {
    let p = packed.unsigned_abs();
    let us = p & 0xff_ffff;
    let ymdhms = p >> 24;
    let ymd = ymdhms >> 17;
    let hms = ymdhms & ((1 << 17) - 1);
    let (ym, d) = (ymd >> 5, ymd & 31);
    let (y, mo) = (ym / 13, ym % 13);
    let _ = write!(out, "{y:04}-{mo:02}-{d:02}");
    if with_time {
        let (h, mi, s) = (hms >> 12, (hms >> 6) & 63, hms & 63);
        let _ = write!(out, " {h:02}:{mi:02}:{s:02}.{us:06}");
    }
}

fn push_base64(out: &mut String, data: &[u8]) {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        out.push(A[(n >> 18) as usize & 63] as char);
        out.push(A[(n >> 12) as usize & 63] as char);
        out.push(if c.len() > 1 {
            A[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if c.len() > 2 {
            A[n as usize & 63] as char
        } else {
            '='
        });
    }
}

/// Bytes of a group of `digits` (< 9) decimal digits in MySQL's binary DECIMAL.
const DIG2BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];

/// The text (`-12.340`) of MySQL's binary DECIMAL(`precision`, `scale`) format: digits in
/// groups of nine as big-endian 4-byte words (a partial group in fewer bytes), integer
/// part then fraction, the first bit flipped, every byte inverted when negative.
pub fn bin_decimal_text(bin: &[u8], precision: usize, scale: usize) -> Result<String, String> {
    if scale > precision || precision > 65 {
        return Err(format!("DECIMAL({precision},{scale}) is not a valid type"));
    }
    let intg = precision - scale;
    let (intg_full, intg_rest) = (intg / 9, intg % 9);
    let (frac_full, frac_rest) = (scale / 9, scale % 9);
    let size = intg_full * 4 + DIG2BYTES[intg_rest] + frac_full * 4 + DIG2BYTES[frac_rest];
    if bin.len() < size || size == 0 {
        return Err(format!(
            "binary DECIMAL({precision},{scale}) needs {size} bytes, got {}",
            bin.len()
        ));
    }
    let negative = bin[0] & 0x80 == 0;
    let mask: u8 = if negative { 0xff } else { 0 };
    let mut pos = 0usize;
    let mut read = |n: usize| -> u32 {
        let mut v: u32 = 0;
        for i in 0..n {
            let mut b = bin[pos + i] ^ mask;
            if pos + i == 0 {
                b ^= 0x80;
            }
            v = (v << 8) | b as u32;
        }
        pos += n;
        v
    };
    // A group of `digits` digits: a value of more digits is not a DECIMAL the server wrote
    // (it would print as more digits than the type has).
    let mut group = |digits: usize, out: &mut String| -> Result<(), String> {
        let bytes = if digits == 9 { 4 } else { DIG2BYTES[digits] };
        let v = read(bytes);
        if u64::from(v) >= 10u64.pow(digits as u32) {
            return Err(format!(
                "binary DECIMAL({precision},{scale}): a group of {digits} digits holds {v}"
            ));
        }
        let _ = write!(out, "{v:0digits$}");
        Ok(())
    };
    let mut int_digits = String::with_capacity(intg + 1);
    if intg_rest > 0 {
        group(intg_rest, &mut int_digits)?;
    }
    for _ in 0..intg_full {
        group(9, &mut int_digits)?;
    }
    let mut frac_digits = String::with_capacity(scale);
    for _ in 0..frac_full {
        group(9, &mut frac_digits)?;
    }
    if frac_rest > 0 {
        group(frac_rest, &mut frac_digits)?;
    }
    let int_trimmed = int_digits.trim_start_matches('0');
    let mut out = String::with_capacity(precision + 3);
    if negative {
        out.push('-');
    }
    out.push_str(if int_trimmed.is_empty() {
        "0"
    } else {
        int_trimmed
    });
    if scale > 0 {
        out.push('.');
        out.push_str(&frac_digits);
    }
    Ok(out)
}

/// Binary JSON documents for tests (here and the row decoder's).
#[cfg(test)]
pub(crate) mod test_docs {
    /// A small array of `entries` (type, offset) followed by `body`, its size filled in.
    fn small_array(entries: &[(u8, u16)], body: &[u8]) -> Vec<u8> {
        let mut a = (entries.len() as u16).to_le_bytes().to_vec();
        a.extend_from_slice(&[0, 0]);
        for (t, off) in entries {
            a.push(*t);
            a.extend_from_slice(&off.to_le_bytes());
        }
        a.extend_from_slice(body);
        let n = a.len() as u16;
        a[2..4].copy_from_slice(&n.to_le_bytes());
        a
    }

    /// A whole document (type byte, then the value) of a small array.
    fn doc(array: Vec<u8>) -> Vec<u8> {
        let mut d = vec![0x02];
        d.extend_from_slice(&array);
        d
    }

    /// `[[...[]...]]`: `levels` small arrays, each the one element of the one above.
    pub fn nested(levels: usize) -> Vec<u8> {
        let mut body = small_array(&[], &[]);
        for _ in 1..levels {
            body = small_array(&[(0x02, 7)], &body);
        }
        doc(body)
    }

    /// `levels` arrays of two entries both pointing at the next level: a DAG whose text
    /// has 2^levels leaves.
    pub fn shared(levels: usize) -> Vec<u8> {
        let mut body = small_array(&[], &[]);
        for _ in 0..levels {
            body = small_array(&[(0x02, 10), (0x02, 10)], &body);
        }
        doc(body)
    }

    /// `[[], []]`, each entry at its own offset.
    pub fn tree_of_two() -> Vec<u8> {
        let empty = small_array(&[], &[]);
        doc(small_array(
            &[(0x02, 10), (0x02, 14)],
            &[empty.clone(), empty].concat(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mysql_common::io::ParseBuf;
    use mysql_common::proto::MyDeserialize;

    /// Parses a binary JSON document (the bytes of a JSON column value, after its length).
    fn parse(bytes: &[u8]) -> jsonb::Value<'_> {
        jsonb::Value::deserialize((), &mut ParseBuf(bytes)).unwrap()
    }

    fn text(bytes: &[u8]) -> String {
        to_text(&parse(bytes)).unwrap()
    }

    #[test]
    fn scalars() {
        // type 0x04 literal: 0x00 null, 0x01 true, 0x02 false
        assert_eq!(text(&[0x04, 0x00]), "null");
        assert_eq!(text(&[0x04, 0x01]), "true");
        assert_eq!(text(&[0x04, 0x02]), "false");
        // int16 -2, uint16 65535, int32, uint32, int64, uint64
        assert_eq!(text(&[0x05, 0xfe, 0xff]), "-2");
        assert_eq!(text(&[0x06, 0xff, 0xff]), "65535");
        assert_eq!(text(&[0x07, 0x00, 0x00, 0x00, 0x80]), "-2147483648");
        assert_eq!(text(&[0x08, 0xff, 0xff, 0xff, 0xff]), "4294967295");
        let mut b = vec![0x09];
        b.extend_from_slice(&i64::MIN.to_le_bytes());
        assert_eq!(text(&b), "-9223372036854775808");
        let mut b = vec![0x0a];
        b.extend_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(text(&b), "18446744073709551615");
        // double
        let mut b = vec![0x0b];
        b.extend_from_slice(&1.5f64.to_le_bytes());
        assert_eq!(text(&b), "1.5");
        let mut b = vec![0x0b];
        b.extend_from_slice(&100f64.to_le_bytes());
        assert_eq!(text(&b), "100.0");
        // string: type 0x0c, variable-length length, bytes
        assert_eq!(
            text(b"\x0c\x09a\"b\\c\n\x01\xc3\xa9"),
            r#""a\"b\\c\n\u0001é""#
        );
    }

    use super::test_docs::{nested, shared, tree_of_two};

    /// MySQL refuses documents nested deeper than 100 levels: deeper is an error, never a
    /// recursion as deep as the input allows.
    #[test]
    fn nesting_is_bounded() {
        let doc = nested(100);
        check_shape(&doc).unwrap();
        assert_eq!(to_text(&parse(&doc)).unwrap().matches('[').count(), 100);
        let doc = nested(101);
        assert!(check_shape(&doc).unwrap_err().contains("deeper than 100"));
        assert!(to_text(&parse(&doc))
            .unwrap_err()
            .contains("deeper than 100"));
    }

    /// Entries pointing at the same bytes make a DAG whose text doubles with each level
    /// (40 levels: a terabyte): the shape check stops after as many values as the
    /// document has bytes (before it, the binlog fuzz target timed out on one).
    #[test]
    fn shared_values_are_refused() {
        let e = check_shape(&shared(40)).unwrap_err();
        assert!(e.contains("not a tree"), "{e}");
        // A tree of the same kind passes: two entries at their own offsets.
        let doc = tree_of_two();
        check_shape(&doc).unwrap();
        assert_eq!(text(&doc), "[[], []]");
    }

    #[test]
    fn small_object_and_array() {
        // {"a": 1, "bb": [true, "x"]} as MySQL stores it (small object, 2 members):
        // header: count u16, size u16; key entries (offset u16, len u16) ×2;
        // value entries (type u8, offset-or-inline u16) ×2; keys; values.
        let arr: Vec<u8> = {
            // small array [true, "x"]: count 2, size; entries: literal inline, string at offset
            let mut a = vec![0x02, 0x00, 0x00, 0x00];
            a.extend_from_slice(&[0x04, 0x01, 0x00]); // true inlined
            a.extend_from_slice(&[0x0c, 0x0a, 0x00]); // string at offset 10
            a.extend_from_slice(&[0x01, b'x']);
            let n = a.len() as u16;
            a[2..4].copy_from_slice(&n.to_le_bytes());
            a
        };
        let mut o: Vec<u8> = vec![0x02, 0x00, 0x00, 0x00];
        // keys start after 4 + 2*4 + 2*3 = 18
        o.extend_from_slice(&[18, 0, 1, 0]); // "a"
        o.extend_from_slice(&[19, 0, 2, 0]); // "bb"
        o.extend_from_slice(&[0x05, 0x01, 0x00]); // int16 1 inlined
        o.extend_from_slice(&[0x02, 21, 0x00]); // small array at offset 21
        o.extend_from_slice(b"abb");
        o.extend_from_slice(&arr);
        let n = o.len() as u16;
        o[2..4].copy_from_slice(&n.to_le_bytes());
        let mut doc = vec![0x00];
        doc.extend_from_slice(&o);
        assert_eq!(text(&doc), r#"{"a": 1, "bb": [true, "x"]}"#);
        // empty object / array
        assert_eq!(text(&[0x00, 0, 0, 4, 0]), "{}");
        assert_eq!(text(&[0x02, 0, 0, 4, 0]), "[]");
    }

    #[test]
    fn opaque_values() {
        // DECIMAL(5,2) 123.45: precision, scale, binary decimal
        // int part 3 digits → 2 bytes (123 ^ sign bit), frac 2 digits → 1 byte (45)
        let dec = [0x0f, 0xf6, 5, 5, 2, 0x80, 0x7b, 0x2d];
        assert_eq!(text(&dec), "123.45");
        // DATETIME 2015-01-15 23:24:25.5 packed
        let ymd: i64 = ((2015 * 13 + 1) << 5) | 15;
        let hms: i64 = (23 << 12) | (24 << 6) | 25;
        let packed = (((ymd << 17) | hms) << 24) + 500_000;
        let mut b = vec![0x0f, 0x0c, 8];
        b.extend_from_slice(&packed.to_le_bytes());
        assert_eq!(text(&b), r#""2015-01-15 23:24:25.500000""#);
        let mut b = vec![0x0f, 0x0a, 8];
        b.extend_from_slice(&((ymd << 17) << 24).to_le_bytes());
        assert_eq!(text(&b), r#""2015-01-15""#);
        // TIME -838:59:59
        let t: i64 = -((((838 << 12) | (59 << 6) | 59) as i64) << 24);
        let mut b = vec![0x0f, 0x0b, 8];
        b.extend_from_slice(&t.to_le_bytes());
        assert_eq!(text(&b), r#""-838:59:59.000000""#);
        // other: a BLOB (type 252) as base64
        assert_eq!(text(&[0x0f, 252, 3, 1, 2, 3]), r#""base64:type252:AQID""#);
    }

    #[test]
    fn binary_decimals() {
        // -1234567890.1234 as DECIMAL(14,4): int 10 digits = 1 digit (1 byte) + 9 (4 bytes),
        // frac 4 digits (2 bytes); negative: all bytes inverted.
        let mut pos = vec![0x81u8];
        pos.extend_from_slice(&234_567_890u32.to_be_bytes());
        pos.extend_from_slice(&1234u16.to_be_bytes());
        assert_eq!(bin_decimal_text(&pos, 14, 4).unwrap(), "1234567890.1234");
        let neg: Vec<u8> = pos.iter().map(|b| !b).collect();
        assert_eq!(bin_decimal_text(&neg, 14, 4).unwrap(), "-1234567890.1234");
        // 0.00 in DECIMAL(3,2)
        assert_eq!(bin_decimal_text(&[0x80, 0x00], 3, 2).unwrap(), "0.00");
        assert!(bin_decimal_text(&[0x80], 10, 2).is_err());
    }
}
