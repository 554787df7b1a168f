//! Parsing Postgres' text output format into [`Value`]s, losslessly.
//!
//! Owns [`ValueKind`] (how a column's text is parsed; the built-in types' kinds are the
//! `text` column of [`super::BUILTIN_TYPES`], the others come from [`super::map_type`])
//! and the parsers. pgoutput tuples and the snapshot's COPY text rows both come here.
//!
//! The formats are those of the replication session's settings (see
//! [`crate::postgres::replication::SESSION_OPTIONS`]; the snapshot readers set the same):
//! `DateStyle=ISO`, `TimeZone=UTC`, `IntervalStyle=iso_8601`, `extra_float_digits=3`
//! (shortest exact float text), `bytea_output=hex` (the escape format is accepted too).
//! Invariants: a text that does not parse as its kind is a [`ValueError`] naming the
//! kind and the text, never a panic and never a lossy value. [`parse_value`] runs per
//! column per change (the streaming hot path): it only dispatches on a kind resolved
//! once per relation.
//!
//! - dates: `2024-01-31`, `0044-03-15 BC`, `infinity`, `-infinity` → days since 1970
//!   (proleptic Gregorian, 1 BC = year 0), infinities as [`Value::DATE_POS_INFINITY`]…;
//! - timestamps: `2024-01-31 12:00:00.123456[+00][ BC]` → µs since 1970;
//! - times: `24:00:00` allowed; timetz offsets up to seconds (`+05:30:15`);
//! - intervals: ISO 8601 with a sign per field, `P-1Y2M3DT-4H5M6.5S` → months, days, µs;
//! - arrays: `{1,NULL,"a \"q\"",{…}}`, optionally prefixed by bounds `[0:2]=` (dropped);
//! - composites: `(1,"a b",)` → a JSON object using attribute names from the catalog.

use std::fmt;

use cdc_schemas::{Decimal, Value};

/// How to turn a column's text into a [`Value`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueKind {
    Bool,
    Int16,
    Int32,
    /// int8, and `oid`/`xid` (unsigned 32-bit, widened).
    Int64,
    Float32,
    Float64,
    Numeric,
    /// text, varchar, bpchar, name, char, enums, and text-like types (inet, cidr,
    /// macaddr, macaddr8, money, xml, …): the text as it is.
    Text,
    Bytea,
    Date,
    Time,
    TimeTz,
    Timestamp,
    TimestampTz,
    Interval,
    Uuid,
    Json,
    Bits,
    /// An array of the element kind; `delimiter` is `,` for every type but `box` (`;`).
    Array(Box<ValueKind>, u8),
    /// A composite (row) value rendered as a JSON object of its attributes.
    Composite(Vec<(String, ValueKind)>),
}

/// A text value that does not parse as its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueError {
    pub kind: String,
    pub text: String,
    pub reason: String,
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown: String = self.text.chars().take(80).collect();
        if shown.len() < self.text.len() {
            shown.push('…');
        }
        write!(
            f,
            "{:?} is not a valid {}: {}",
            shown, self.kind, self.reason
        )
    }
}

impl std::error::Error for ValueError {}

fn err(kind: &str, text: &str, reason: impl Into<String>) -> ValueError {
    ValueError {
        kind: kind.to_string(),
        text: text.to_string(),
        reason: reason.into(),
    }
}

/// Parses `text` (a column's text-format bytes) as `kind`.
pub fn parse_value(kind: &ValueKind, text: &[u8]) -> Result<Value, ValueError> {
    if let ValueKind::Bytea = kind {
        return parse_bytea(text).map(Value::Bytes);
    }
    let s = std::str::from_utf8(text)
        .map_err(|e| err("text value", &String::from_utf8_lossy(text), e.to_string()))?;
    parse_str(kind, s)
}

/// Parses a text value (already UTF-8) as `kind`.
pub fn parse_str(kind: &ValueKind, s: &str) -> Result<Value, ValueError> {
    Ok(match kind {
        ValueKind::Bool => match s {
            "t" | "true" => Value::Bool(true),
            "f" | "false" => Value::Bool(false),
            _ => return Err(err("bool", s, "expected t or f")),
        },
        ValueKind::Int16 => Value::Int16(s.parse().map_err(|e| err("int2", s, format!("{e}")))?),
        ValueKind::Int32 => Value::Int32(s.parse().map_err(|e| err("int4", s, format!("{e}")))?),
        ValueKind::Int64 => Value::Int64(s.parse().map_err(|e| err("int8", s, format!("{e}")))?),
        ValueKind::Float32 => Value::Float32(match s {
            "NaN" => f32::NAN,
            "Infinity" => f32::INFINITY,
            "-Infinity" => f32::NEG_INFINITY,
            _ => s.parse().map_err(|e| err("float4", s, format!("{e}")))?,
        }),
        ValueKind::Float64 => Value::Float64(match s {
            "NaN" => f64::NAN,
            "Infinity" => f64::INFINITY,
            "-Infinity" => f64::NEG_INFINITY,
            _ => s.parse().map_err(|e| err("float8", s, format!("{e}")))?,
        }),
        ValueKind::Numeric => Value::Decimal(
            s.parse::<Decimal>()
                .map_err(|e| err("numeric", s, e.to_string()))?,
        ),
        ValueKind::Text => Value::Text(s.to_string()),
        ValueKind::Bytea => Value::Bytes(parse_bytea(s.as_bytes())?),
        ValueKind::Date => Value::Date(parse_date(s)?),
        ValueKind::Time => Value::Time(parse_time(s)?),
        ValueKind::TimeTz => {
            let (micros, offset_seconds) = parse_timetz(s)?;
            Value::TimeTz {
                micros,
                offset_seconds,
            }
        }
        ValueKind::Timestamp => match parse_timestamp_wide(s, false)? {
            Ok(us) => Value::Timestamp(us),
            Err(OutOfRange) => Value::raw(s, Value::Null),
        },
        ValueKind::TimestampTz => match parse_timestamp_wide(s, true)? {
            Ok(us) => Value::TimestampTz(us),
            Err(OutOfRange) => Value::raw(s, Value::Null),
        },
        ValueKind::Interval => {
            let (months, days, micros) = parse_interval(s)?;
            Value::Interval {
                months,
                days,
                micros,
            }
        }
        ValueKind::Uuid => Value::Uuid(parse_uuid(s)?),
        ValueKind::Json => Value::Json(s.to_string()),
        ValueKind::Bits => {
            let (len, bytes) = parse_bits(s)?;
            Value::Bits { len, bytes }
        }
        ValueKind::Array(elem, delim) => parse_array(s, elem, *delim)?,
        ValueKind::Composite(attrs) => Value::Json(parse_composite(s, attrs)?),
    })
}

/// `\x0a0b` (hex) or the escape format (`a\\b\001`).
pub fn parse_bytea(b: &[u8]) -> Result<Vec<u8>, ValueError> {
    let text = || String::from_utf8_lossy(b).into_owned();
    if let Some(hex) = b.strip_prefix(b"\\x") {
        if hex.len() % 2 != 0 {
            return Err(err("bytea", &text(), "odd number of hex digits"));
        }
        let nib = |c: u8| -> Option<u8> {
            match c {
                b'0'..=b'9' => Some(c - b'0'),
                b'a'..=b'f' => Some(c - b'a' + 10),
                b'A'..=b'F' => Some(c - b'A' + 10),
                _ => None,
            }
        };
        return hex
            .chunks_exact(2)
            .map(|p| Some(nib(p[0])? << 4 | nib(p[1])?))
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(|| err("bytea", &text(), "invalid hex digit"));
    }
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
        } else if b.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else {
            let oct = b
                .get(i + 1..i + 4)
                .filter(|o| o.iter().all(|c| (b'0'..=b'7').contains(c)))
                .ok_or_else(|| err("bytea", &text(), "invalid escape"))?;
            let v =
                (oct[0] - b'0') as u32 * 64 + (oct[1] - b'0') as u32 * 8 + (oct[2] - b'0') as u32;
            out.push(u8::try_from(v).map_err(|_| err("bytea", &text(), "octal escape > 255"))?);
            i += 4;
        }
    }
    Ok(out)
}

/// Days from 1970-01-01 to the proleptic Gregorian date y-m-d (astronomical year).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(y) => 29,
        2 => 28,
        _ => 0,
    }
}

fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `YYYY-MM-DD` (years may have more digits) → astronomical year, month, day.
fn parse_ymd(s: &str, bc: bool, kind: &str, whole: &str) -> Result<(i64, u32, u32), ValueError> {
    let mut it = s.splitn(3, '-');
    let (y, m, d) = match (it.next(), it.next(), it.next()) {
        (Some(y), Some(m), Some(d)) if digits(y) && digits(m) && digits(d) => (y, m, d),
        _ => return Err(err(kind, whole, "expected YYYY-MM-DD")),
    };
    let y: i64 = y
        .parse()
        .map_err(|_| err(kind, whole, "year out of range"))?;
    let m: u32 = m.parse().map_err(|_| err(kind, whole, "bad month"))?;
    let d: u32 = d.parse().map_err(|_| err(kind, whole, "bad day"))?;
    if y == 0 {
        return Err(err(kind, whole, "year 0 does not exist"));
    }
    let y = if bc { 1 - y } else { y };
    if !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return Err(err(kind, whole, "no such day"));
    }
    Ok((y, m, d))
}

/// A date → days since 1970-01-01.
pub fn parse_date(s: &str) -> Result<i32, ValueError> {
    match s {
        "infinity" => return Ok(Value::DATE_POS_INFINITY),
        "-infinity" => return Ok(Value::DATE_NEG_INFINITY),
        _ => {}
    }
    let (body, bc) = match s.strip_suffix(" BC") {
        Some(b) => (b, true),
        None => (s, false),
    };
    let (y, m, d) = parse_ymd(body, bc, "date", s)?;
    i32::try_from(days_from_civil(y, m, d)).map_err(|_| err("date", s, "out of range"))
}

/// `HH:MM:SS[.ffffff]` → µs since midnight.
fn parse_hms(s: &str, kind: &str, whole: &str) -> Result<i64, ValueError> {
    let bad = || err(kind, whole, "expected HH:MM:SS[.ffffff]");
    let mut it = s.splitn(3, ':');
    let (h, m, sec) = match (it.next(), it.next(), it.next()) {
        (Some(h), Some(m), Some(sec)) => (h, m, sec),
        _ => return Err(bad()),
    };
    if !digits(h) || !digits(m) {
        return Err(bad());
    }
    let (sec, frac) = match sec.split_once('.') {
        Some((a, b)) => (a, b),
        None => (sec, ""),
    };
    if !digits(sec) || (!frac.is_empty() && !digits(frac)) || frac.len() > 6 {
        return Err(bad());
    }
    let h: i64 = h.parse().map_err(|_| bad())?;
    let m: i64 = m.parse().map_err(|_| bad())?;
    let sec: i64 = sec.parse().map_err(|_| bad())?;
    let frac_us: i64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<i64>().map_err(|_| bad())? * 10i64.pow(6 - frac.len() as u32)
    };
    if m > 59 || sec > 60 {
        return Err(bad());
    }
    Ok(((h * 60 + m) * 60 + sec) * 1_000_000 + frac_us)
}

/// A time of day → µs since midnight (`24:00:00` is 86 400 000 000).
pub fn parse_time(s: &str) -> Result<i64, ValueError> {
    let us = parse_hms(s, "time", s)?;
    if us > 86_400_000_000 {
        return Err(err("time", s, "beyond 24:00:00"));
    }
    Ok(us)
}

/// A zone offset `+HH[:MM[:SS]]` → seconds east of UTC.
fn parse_offset(s: &str, kind: &str, whole: &str) -> Result<i32, ValueError> {
    let bad = || err(kind, whole, "bad zone offset");
    let (sign, rest) = match s.as_bytes().first() {
        Some(b'+') => (1, &s[1..]),
        Some(b'-') => (-1, &s[1..]),
        _ => return Err(bad()),
    };
    let mut secs = 0i32;
    let mut mult = 3600;
    for part in rest.split(':') {
        if !digits(part) || part.len() > 2 || mult == 0 {
            return Err(bad());
        }
        secs += part.parse::<i32>().map_err(|_| bad())? * mult;
        mult /= 60;
    }
    Ok(sign * secs)
}

/// Splits `…+05:30` / `…-08` into the part before the offset and the offset.
fn split_offset(s: &str) -> Option<(&str, &str)> {
    let i = s.rfind(['+', '-'])?;
    Some((&s[..i], &s[i..]))
}

/// `HH:MM:SS[.ffffff]+HH[:MM[:SS]]` → (µs since midnight, offset seconds east of UTC).
pub fn parse_timetz(s: &str) -> Result<(i64, i32), ValueError> {
    let (t, off) = split_offset(s).ok_or_else(|| err("timetz", s, "no zone offset"))?;
    let us = parse_hms(t, "timetz", s)?;
    if us > 86_400_000_000 {
        return Err(err("timetz", s, "beyond 24:00:00"));
    }
    Ok((us, parse_offset(off, "timetz", s)?))
}

/// A valid value beyond the microsecond `i64` range of the data model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfRange;

/// `YYYY-MM-DD HH:MM:SS[.ffffff][+HH[:MM[:SS]]][ BC]` → µs since 1970-01-01 (UTC for a
/// timestamptz: the offset is applied).
pub fn parse_timestamp(s: &str, with_zone: bool) -> Result<i64, ValueError> {
    let kind = if with_zone {
        "timestamptz"
    } else {
        "timestamp"
    };
    parse_timestamp_wide(s, with_zone)?.map_err(|OutOfRange| {
        err(
            kind,
            s,
            "beyond 294247 AD, the end of the microsecond timestamp range (Postgres allows up to 294276 AD)",
        )
    })
}

/// [`parse_timestamp`], telling a valid timestamp the model cannot hold (`Ok(Err(_))`:
/// Postgres reaches 294276 AD, microseconds since 1970 in an i64 end in 294247 AD) from
/// text that is not a timestamp. The value parser keeps the former as [`Value::Raw`].
pub fn parse_timestamp_wide(
    s: &str,
    with_zone: bool,
) -> Result<Result<i64, OutOfRange>, ValueError> {
    let kind = if with_zone {
        "timestamptz"
    } else {
        "timestamp"
    };
    match s {
        "infinity" => return Ok(Ok(Value::TIMESTAMP_POS_INFINITY)),
        "-infinity" => return Ok(Ok(Value::TIMESTAMP_NEG_INFINITY)),
        _ => {}
    }
    let (body, bc) = match s.strip_suffix(" BC") {
        Some(b) => (b, true),
        None => (s, false),
    };
    let (date, time) = body
        .split_once(' ')
        .ok_or_else(|| err(kind, s, "expected 'YYYY-MM-DD HH:MM:SS'"))?;
    let (time, offset) = if with_zone {
        let (t, o) = split_offset(time).ok_or_else(|| err(kind, s, "no zone offset"))?;
        (t, parse_offset(o, kind, s)?)
    } else {
        (time, 0)
    };
    let (y, m, d) = parse_ymd(date, bc, kind, s)?;
    let us = parse_hms(time, kind, s)?;
    let total = (days_from_civil(y, m, d) as i128) * 86_400_000_000 + us as i128
        - offset as i128 * 1_000_000;
    // Postgres reaches 294276 AD; microseconds since 1970 in an i64 (the data model's
    // timestamp, as Debezium's MicroTimestamp) end in 294247 AD. The infinities' sentinels
    // are the extreme values themselves: a finite value there is out of range too.
    match i64::try_from(total) {
        Ok(us) if us != i64::MAX && us != i64::MIN => Ok(Ok(us)),
        _ => Ok(Err(OutOfRange)),
    }
}

/// An ISO 8601 interval as Postgres prints it with `IntervalStyle=iso_8601`
/// (`P1Y2M3DT4H5M6.789S`, `P-1Y-2M3DT-4H-5M-6.5S`, `PT0S`; `infinity` on 17+)
/// → (months, days, µs).
pub fn parse_interval(s: &str) -> Result<(i32, i32, i64), ValueError> {
    match s {
        "infinity" => return Ok((i32::MAX, i32::MAX, i64::MAX)),
        "-infinity" => return Ok((i32::MIN, i32::MIN, i64::MIN)),
        _ => {}
    }
    let bad = |why: &str| err("interval", s, why.to_string());
    let rest = s
        .strip_prefix('P')
        .ok_or_else(|| bad("expected an ISO 8601 duration (IntervalStyle=iso_8601)"))?;
    let (mut months, mut days, mut micros) = (0i64, 0i64, 0i128);
    let mut in_time = false;
    let mut i = 0;
    let b = rest.as_bytes();
    while i < b.len() {
        if b[i] == b'T' {
            if in_time {
                return Err(bad("two T separators"));
            }
            in_time = true;
            i += 1;
            continue;
        }
        let start = i;
        if b[i] == b'-' || b[i] == b'+' {
            i += 1;
        }
        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
            i += 1;
        }
        let num = &rest[start..i];
        let unit = *b.get(i).ok_or_else(|| bad("number without unit"))?;
        i += 1;
        let (neg, mag) = match num.as_bytes().first() {
            Some(b'-') => (true, &num[1..]),
            Some(b'+') => (false, &num[1..]),
            _ => (false, num),
        };
        let (int_part, frac) = match mag.split_once('.') {
            Some((a, f)) => (a, f),
            None => (mag, ""),
        };
        if !digits(int_part) || (!frac.is_empty() && !digits(frac)) {
            return Err(bad("bad number"));
        }
        let n: i128 = int_part.parse().map_err(|_| bad("number out of range"))?;
        let sign: i128 = if neg { -1 } else { 1 };
        match (in_time, unit) {
            (false, b'Y') if frac.is_empty() => months += (sign * n * 12) as i64,
            (false, b'M') if frac.is_empty() => months += (sign * n) as i64,
            (false, b'W') if frac.is_empty() => days += (sign * n * 7) as i64,
            (false, b'D') if frac.is_empty() => days += (sign * n) as i64,
            (true, b'H') if frac.is_empty() => micros += sign * n * 3_600_000_000,
            (true, b'M') if frac.is_empty() => micros += sign * n * 60_000_000,
            (true, b'S') => {
                if frac.len() > 6 {
                    return Err(bad("more than 6 fractional digits"));
                }
                let f: i128 = if frac.is_empty() {
                    0
                } else {
                    frac.parse::<i128>().map_err(|_| bad("bad fraction"))?
                        * 10i128.pow(6 - frac.len() as u32)
                };
                micros += sign * (n * 1_000_000 + f);
            }
            _ => return Err(bad("unexpected unit")),
        }
    }
    Ok((
        i32::try_from(months).map_err(|_| bad("months out of range"))?,
        i32::try_from(days).map_err(|_| bad("days out of range"))?,
        i64::try_from(micros).map_err(|_| bad("time out of range"))?,
    ))
}

/// `a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11` → 16 bytes.
pub fn parse_uuid(s: &str) -> Result<[u8; 16], ValueError> {
    let hex: Vec<u8> = s.bytes().filter(|&b| b != b'-').collect();
    if hex.len() != 32 {
        return Err(err("uuid", s, "expected 32 hex digits"));
    }
    let mut out = [0u8; 16];
    for (i, p) in hex.chunks_exact(2).enumerate() {
        let h = std::str::from_utf8(p).map_err(|_| err("uuid", s, "not hex"))?;
        out[i] = u8::from_str_radix(h, 16).map_err(|_| err("uuid", s, "not hex"))?;
    }
    Ok(out)
}

/// `0101…` → (bit count, bits packed most significant first).
pub fn parse_bits(s: &str) -> Result<(u32, Vec<u8>), ValueError> {
    let mut bytes = vec![0u8; s.len().div_ceil(8)];
    for (i, c) in s.bytes().enumerate() {
        match c {
            b'0' => {}
            b'1' => bytes[i / 8] |= 0x80 >> (i % 8),
            _ => return Err(err("bit string", s, "expected only 0 and 1")),
        }
    }
    Ok((s.len() as u32, bytes))
}

/// An array literal: `{…}` with optional `[lo:hi]…=` bounds prefix (dropped).
pub fn parse_array(s: &str, elem: &ValueKind, delim: u8) -> Result<Value, ValueError> {
    let mut body = s;
    if body.starts_with('[') {
        let eq = body
            .find('=')
            .ok_or_else(|| err("array", s, "bounds without '='"))?;
        body = &body[eq + 1..];
    }
    let b = body.as_bytes();
    let mut pos = 0;
    let v = parse_array_level(body, b, &mut pos, elem, delim, s, 1)?;
    if pos != b.len() {
        return Err(err("array", s, "trailing characters after '}'"));
    }
    // A multi-dimensional value (nested arrays in a column whose type has one level:
    // Postgres does not fix an array column's dimensions) or an element the model cannot
    // hold: keep the text, which records that cannot nest carry in a header.
    if let Value::Array(items) = &v {
        if items
            .iter()
            .any(|i| matches!(i, Value::Array(_) | Value::Raw(_)))
        {
            return Ok(Value::raw(s, v));
        }
    }
    Ok(v)
}

/// Postgres' MAXDIM.
const MAX_ARRAY_DIMENSIONS: usize = 6;

fn parse_array_level(
    body: &str,
    b: &[u8],
    pos: &mut usize,
    elem: &ValueKind,
    delim: u8,
    whole: &str,
    dim: usize,
) -> Result<Value, ValueError> {
    let bad = |why: &str| err("array", whole, why.to_string());
    if b.get(*pos) != Some(&b'{') {
        return Err(bad("expected '{'"));
    }
    // Postgres' own limit (MAXDIM): no server sends more, and the recursion stays shallow.
    if dim > MAX_ARRAY_DIMENSIONS {
        return Err(bad("more than 6 dimensions (Postgres' limit)"));
    }
    *pos += 1;
    let mut items = Vec::new();
    if b.get(*pos) == Some(&b'}') {
        *pos += 1;
        return Ok(Value::Array(items));
    }
    loop {
        match b.get(*pos) {
            Some(b'{') => items.push(parse_array_level(
                body,
                b,
                pos,
                elem,
                delim,
                whole,
                dim + 1,
            )?),
            Some(b'"') => {
                let text = parse_quoted(b, pos).ok_or_else(|| bad("unterminated quotes"))?;
                items.push(parse_str(elem, &text)?);
            }
            Some(_) => {
                let start = *pos;
                while *pos < b.len() && b[*pos] != delim && b[*pos] != b'}' {
                    *pos += 1;
                }
                let raw = body[start..*pos].trim();
                if raw.eq_ignore_ascii_case("NULL") {
                    items.push(Value::Null);
                } else if raw.contains('\\') {
                    let unescaped: String = unescape_backslashes(raw);
                    items.push(parse_str(elem, &unescaped)?);
                } else {
                    items.push(parse_str(elem, raw)?);
                }
            }
            None => return Err(bad("unterminated array")),
        }
        match b.get(*pos) {
            Some(&c) if c == delim => *pos += 1,
            Some(b'}') => {
                *pos += 1;
                return Ok(Value::Array(items));
            }
            _ => return Err(bad("expected a delimiter or '}'")),
        }
    }
}

fn unescape_backslashes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A `"…"` element with `\x` escapes (and, in records, `""` for a quote). `pos` is at the
/// opening quote; on return it is after the closing one.
fn parse_quoted(b: &[u8], pos: &mut usize) -> Option<String> {
    let mut out = Vec::new();
    *pos += 1;
    loop {
        match *b.get(*pos)? {
            b'\\' => {
                out.push(*b.get(*pos + 1)?);
                *pos += 2;
            }
            b'"' if b.get(*pos + 1) == Some(&b'"') => {
                out.push(b'"');
                *pos += 2;
            }
            b'"' => {
                *pos += 1;
                return String::from_utf8(out).ok();
            }
            c => {
                out.push(c);
                *pos += 1;
            }
        }
    }
}

/// A record literal `(a,"b c",)` → a JSON object of the attributes (an empty unquoted
/// field is NULL). Integers and booleans become JSON numbers / booleans, everything else
/// a JSON string of its text (so numerics, timestamps and NaN stay exact).
pub fn parse_composite(s: &str, attrs: &[(String, ValueKind)]) -> Result<String, ValueError> {
    let bad = |why: &str| err("record", s, why.to_string());
    let b = s.as_bytes();
    if b.first() != Some(&b'(') || b.last() != Some(&b')') {
        return Err(bad("expected '(…)'"));
    }
    let inner_end = b.len() - 1;
    let mut pos = 1;
    let mut fields: Vec<Option<String>> = Vec::new();
    loop {
        // One field: a mix of quoted and unquoted runs up to ',' or the closing ')'.
        let mut text = String::new();
        let mut any = false;
        while pos < inner_end && b[pos] != b',' {
            if b[pos] == b'"' {
                let q = parse_quoted(&b[..inner_end], &mut pos)
                    .ok_or_else(|| bad("unterminated quotes"))?;
                text.push_str(&q);
            } else if b[pos] == b'\\' && pos + 1 < inner_end {
                let c = s[pos + 1..].chars().next().unwrap_or('\\');
                text.push(c);
                pos += 1 + c.len_utf8();
            } else {
                let start = pos;
                while pos < inner_end && !matches!(b[pos], b',' | b'"' | b'\\') {
                    pos += 1;
                }
                text.push_str(&s[start..pos]);
            }
            any = true;
        }
        fields.push(any.then_some(text));
        if pos >= inner_end {
            break;
        }
        pos += 1; // the ','
    }
    if fields.len() != attrs.len() {
        return Err(bad(&format!(
            "{} fields for {} attributes",
            fields.len(),
            attrs.len()
        )));
    }
    let mut obj = serde_json::Map::with_capacity(attrs.len());
    for ((name, kind), field) in attrs.iter().zip(fields) {
        let v = match field {
            None => serde_json::Value::Null,
            Some(t) => match kind {
                ValueKind::Int16 | ValueKind::Int32 | ValueKind::Int64 => t
                    .parse::<i64>()
                    .map(serde_json::Value::from)
                    .map_err(|e| err("record", s, format!("attribute {name}: {e}")))?,
                ValueKind::Bool => serde_json::Value::Bool(t == "t"),
                ValueKind::Composite(inner) => {
                    let nested = parse_composite(&t, inner)?;
                    serde_json::from_str(&nested).unwrap_or(serde_json::Value::String(nested))
                }
                _ => serde_json::Value::String(t),
            },
        };
        obj.insert(name.clone(), v);
    }
    Ok(serde_json::Value::Object(obj).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(kind: ValueKind, s: &str) -> Value {
        parse_str(&kind, s).unwrap_or_else(|e| panic!("{e}"))
    }

    const DAY: i64 = 86_400_000_000;

    #[test]
    fn scalars() {
        assert_eq!(p(ValueKind::Bool, "t"), Value::Bool(true));
        assert_eq!(p(ValueKind::Int16, "-32768"), Value::Int16(i16::MIN));
        assert_eq!(
            p(ValueKind::Int64, "9223372036854775807"),
            Value::Int64(i64::MAX)
        );
        assert!(parse_str(&ValueKind::Int32, "2147483648").is_err());
        assert_eq!(p(ValueKind::Float64, "0.1"), Value::Float64(0.1));
        assert_eq!(p(ValueKind::Float64, "1e+308"), Value::Float64(1e308));
        assert_eq!(
            p(ValueKind::Float64, "-Infinity"),
            Value::Float64(f64::NEG_INFINITY)
        );
        assert!(matches!(p(ValueKind::Float32, "NaN"), Value::Float32(f) if f.is_nan()));
        assert_eq!(
            p(ValueKind::Float32, "3.4028235e+38"),
            Value::Float32(f32::MAX)
        );
        assert_eq!(
            p(
                ValueKind::Numeric,
                "-123456789012345678901234567890.000000000000000000001"
            ),
            Value::Decimal(
                "-123456789012345678901234567890.000000000000000000001"
                    .parse()
                    .unwrap()
            )
        );
        assert_eq!(p(ValueKind::Numeric, "NaN"), Value::Decimal(Decimal::NaN));
        assert_eq!(
            p(ValueKind::Numeric, "-Infinity"),
            Value::Decimal(Decimal::NegInfinity)
        );
        assert_eq!(p(ValueKind::Text, "héllo"), Value::Text("héllo".into()));
        assert_eq!(
            p(ValueKind::Json, "{\"a\": 1}"),
            Value::Json("{\"a\": 1}".into())
        );
        assert_eq!(
            p(ValueKind::Uuid, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
            Value::Uuid([
                0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38,
                0x0a, 0x11
            ])
        );
        assert!(parse_str(&ValueKind::Uuid, "xyz").is_err());
        assert_eq!(
            p(ValueKind::Bits, "101000001"),
            Value::Bits {
                len: 9,
                bytes: vec![0b1010_0000, 0b1000_0000]
            }
        );
        assert_eq!(
            p(ValueKind::Bits, ""),
            Value::Bits {
                len: 0,
                bytes: vec![]
            }
        );
    }

    #[test]
    fn bytea_formats() {
        assert_eq!(parse_bytea(b"\\x00ff10").unwrap(), vec![0, 255, 16]);
        assert_eq!(parse_bytea(b"\\x").unwrap(), Vec::<u8>::new());
        assert!(parse_bytea(b"\\x0").is_err());
        assert!(parse_bytea(b"\\xzz").is_err());
        assert_eq!(parse_bytea(b"a\\\\b\\001").unwrap(), b"a\\b\x01".to_vec());
        assert_eq!(
            parse_value(&ValueKind::Bytea, b"\\xdeadbeef").unwrap(),
            Value::Bytes(vec![0xde, 0xad, 0xbe, 0xef])
        );
    }

    #[test]
    fn dates() {
        assert_eq!(parse_date("1970-01-01").unwrap(), 0);
        assert_eq!(parse_date("2000-03-01").unwrap(), 11017);
        assert_eq!(parse_date("1969-12-31").unwrap(), -1);
        assert_eq!(parse_date("infinity").unwrap(), i32::MAX);
        assert_eq!(parse_date("-infinity").unwrap(), i32::MIN);
        // 1 BC is astronomical year 0, a leap year.
        assert_eq!(
            parse_date("0001-12-31 BC").unwrap() + 1,
            parse_date("0001-01-01").unwrap()
        );
        assert!(parse_date("0001-02-29 BC").is_ok());
        assert!(parse_date("0002-02-29 BC").is_err());
        assert_eq!(
            parse_date("0044-03-15 BC").unwrap() as i64,
            days_from_civil(-43, 3, 15)
        );
        assert_eq!(
            parse_date("4713-01-01 BC").unwrap() as i64,
            days_from_civil(-4712, 1, 1)
        );
        assert_eq!(
            parse_date("5874897-12-31").unwrap() as i64,
            days_from_civil(5874897, 12, 31)
        );
        assert!(parse_date("2023-02-29").is_err());
        assert!(parse_date("2023-13-01").is_err());
        assert!(parse_date("20230101").is_err());
    }

    #[test]
    fn times() {
        assert_eq!(parse_time("00:00:00").unwrap(), 0);
        assert_eq!(parse_time("24:00:00").unwrap(), DAY);
        assert_eq!(parse_time("12:34:56.789").unwrap(), 45_296_789_000);
        assert_eq!(parse_time("23:59:59.999999").unwrap(), DAY - 1);
        assert!(parse_time("24:00:01").is_err());
        assert!(parse_time("12:60:00").is_err());
        assert!(parse_time("12:00:00.1234567").is_err());
        assert_eq!(parse_timetz("12:00:00+00").unwrap(), (43_200_000_000, 0));
        assert_eq!(
            parse_timetz("12:00:00.5-08").unwrap(),
            (43_200_500_000, -8 * 3600)
        );
        assert_eq!(
            parse_timetz("01:02:03+05:30:15").unwrap(),
            (3_723_000_000, 5 * 3600 + 30 * 60 + 15)
        );
        assert!(parse_timetz("12:00:00").is_err());
    }

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp("1970-01-01 00:00:00", false).unwrap(), 0);
        assert_eq!(
            parse_timestamp("2024-01-01 12:00:00.000001", false).unwrap(),
            1_704_110_400_000_001
        );
        assert_eq!(
            parse_timestamp("2024-01-01 12:00:00+00", true).unwrap(),
            1_704_110_400_000_000
        );
        assert_eq!(
            parse_timestamp("2024-01-01 14:00:00+02", true).unwrap(),
            1_704_110_400_000_000
        );
        assert_eq!(
            parse_timestamp("2024-01-01 06:29:45-05:30:15", true).unwrap(),
            1_704_110_400_000_000
        );
        assert_eq!(
            parse_timestamp("0044-03-15 12:00:00+00 BC", true).unwrap(),
            days_from_civil(-43, 3, 15) * DAY + 43_200_000_000
        );
        assert_eq!(
            parse_timestamp("0044-03-15 12:00:00 BC", false).unwrap(),
            days_from_civil(-43, 3, 15) * DAY + 43_200_000_000
        );
        assert_eq!(parse_timestamp("infinity", true).unwrap(), i64::MAX);
        assert_eq!(parse_timestamp("-infinity", false).unwrap(), i64::MIN);
        // Postgres reaches 294276 AD (µs since 2000 in an i64); µs since 1970 in an i64
        // end in 294247 AD, so the last 30 years of Postgres' range are an error.
        assert_eq!(
            parse_timestamp("294246-12-31 23:59:59.999999", false).unwrap(),
            days_from_civil(294246, 12, 31) * DAY + DAY - 1
        );
        assert!(parse_timestamp("294276-12-31 23:59:59.999999", false).is_err());
        // The value parser keeps such a value as Postgres' text.
        for (kind, text) in [
            (ValueKind::Timestamp, "294276-12-31 23:59:59.999999"),
            (ValueKind::TimestampTz, "294276-12-31 23:59:59.999999+00"),
        ] {
            assert_eq!(
                parse_str(&kind, text).unwrap(),
                Value::raw(text, Value::Null)
            );
        }
        assert!(parse_timestamp("2024-01-01", false).is_err());
        assert!(parse_timestamp("2024-01-01 12:00:00", true).is_err());
    }

    #[test]
    fn intervals() {
        assert_eq!(parse_interval("PT0S").unwrap(), (0, 0, 0));
        assert_eq!(
            parse_interval("P1Y2M3DT4H5M6.789S").unwrap(),
            (14, 3, ((4 * 60 + 5) * 60 + 6) * 1_000_000 + 789_000)
        );
        assert_eq!(
            parse_interval("P-1Y-2M3DT-4H-5M-6.5S").unwrap(),
            (-14, 3, -(((4 * 60 + 5) * 60 + 6) * 1_000_000 + 500_000))
        );
        assert_eq!(parse_interval("PT-0.000001S").unwrap(), (0, 0, -1));
        assert_eq!(parse_interval("P-3D").unwrap(), (0, -3, 0));
        assert_eq!(
            parse_interval("PT2562047788H54.775807S").unwrap(),
            (0, 0, 2_562_047_788i64 * 3_600_000_000 + 54_775_807)
        );
        assert_eq!(parse_interval("P178956970Y7M").unwrap(), (i32::MAX, 0, 0));
        assert_eq!(
            parse_interval("infinity").unwrap(),
            (i32::MAX, i32::MAX, i64::MAX)
        );
        assert!(parse_interval("1 day").is_err());
        assert!(parse_interval("P1").is_err());
        assert!(parse_interval("P1.5Y").is_err());
    }

    #[test]
    fn arrays() {
        let ints = ValueKind::Int32;
        assert_eq!(
            parse_array("{1,NULL,-3}", &ints, b',').unwrap(),
            Value::Array(vec![Value::Int32(1), Value::Null, Value::Int32(-3)])
        );
        assert_eq!(
            parse_array("{}", &ints, b',').unwrap(),
            Value::Array(vec![])
        );
        // Multi-dimensional: the nesting, and Postgres' own text for formats that cannot
        // nest.
        assert_eq!(
            parse_array("{{1,2},{3,4}}", &ints, b',').unwrap(),
            Value::raw(
                "{{1,2},{3,4}}",
                Value::Array(vec![
                    Value::Array(vec![Value::Int32(1), Value::Int32(2)]),
                    Value::Array(vec![Value::Int32(3), Value::Int32(4)]),
                ])
            )
        );
        // An element beyond the model's range keeps the whole array's text.
        assert_eq!(
            parse_array(
                r#"{"294276-01-01 00:00:00",NULL}"#,
                &ValueKind::Timestamp,
                b','
            )
            .unwrap(),
            Value::raw(
                r#"{"294276-01-01 00:00:00",NULL}"#,
                Value::Array(vec![
                    Value::raw("294276-01-01 00:00:00", Value::Null),
                    Value::Null
                ])
            )
        );
        assert_eq!(
            parse_array("[0:1]={7,8}", &ints, b',').unwrap(),
            Value::Array(vec![Value::Int32(7), Value::Int32(8)])
        );
        let t = |s: &str| Value::Text(s.into());
        assert_eq!(
            parse_array(
                r#"{plain,"with space","q\"uote","back\\slash","NULL",NULL,"",{nested}}"#,
                &ValueKind::Text,
                b','
            )
            .unwrap(),
            Value::raw(
                r#"{plain,"with space","q\"uote","back\\slash","NULL",NULL,"",{nested}}"#,
                Value::Array(vec![
                    t("plain"),
                    t("with space"),
                    t("q\"uote"),
                    t("back\\slash"),
                    t("NULL"),
                    Value::Null,
                    t(""),
                    Value::Array(vec![t("nested")]),
                ])
            )
        );
        assert_eq!(
            parse_array(
                r#"{"2024-01-01 00:00:00+00",infinity}"#,
                &ValueKind::TimestampTz,
                b','
            )
            .unwrap(),
            Value::Array(vec![
                Value::TimestampTz(1_704_067_200_000_000),
                Value::TimestampTz(i64::MAX)
            ])
        );
        assert_eq!(
            parse_array(r#"{"(1,2),(0,0)";"(3,3),(1,1)"}"#, &ValueKind::Text, b';').unwrap(),
            Value::Array(vec![t("(1,2),(0,0)"), t("(3,3),(1,1)")])
        );
        for bad in ["", "{", "{1,2", "{1}x", "{\"a}", "1,2"] {
            assert!(parse_array(bad, &ints, b',').is_err(), "{bad}");
        }
    }

    /// Postgres stores at most 6 dimensions (MAXDIM); deeper nesting only comes from a
    /// damaged or hostile input and must be an error, not a recursion that overflows the
    /// stack (found by the pgoutput fuzz target: 16,000 '{').
    #[test]
    fn array_nesting_is_bounded() {
        let ints = ValueKind::Int32;
        let six = format!("{}1{}", "{".repeat(6), "}".repeat(6));
        assert!(parse_array(&six, &ints, b',').is_ok());
        let seven = format!("{}1{}", "{".repeat(7), "}".repeat(7));
        let e = parse_array(&seven, &ints, b',').unwrap_err().to_string();
        assert!(e.contains("dimensions"), "{e}");
        let deep = "{".repeat(1_000_000);
        assert!(parse_array(&deep, &ints, b',').is_err());
    }

    #[test]
    fn composites() {
        let attrs = vec![
            ("id".to_string(), ValueKind::Int32),
            ("name".to_string(), ValueKind::Text),
            ("ok".to_string(), ValueKind::Bool),
            ("n".to_string(), ValueKind::Numeric),
        ];
        assert_eq!(
            parse_composite(r#"(1,"a ""b"" \\c",t,)"#, &attrs).unwrap(),
            r#"{"id":1,"name":"a \"b\" \\c","ok":true,"n":null}"#
        );
        assert_eq!(
            parse_composite(r#"(2,"",f,1.50)"#, &attrs).unwrap(),
            r#"{"id":2,"name":"","ok":false,"n":"1.50"}"#
        );
        assert!(parse_composite("(1,2)", &attrs).is_err());
        assert!(parse_composite("1,2", &attrs).is_err());
    }
}
