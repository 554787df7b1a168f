//! Value-level conversions shared by the JSON and Avro writers: checking that a
//! [`Value`] fits a `Conv`, decimal rescaling to unscaled two's-complement bytes, bit
//! strings in Debezium's byte order, UUID text.
//!
//! Invariant: nothing here panics on any [`Value`]; a value that does not fit is a
//! [`ValueError`] the encoder turns into an [`crate::encode::EncodeError`] naming the
//! table and column.

use crate::decimal::Decimal;
use crate::encode::hidden::HiddenReason;
use crate::value::Value;

/// Why one value could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueError {
    /// The value's variant does not belong to the column's type.
    Mismatch {
        expected: &'static str,
        got: &'static str,
    },
    /// The value is of the right kind but the chosen representation cannot carry it.
    NotRepresentable(String),
    /// NULL in a NOT NULL column.
    NullInRequired,
    /// A valid value the record format cannot carry (see `hidden.rs`): with
    /// `unrepresentable_handling_mode = header` it travels in a header instead.
    Unrepresentable { reason: HiddenReason, why: String },
}

impl ValueError {
    pub(crate) fn unrepresentable(reason: HiddenReason, why: impl Into<String>) -> Self {
        ValueError::Unrepresentable {
            reason,
            why: why.into(),
        }
    }
}

impl std::fmt::Display for ValueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueError::Mismatch { expected, got } => {
                write!(f, "expected a {expected} value, got {got}")
            }
            ValueError::NotRepresentable(why) => f.write_str(why),
            ValueError::Unrepresentable { why, .. } => write!(
                f,
                "{why} (or set format.unrepresentable_handling_mode = \"header\" to carry it in a record header)"
            ),
            ValueError::NullInRequired => f.write_str(
                "NULL in a column the table schema declares NOT NULL (refresh the table schema)",
            ),
        }
    }
}

/// The variant name of a value, for error messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "NULL",
        Value::Unchanged => "unchanged (TOAST)",
        Value::Bool(_) => "Bool",
        Value::Int16(_) => "Int16",
        Value::Int32(_) => "Int32",
        Value::Int64(_) => "Int64",
        Value::UInt64(_) => "UInt64",
        Value::Float32(_) => "Float32",
        Value::Float64(_) => "Float64",
        Value::Decimal(_) => "Decimal",
        Value::Text(_) => "Text",
        Value::Bytes(_) => "Bytes",
        Value::Json(_) => "Json",
        Value::Uuid(_) => "Uuid",
        Value::Date(_) => "Date",
        Value::Time(_) => "Time",
        Value::TimeTz { .. } => "TimeTz",
        Value::Timestamp(_) => "Timestamp",
        Value::TimestampTz(_) => "TimestampTz",
        Value::Interval { .. } => "Interval",
        Value::Bits { .. } => "Bits",
        Value::Array(_) => "Array",
        Value::Raw(_) => "Raw",
    }
}

pub fn mismatch(expected: &'static str, v: &Value) -> ValueError {
    ValueError::Mismatch {
        expected,
        got: kind(v),
    }
}

/// Any integer value as i64, with the range check of the target width.
pub fn int_in(v: &Value, min: i64, max: i64, expected: &'static str) -> Result<i64, ValueError> {
    let i = match v {
        Value::Int16(i) => *i as i64,
        Value::Int32(i) => *i as i64,
        Value::Int64(i) => *i,
        Value::UInt64(u) => i64::try_from(*u).map_err(|_| {
            ValueError::unrepresentable(
                HiddenReason::OutOfRange,
                format!(
                    "{u} does not fit a signed 64-bit integer (set bigint.unsigned.handling.mode=precise)"
                ),
            )
        })?,
        other => return Err(mismatch(expected, other)),
    };
    if i < min || i > max {
        return Err(ValueError::NotRepresentable(format!(
            "{i} is out of range for a {expected} column"
        )));
    }
    Ok(i)
}

/// Unscaled two's-complement big-endian bytes, minimal length (as Java's
/// `BigInteger.toByteArray`), kept on the stack for the common case.
pub enum DecBytes {
    Small([u8; 16], u8),
    Big(Vec<u8>),
}

impl DecBytes {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            DecBytes::Small(b, start) => &b[*start as usize..],
            DecBytes::Big(v) => v,
        }
    }

    pub fn from_i128(v: i128) -> Self {
        let b = v.to_be_bytes();
        let mut start = 0usize;
        while start < 15 {
            let (cur, next) = (b[start], b[start + 1]);
            if (cur == 0x00 && next & 0x80 == 0) || (cur == 0xff && next & 0x80 != 0) {
                start += 1;
            } else {
                break;
            }
        }
        DecBytes::Small(b, start as u8)
    }
}

const POW10: [i128; 19] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
    100_000_000_000,
    1_000_000_000_000,
    10_000_000_000_000,
    100_000_000_000_000,
    1_000_000_000_000_000,
    10_000_000_000_000_000,
    100_000_000_000_000_000,
    1_000_000_000_000_000_000,
];

#[cold]
fn not_finite(d: &Decimal) -> ValueError {
    ValueError::unrepresentable(
        HiddenReason::NumericSpecial,
        format!(
            "numeric {d} cannot be carried by decimal.handling.mode=precise \
             (Connect Decimal has no NaN/Infinity); use decimal.handling.mode=string or double"
        ),
    )
}

/// The unscaled value of `d` at exactly `scale` fractional digits. Adding zeros is exact;
/// dropping non-zero digits is an error (the column's declared scale was violated).
pub fn unscaled_at(d: &Decimal, scale: u32) -> Result<DecBytes, ValueError> {
    let Decimal::Finite { unscaled, scale: s } = d else {
        return Err(not_finite(d));
    };
    // Fast path: fits i128 and the rescale factor is small.
    if let Ok(u) = i128::try_from(unscaled) {
        if *s == scale {
            return Ok(DecBytes::from_i128(u));
        }
        if scale > *s && scale - *s < 19 {
            if let Some(v) = u.checked_mul(POW10[(scale - s) as usize]) {
                return Ok(DecBytes::from_i128(v));
            }
        }
    }
    match d.rescale_exact(scale) {
        Some(Decimal::Finite { unscaled, .. }) => Ok(DecBytes::Big(unscaled.to_signed_bytes_be())),
        _ => Err(ValueError::NotRepresentable(format!(
            "numeric {d} has more than {scale} fractional digits, the column's declared scale"
        ))),
    }
}

/// Unscaled bytes and scale as the value has them (`VariableScaleDecimal`).
pub fn unscaled_own(d: &Decimal) -> Result<(DecBytes, u32), ValueError> {
    let Decimal::Finite { unscaled, scale } = d else {
        return Err(not_finite(d));
    };
    let bytes = match i128::try_from(unscaled) {
        Ok(u) => DecBytes::from_i128(u),
        Err(_) => DecBytes::Big(unscaled.to_signed_bytes_be()),
    };
    Ok((bytes, *scale))
}

/// `BIGINT UNSIGNED` as an unscaled decimal (scale 0).
pub fn unsigned_decimal(v: &Value) -> Result<DecBytes, ValueError> {
    let u: i128 = match v {
        Value::UInt64(u) => *u as i128,
        Value::Int64(i) => *i as i128,
        Value::Int32(i) => *i as i128,
        Value::Int16(i) => *i as i128,
        Value::Decimal(d) => return unscaled_at(d, 0),
        other => return Err(mismatch("UInt64", other)),
    };
    Ok(DecBytes::from_i128(u))
}

/// A decimal value for `decimal.handling.mode = double`.
pub fn decimal_f64(v: &Value) -> Result<f64, ValueError> {
    match v {
        Value::Decimal(d) => Ok(d.to_f64()),
        other => Err(mismatch("Decimal", other)),
    }
}

/// Debezium's `Bits` bytes: the bit string read as an unsigned number (first bit most
/// significant), as little-endian bytes, `ceil(len / 8)` of them, or with `minimal` as
/// few as hold the number (none for zero: Java's `BitSet.toByteArray`, what Debezium's
/// Postgres connector emits). Our [`Value::Bits`] packs the bits left-aligned (first bit
/// in the top bit of byte 0).
pub fn bits_le(len: u32, bytes: &[u8], minimal: bool) -> Vec<u8> {
    let n = (len as usize).div_ceil(8);
    let mut out = vec![0u8; n];
    for i in 0..len as usize {
        let bit = bytes
            .get(i / 8)
            .map(|b| (b >> (7 - (i % 8))) & 1)
            .unwrap_or(0);
        if bit == 1 {
            // Bit i of the string has weight 2^(len-1-i).
            let w = len as usize - 1 - i;
            out[w / 8] |= 1 << (w % 8);
        }
    }
    if minimal {
        while out.last() == Some(&0) {
            out.pop();
        }
    }
    out
}

/// The first bit of a bit string, for `bit(1)` columns written as booleans.
pub fn first_bit(v: &Value) -> Result<bool, ValueError> {
    match v {
        Value::Bits { bytes, .. } => Ok(bytes.first().map(|b| b & 0x80 != 0).unwrap_or(false)),
        Value::Bool(b) => Ok(*b),
        other => Err(mismatch("Bits", other)),
    }
}

/// A MySQL spatial value's parts, as Debezium's `Geometry` / `Point` structs hold them:
/// the SRID (the first 4 bytes, little-endian; `None` for 0, which Debezium writes as
/// null), the WKB after it and, for a `point` column, its x and y.
pub struct GeometryParts<'a> {
    pub srid: Option<i32>,
    pub wkb: &'a [u8],
    pub xy: (f64, f64),
}

pub fn geometry_parts(v: &Value, point: bool) -> Result<GeometryParts<'_>, ValueError> {
    let Value::Bytes(b) = v else {
        return Err(mismatch("Bytes (MySQL geometry)", v));
    };
    let (Some(srid), Some(wkb)) = (b.first_chunk::<4>(), b.get(4..)) else {
        return Err(ValueError::NotRepresentable(format!(
            "a MySQL geometry value of {} bytes: shorter than its 4-byte SRID",
            b.len()
        )));
    };
    let srid = i32::from_le_bytes(*srid);
    let mut xy = (0.0, 0.0);
    if point {
        xy = wkb_point(wkb).ok_or_else(|| {
            ValueError::NotRepresentable("a POINT column's value is not a WKB point".into())
        })?;
    }
    Ok(GeometryParts {
        srid: (srid != 0).then_some(srid),
        wkb,
        xy,
    })
}

/// x and y of a 2-D WKB point (byte order byte, type 1, two doubles).
fn wkb_point(wkb: &[u8]) -> Option<(f64, f64)> {
    let le = match wkb.first()? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let word = |at: usize| -> Option<[u8; 8]> { wkb.get(at..at + 8)?.try_into().ok() };
    let ty: [u8; 4] = wkb.get(1..5)?.try_into().ok()?;
    let ty = if le {
        u32::from_le_bytes(ty)
    } else {
        u32::from_be_bytes(ty)
    };
    if ty != 1 {
        return None;
    }
    let f = |b: [u8; 8]| {
        if le {
            f64::from_le_bytes(b)
        } else {
            f64::from_be_bytes(b)
        }
    };
    Some((f(word(5)?), f(word(13)?)))
}

/// Canonical lowercase UUID text.
pub fn uuid_text(u: &[u8; 16]) -> [u8; 36] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [b'-'; 36];
    let mut j = 0;
    for (i, b) in u.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            j += 1;
        }
        out[j] = HEX[(b >> 4) as usize];
        out[j + 1] = HEX[(b & 0xf) as usize];
        j += 2;
    }
    out
}

/// Lowercase hex of bytes (`binary.handling.mode = hex`).
pub fn push_hex(buf: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    buf.reserve(bytes.len() * 2);
    for b in bytes {
        buf.push(HEX[(b >> 4) as usize]);
        buf.push(HEX[(b & 0xf) as usize]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_bigint::BigInt;

    #[test]
    fn minimal_twos_complement() {
        for v in [
            0i128,
            1,
            -1,
            127,
            128,
            -128,
            -129,
            255,
            256,
            i64::MAX as i128,
            i128::MIN,
        ] {
            let ours = DecBytes::from_i128(v);
            assert_eq!(ours.as_slice(), BigInt::from(v).to_signed_bytes_be(), "{v}");
        }
    }

    #[test]
    fn rescaling() {
        let d: Decimal = "1.5".parse().unwrap();
        assert_eq!(unscaled_at(&d, 2).unwrap().as_slice(), &[0, 150]);
        let d: Decimal = "1.555".parse().unwrap();
        assert!(unscaled_at(&d, 2).is_err());
        let d: Decimal = "123456789012345678901234567890123456789012.5"
            .parse()
            .unwrap();
        let b = unscaled_at(&d, 3).unwrap();
        assert_eq!(
            Decimal::from_twos_complement_be(b.as_slice(), 3).to_string(),
            "123456789012345678901234567890123456789012.500"
        );
        assert!(unscaled_at(&Decimal::NaN, 2).is_err());
    }

    #[test]
    fn bits_little_endian() {
        // b'101' left-aligned is 0b1010_0000; value 5.
        assert_eq!(bits_le(3, &[0b1010_0000], false), vec![5]);
        // 10 bits 1000000001 → 513 → [0x01, 0x02]
        assert_eq!(
            bits_le(10, &[0b1000_0000, 0b0100_0000], false),
            vec![0x01, 0x02]
        );
        // Postgres (minimal): high zero bytes dropped, zero is no bytes at all.
        assert_eq!(bits_le(10, &[0b0000_0000, 0b0100_0000], true), vec![0x01]);
        assert_eq!(bits_le(12, &[0, 0], true), Vec::<u8>::new());
        assert_eq!(
            bits_le(12, &[0b1010_0000, 0b0001_0000], false),
            vec![0x01, 0x0a]
        );
    }

    #[test]
    fn geometry() {
        let mut b = 4326u32.to_le_bytes().to_vec();
        b.extend_from_slice(&[1, 1, 0, 0, 0]);
        b.extend_from_slice(&1.5f64.to_le_bytes());
        b.extend_from_slice(&(-2f64).to_le_bytes());
        let v = Value::Bytes(b.clone());
        let p = geometry_parts(&v, true).unwrap();
        assert_eq!((p.srid, p.xy, p.wkb), (Some(4326), (1.5, -2.0), &b[4..]));
        let mut z = vec![0u8; 4];
        z.extend_from_slice(&[0, 0, 0, 0, 1]);
        z.extend_from_slice(&1f64.to_be_bytes());
        z.extend_from_slice(&2f64.to_be_bytes());
        let v = Value::Bytes(z);
        let p = geometry_parts(&v, true).unwrap();
        assert_eq!((p.srid, p.xy), (None, (1.0, 2.0)));
        assert!(geometry_parts(&Value::Bytes(vec![0; 3]), false).is_err());
        let line = Value::Bytes(vec![0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0]);
        assert!(geometry_parts(&line, true).is_err());
        assert_eq!(geometry_parts(&line, false).unwrap().wkb.len(), 9);
    }

    #[test]
    fn uuid() {
        let u = [
            0xef, 0x9b, 0x5b, 0xeb, 0x9c, 0x21, 0x4d, 0x66, 0xa7, 0x69, 0x47, 0x20, 0x7c, 0x20,
            0x5b, 0xbe,
        ];
        assert_eq!(&uuid_text(&u), b"ef9b5beb-9c21-4d66-a769-47207c205bbe");
    }
}
