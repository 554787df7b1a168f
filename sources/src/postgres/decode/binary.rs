//! Decoding Postgres' binary send format (`COPY … (FORMAT binary)`) into [`Value`]s.
//!
//! Owns [`BinKind`], the decoders of the built-in scalar types whose binary form is
//! simple; which type has which decoder is the type table's business
//! ([`super::BUILTIN_TYPES`], the `binary` column).
//!
//! Invariant: for every value, [`decode_binary`] gives exactly the [`Value`] the text
//! parser ([`super::text`]) gives for the same value's text form under the session
//! settings of [`crate::postgres::snapshot::SESSION_SETTINGS`] (`tests/tests/pg_snapshot_copy.rs`
//! compares both on a real server). A field that does not fit its kind is an error
//! naming the kind, never a panic. Decoding runs per field per row: apart from numerics
//! too large for an `i128`, nothing is allocated but the [`Value`] itself.

use cdc_schemas::{Decimal, Value};

/// How a column is read from `COPY … (FORMAT binary)`: the built-in scalar types whose
/// binary form is simple and whose [`Value`] it gives is exactly what the text parser
/// gives for the text form (`tests/tests/pg_snapshot_copy.rs` compares both). Which
/// type has which is the `binary` column of [`super::BUILTIN_TYPES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinKind {
    Bool,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    Numeric,
    /// text, varchar, bpchar, name: the bytes (client_encoding UTF8).
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
    /// A version byte (1), then the text.
    Jsonb,
    Bits,
}

/// Days from 1970-01-01 to 2000-01-01 (Postgres' epoch).
const PG_EPOCH_DAYS: i32 = 10_957;
/// Microseconds from 1970-01-01 to 2000-01-01.
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// `N` big-endian bytes at `at`, or an error when `b` is too short.
pub(super) fn be<const N: usize>(b: &[u8], at: usize) -> Result<[u8; N], String> {
    b.get(at..at + N)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| format!("binary value of {} bytes is too short", b.len()))
}

/// Postgres' binary `numeric` (base-10000 digits) as a [`Decimal`] with the value's
/// display scale, as the text form `numeric_out` prints would parse.
fn decode_numeric(b: &[u8]) -> Result<Decimal, String> {
    let ndigits = u16::from_be_bytes(be(b, 0)?) as usize;
    let weight = i16::from_be_bytes(be(b, 2)?) as i64;
    let sign = u16::from_be_bytes(be(b, 4)?);
    let dscale = u16::from_be_bytes(be(b, 6)?) as i64;
    match sign {
        0x0000 | 0x4000 => {}
        0xC000 => return Ok(Decimal::NaN),
        0xD000 => return Ok(Decimal::PosInfinity),
        0xF000 => return Ok(Decimal::NegInfinity),
        s => return Err(format!("numeric with sign word {s:#x}")),
    }
    if b.len() != 8 + 2 * ndigits {
        return Err("numeric length does not match its digit count".into());
    }
    let digits = (0..ndigits).map(|i| u16::from_be_bytes([b[8 + 2 * i], b[9 + 2 * i]]));
    // value = N × 10^e with N the digits as one integer, so unscaled = N × 10^(e + dscale).
    let shift = 4 * (weight - ndigits as i64 + 1) + dscale;
    // Fast path: everything in an i128.
    let fast = (|| -> Option<i128> {
        let mut n: i128 = 0;
        for d in digits.clone() {
            n = n.checked_mul(10_000)?.checked_add(d as i128)?;
        }
        if shift >= 0 {
            n.checked_mul(10i128.checked_pow(u32::try_from(shift).ok()?)?)
        } else {
            let p = 10i128.checked_pow(u32::try_from(-shift).ok()?)?;
            (n % p == 0).then_some(n / p)
        }
    })();
    let scale = u32::try_from(dscale).map_err(|e| e.to_string())?;
    if let Some(n) = fast {
        let n = if sign == 0x4000 { -n } else { n };
        return Ok(Decimal::new(n.into(), scale));
    }
    // Large values: the decimal digits as text (what numeric_out prints).
    let mut s = String::with_capacity(4 * ndigits + 8);
    for d in digits {
        s.push_str(&format!("{d:04}"));
    }
    if shift >= 0 {
        s.extend(std::iter::repeat_n('0', shift as usize));
    } else {
        let cut = (-shift) as usize;
        if cut > s.len() || s[s.len() - cut..].bytes().any(|c| c != b'0') {
            // Digits past the display scale: not a value numeric_send produces.
            return Err("numeric digits beyond its display scale".into());
        }
        s.truncate(s.len() - cut);
    }
    let s = s.trim_start_matches('0');
    let mut text = String::with_capacity(s.len() + 3);
    if sign == 0x4000 {
        text.push('-');
    }
    let scale = scale as usize;
    if s.len() > scale {
        text.push_str(&s[..s.len() - scale]);
    } else {
        text.push('0');
    }
    if scale > 0 {
        text.push('.');
        text.extend(std::iter::repeat_n('0', scale.saturating_sub(s.len())));
        text.push_str(&s[s.len().saturating_sub(scale)..]);
    }
    text.parse::<Decimal>().map_err(|e| e.to_string())
}

fn utf8(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|e| format!("text is not UTF-8: {e}"))
}

/// Decodes one non-NULL binary field.
pub fn decode_binary(kind: BinKind, b: &[u8]) -> Result<Value, String> {
    let exact = |n: usize| {
        if b.len() == n {
            Ok(())
        } else {
            Err(format!(
                "{kind:?} value of {} bytes (expected {n})",
                b.len()
            ))
        }
    };
    Ok(match kind {
        BinKind::Bool => {
            exact(1)?;
            Value::Bool(b[0] != 0)
        }
        BinKind::Int2 => {
            exact(2)?;
            Value::Int16(i16::from_be_bytes(be(b, 0)?))
        }
        BinKind::Int4 => {
            exact(4)?;
            Value::Int32(i32::from_be_bytes(be(b, 0)?))
        }
        BinKind::Int8 => {
            exact(8)?;
            Value::Int64(i64::from_be_bytes(be(b, 0)?))
        }
        BinKind::Float4 => {
            exact(4)?;
            let f = f32::from_be_bytes(be(b, 0)?);
            Value::Float32(if f.is_nan() { f32::NAN } else { f })
        }
        BinKind::Float8 => {
            exact(8)?;
            let f = f64::from_be_bytes(be(b, 0)?);
            Value::Float64(if f.is_nan() { f64::NAN } else { f })
        }
        BinKind::Numeric => Value::Decimal(decode_numeric(b)?),
        BinKind::Text => Value::Text(utf8(b)?),
        BinKind::Json => Value::Json(utf8(b)?),
        BinKind::Jsonb => match b.split_first() {
            Some((1, text)) => Value::Json(utf8(text)?),
            _ => return Err("jsonb of an unknown binary version".into()),
        },
        BinKind::Bytea => Value::Bytes(b.to_vec()),
        BinKind::Date => {
            exact(4)?;
            Value::Date(match i32::from_be_bytes(be(b, 0)?) {
                i32::MAX => Value::DATE_POS_INFINITY,
                i32::MIN => Value::DATE_NEG_INFINITY,
                d => d.checked_add(PG_EPOCH_DAYS).ok_or("date out of range")?,
            })
        }
        BinKind::Time => {
            exact(8)?;
            Value::Time(i64::from_be_bytes(be(b, 0)?))
        }
        BinKind::TimeTz => {
            exact(12)?;
            Value::TimeTz {
                micros: i64::from_be_bytes(be(b, 0)?),
                // Postgres stores the zone as seconds west of UTC.
                offset_seconds: -i32::from_be_bytes(be(b, 8)?),
            }
        }
        BinKind::Timestamp | BinKind::TimestampTz => {
            exact(8)?;
            let t = match i64::from_be_bytes(be(b, 0)?) {
                i64::MAX => Value::TIMESTAMP_POS_INFINITY,
                i64::MIN => Value::TIMESTAMP_NEG_INFINITY,
                t => match t.checked_add(PG_EPOCH_MICROS) {
                    Some(t) if t != i64::MAX => t,
                    // After 294247 AD: beyond the model's range, kept as Postgres' text.
                    _ => {
                        let text = timestamp_text(t, kind == BinKind::TimestampTz);
                        return Ok(Value::raw(text, Value::Null));
                    }
                },
            };
            if kind == BinKind::Timestamp {
                Value::Timestamp(t)
            } else {
                Value::TimestampTz(t)
            }
        }
        BinKind::Interval => {
            exact(16)?;
            Value::Interval {
                micros: i64::from_be_bytes(be(b, 0)?),
                days: i32::from_be_bytes(be(b, 8)?),
                months: i32::from_be_bytes(be(b, 12)?),
            }
        }
        BinKind::Uuid => {
            exact(16)?;
            Value::Uuid(be(b, 0)?)
        }
        BinKind::Bits => {
            let len = i32::from_be_bytes(be(b, 0)?);
            let len = u32::try_from(len).map_err(|_| "negative bit length")?;
            let bytes = &b[4..];
            if bytes.len() != (len as usize).div_ceil(8) {
                return Err("bit string length does not match its bytes".into());
            }
            Value::Bits {
                len,
                bytes: bytes.to_vec(),
            }
        }
    })
}

/// Postgres' text output (DateStyle ISO, TimeZone UTC) of a timestamp given in µs since
/// 2000-01-01, for the values after 294247 AD the model cannot hold: `294276-12-31
/// 23:59:59.999999` (`+00` appended with a zone), trailing fractional zeros dropped.
fn timestamp_text(pg_micros: i64, with_zone: bool) -> String {
    let us = pg_micros as i128 + PG_EPOCH_MICROS as i128;
    let days = us.div_euclid(86_400_000_000);
    let rem = us.rem_euclid(86_400_000_000);
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i128::from(m <= 2);
    let (secs, frac) = (rem / 1_000_000, rem % 1_000_000);
    let mut s = format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    );
    if frac != 0 {
        let f = format!("{frac:06}");
        s.push('.');
        s.push_str(f.trim_end_matches('0'));
    }
    if with_zone {
        s.push_str("+00");
    }
    s
}

#[cfg(test)]
mod timestamp_text_tests {
    use super::*;

    #[test]
    fn beyond_the_model_range_as_postgres_prints_it() {
        // 294276-12-31 23:59:59.999999, Postgres' last timestamp, in µs since 2000.
        let last = 9_223_371_331_199_999_999;
        assert_eq!(timestamp_text(last, false), "294276-12-31 23:59:59.999999");
        assert_eq!(
            timestamp_text(last - 999_999, true),
            "294276-12-31 23:59:59+00"
        );
        assert_eq!(timestamp_text(0, false), "2000-01-01 00:00:00");
        let b = last.to_be_bytes();
        assert_eq!(
            decode_binary(BinKind::Timestamp, &b).unwrap(),
            Value::raw("294276-12-31 23:59:59.999999", Value::Null)
        );
    }
}
