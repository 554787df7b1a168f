//! Arbitrary-precision decimal numbers, as Postgres `numeric` and MySQL `DECIMAL` hold them.
//!
//! A finite value is an unscaled integer and a scale: `value = unscaled × 10^-scale`.
//! The scale is kept as the source wrote it, so `1.50` stays `1.50` (scale 2) and is not
//! normalised to `1.5`: trailing zeros are part of what the database stores and shows.
//! Postgres also has `NaN`, `Infinity` and `-Infinity` for `numeric`; they are values here,
//! never errors.

use std::fmt;
use std::str::FromStr;

use num_bigint::{BigInt, Sign};

/// A lossless decimal number.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Decimal {
    Finite { unscaled: BigInt, scale: u32 },
    NaN,
    PosInfinity,
    NegInfinity,
}

/// A string that is not a decimal number.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("not a decimal number: {0:?}")]
pub struct ParseDecimalError(pub String);

impl Decimal {
    pub fn new(unscaled: BigInt, scale: u32) -> Self {
        Decimal::Finite { unscaled, scale }
    }

    pub fn is_finite(&self) -> bool {
        matches!(self, Decimal::Finite { .. })
    }

    /// The scale of a finite value (digits after the decimal point).
    pub fn scale(&self) -> Option<u32> {
        match self {
            Decimal::Finite { scale, .. } => Some(*scale),
            _ => None,
        }
    }

    /// Unscaled value as big-endian two's complement bytes, the representation Avro's
    /// `decimal` logical type and Kafka Connect's `Decimal` use. `None` for NaN/±infinity.
    pub fn to_twos_complement_be(&self) -> Option<Vec<u8>> {
        match self {
            Decimal::Finite { unscaled, .. } => Some(unscaled.to_signed_bytes_be()),
            _ => None,
        }
    }

    /// The inverse of [`Decimal::to_twos_complement_be`].
    pub fn from_twos_complement_be(bytes: &[u8], scale: u32) -> Self {
        Decimal::Finite {
            unscaled: BigInt::from_signed_bytes_be(bytes),
            scale,
        }
    }

    /// Nearest `f64` (lossy; for `decimal.handling.mode = double`).
    pub fn to_f64(&self) -> f64 {
        match self {
            Decimal::NaN => f64::NAN,
            Decimal::PosInfinity => f64::INFINITY,
            Decimal::NegInfinity => f64::NEG_INFINITY,
            Decimal::Finite { .. } => self.to_string().parse().unwrap_or(f64::NAN),
        }
    }

    /// Rescale to `scale` digits after the point when that loses nothing (only adds
    /// zeros, or removes zeros). `None` if digits would be lost.
    pub fn rescale_exact(&self, scale: u32) -> Option<Decimal> {
        match self {
            Decimal::Finite { unscaled, scale: s } => {
                if scale >= *s {
                    let factor = BigInt::from(10u32).pow(scale - s);
                    Some(Decimal::new(unscaled * factor, scale))
                } else {
                    let factor = BigInt::from(10u32).pow(s - scale);
                    let rem = unscaled % &factor;
                    if rem.sign() == Sign::NoSign {
                        Some(Decimal::new(unscaled / factor, scale))
                    } else {
                        None
                    }
                }
            }
            other => Some(other.clone()),
        }
    }
}

/// The most an exponent (`1e…`) may move the decimal point when a text is parsed: past
/// every database's decimal range (Postgres numeric: 131072 digits before the point,
/// 16383 after).
const MAX_EXPONENT_SHIFT: i64 = 200_000;

impl FromStr for Decimal {
    type Err = ParseDecimalError;

    /// Accepts the textual forms Postgres and MySQL print: `-12.340`, `.5`, `1e3`,
    /// `NaN`, `Infinity`, `-Infinity`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseDecimalError(s.to_string());
        match s {
            "NaN" | "nan" => return Ok(Decimal::NaN),
            "Infinity" | "+Infinity" | "inf" => return Ok(Decimal::PosInfinity),
            "-Infinity" | "-inf" => return Ok(Decimal::NegInfinity),
            _ => {}
        }
        let (mantissa, exp) = match s.find(['e', 'E']) {
            Some(i) => (&s[..i], s[i + 1..].parse::<i64>().map_err(|_| err())?),
            None => (s, 0),
        };
        let (neg, digits) = match mantissa.as_bytes().first() {
            Some(b'-') => (true, &mantissa[1..]),
            Some(b'+') => (false, &mantissa[1..]),
            _ => (false, mantissa),
        };
        let (int_part, frac_part) = match digits.find('.') {
            Some(i) => (&digits[..i], &digits[i + 1..]),
            None => (digits, ""),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(err());
        }
        if !int_part
            .bytes()
            .chain(frac_part.bytes())
            .all(|b| b.is_ascii_digit())
        {
            return Err(err());
        }
        let mut all = String::with_capacity(int_part.len() + frac_part.len());
        all.push_str(int_part);
        all.push_str(frac_part);
        let mut unscaled = BigInt::parse_bytes(all.as_bytes(), 10).ok_or_else(err)?;
        if neg {
            unscaled = -unscaled;
        }
        // An exponent moves the point: never by more than any database's decimal can hold
        // (Postgres: 131072 digits before the point, 16383 after; MySQL: 65), so that a
        // short text cannot ask for millions of digits (`5e11515524` took seconds and
        // megabytes; a larger exponent wrapped in `as u32`).
        let mut scale = (frac_part.len() as i64).checked_sub(exp).ok_or_else(err)?;
        if !(-MAX_EXPONENT_SHIFT..=MAX_EXPONENT_SHIFT + frac_part.len() as i64).contains(&scale) {
            return Err(err());
        }
        if scale < 0 {
            unscaled *= BigInt::from(10u32).pow((-scale) as u32);
            scale = 0;
        }
        let scale = u32::try_from(scale).map_err(|_| err())?;
        Ok(Decimal::Finite { unscaled, scale })
    }
}

impl fmt::Display for Decimal {
    /// Plain notation with exactly `scale` digits after the point (never exponent form).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decimal::NaN => f.write_str("NaN"),
            Decimal::PosInfinity => f.write_str("Infinity"),
            Decimal::NegInfinity => f.write_str("-Infinity"),
            Decimal::Finite { unscaled, scale } => {
                let digits = unscaled.magnitude().to_str_radix(10);
                if unscaled.sign() == Sign::Minus {
                    f.write_str("-")?;
                }
                let scale = *scale as usize;
                if scale == 0 {
                    return f.write_str(&digits);
                }
                if digits.len() > scale {
                    let (i, frac) = digits.split_at(digits.len() - scale);
                    write!(f, "{i}.{frac}")
                } else {
                    f.write_str("0.")?;
                    for _ in 0..scale - digits.len() {
                        f.write_str("0")?;
                    }
                    f.write_str(&digits)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt(s: &str) -> String {
        s.parse::<Decimal>().unwrap().to_string()
    }

    /// Found by the `pgoutput` fuzz target: a short text with a huge exponent asked for
    /// millions of digits (seconds of work), a larger one wrapped in `as u32`.
    #[test]
    fn exponents_beyond_any_decimal_are_refused() {
        for s in [
            "5e11515524",
            "1e5000000000",
            "1e-5000000000",
            "1e200001",
            "1.5e-200002",
            "1e-9223372036854775808",
        ] {
            assert!(s.parse::<Decimal>().is_err(), "{s}");
        }
        assert_eq!(rt("1e3"), "1000");
        assert_eq!(rt("1.5e-3"), "0.0015");
        let big = "1e131072".parse::<Decimal>().unwrap().to_string();
        assert_eq!(big.len(), 131073);
    }

    #[test]
    fn textual_round_trips_keep_scale() {
        for s in [
            "0",
            "1.50",
            "-1.50",
            "0.001",
            "-0.001",
            "123456789012345678901234567890.123456789",
            "NaN",
            "Infinity",
            "-Infinity",
            "0.0000000000000000000000000000000000001",
        ] {
            assert_eq!(rt(s), s);
        }
        assert_eq!(rt(".5"), "0.5");
        assert_eq!(rt("+7"), "7");
        assert_eq!(rt("1.5e3"), "1500");
        assert_eq!(rt("1.5e-3"), "0.0015");
    }

    #[test]
    fn rejects_garbage() {
        for s in ["", ".", "-", "1..2", "abc", "1e", "1.2.3", "--1"] {
            assert!(s.parse::<Decimal>().is_err(), "{s}");
        }
    }

    #[test]
    fn twos_complement_round_trip() {
        for s in ["-128.5", "127", "0", "-1", "99999999999999999999999.99"] {
            let d: Decimal = s.parse().unwrap();
            let b = d.to_twos_complement_be().unwrap();
            assert_eq!(Decimal::from_twos_complement_be(&b, d.scale().unwrap()), d);
        }
    }

    #[test]
    fn rescale() {
        let d: Decimal = "1.50".parse().unwrap();
        assert_eq!(d.rescale_exact(4).unwrap().to_string(), "1.5000");
        assert_eq!(d.rescale_exact(1).unwrap().to_string(), "1.5");
        assert!(d.rescale_exact(0).is_none());
    }

    proptest::proptest! {
        #[test]
        fn any_digits_round_trip(neg in proptest::bool::ANY, int in "[1-9][0-9]{0,40}|0", frac in "[0-9]{0,40}") {
            let s = if frac.is_empty() { int.clone() } else { format!("{int}.{frac}") };
            let s = if neg && s.bytes().any(|b| b != b'0' && b != b'.') { format!("-{s}") } else { s };
            proptest::prop_assert_eq!(rt(&s), s);
        }
    }
}
