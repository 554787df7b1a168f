//! Temporal conversions and text forms, written without a date library so they are exact
//! over the whole range the sources produce (dates before 1970, after 2038, BC years,
//! Postgres' ±infinity) and allocate nothing.
//!
//! Text forms follow `java.time`'s ISO formatters, which is what Debezium prints:
//! years are at least four digits, with a sign when negative or longer than four digits
//! (`+10000-01-01`, `-0001-12-31`, where year 0 is 1 BC), and the offset of a UTC instant
//! is `Z`.

use crate::value::Value;

const MICROS_PER_SEC: i64 = 1_000_000;
const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SEC;

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01.
/// (Howard Hinnant's `civil_from_days`; exact for every i64 day count we can be given.)
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn push_2(buf: &mut Vec<u8>, v: u32) {
    buf.push(b'0' + (v / 10) as u8);
    buf.push(b'0' + (v % 10) as u8);
}

/// `java.time` year: at least 4 digits; `+` when more than 4, `-` when negative.
#[inline(always)]
fn push_year(buf: &mut Vec<u8>, y: i64) {
    let mut ib = itoa::Buffer::new();
    if y < 0 {
        buf.push(b'-');
    } else if y > 9999 {
        buf.push(b'+');
    }
    let digits = ib.format(y.unsigned_abs());
    for _ in digits.len()..4 {
        buf.push(b'0');
    }
    buf.extend_from_slice(digits.as_bytes());
}

/// Fraction of a second from `nanos` (0..1e9): exactly `width` digits, or, when `width`
/// is 0, as few as needed (none for a whole second), like `ISO_OFFSET_DATE_TIME`.
fn push_fraction(buf: &mut Vec<u8>, nanos: u32, width: u8) {
    if width == 0 {
        if nanos == 0 {
            return;
        }
        let mut digits = [0u8; 9];
        let mut n = nanos;
        for d in digits.iter_mut().rev() {
            *d = b'0' + (n % 10) as u8;
            n /= 10;
        }
        let mut len = 9;
        while digits[len - 1] == b'0' {
            len -= 1;
        }
        buf.push(b'.');
        buf.extend_from_slice(&digits[..len]);
    } else {
        let mut digits = [0u8; 9];
        let mut n = nanos;
        for d in digits.iter_mut().rev() {
            *d = b'0' + (n % 10) as u8;
            n /= 10;
        }
        buf.push(b'.');
        buf.extend_from_slice(&digits[..width.min(9) as usize]);
    }
}

fn push_hms(buf: &mut Vec<u8>, micros_of_day: i64) {
    let secs = micros_of_day / MICROS_PER_SEC;
    push_2(buf, (secs / 3600) as u32);
    buf.push(b':');
    push_2(buf, ((secs / 60) % 60) as u32);
    buf.push(b':');
    push_2(buf, (secs % 60) as u32);
}

/// `io.debezium.time.ZonedTimestamp` text of a UTC instant in microseconds, with exactly
/// `frac` fractional digits (0: as few as needed). Postgres' ±infinity print as Debezium
/// prints them: `infinity` / `-infinity`.
pub fn push_zoned_timestamp(buf: &mut Vec<u8>, micros: i64, frac: u8) {
    if micros == Value::TIMESTAMP_POS_INFINITY {
        buf.extend_from_slice(b"infinity");
        return;
    }
    if micros == Value::TIMESTAMP_NEG_INFINITY {
        buf.extend_from_slice(b"-infinity");
        return;
    }
    let days = micros.div_euclid(MICROS_PER_DAY);
    let tod = micros.rem_euclid(MICROS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    push_zoned_parts(buf, (y, m, d, tod), frac);
}

/// A timestamp Postgres printed (`DateStyle=ISO`, `TimeZone=UTC`) that is beyond the
/// microsecond `i64` range (after 294247 AD, kept as [`Value::Raw`]): `(y, m, d,
/// µs of the day)`, when `text` is `Y-MM-DD HH:MM:SS[.f]` (`+00` after it with
/// `with_zone`), a year after 1 AD.
pub(crate) fn parse_wide_timestamp(text: &str, with_zone: bool) -> Option<(i64, u32, u32, i64)> {
    let text = if with_zone {
        text.strip_suffix("+00")?
    } else {
        text
    };
    let (date, time) = text.split_once(' ')?;
    let mut d = date.splitn(3, '-');
    let (y, m, day) = (
        d.next()?.parse::<i64>().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    // A date that does not exist (MySQL's `2024-00-10` or `2024-02-31`, kept as raw
    // text) has no instant: it stays hidden rather than turning into some other day.
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let days_in_month = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if day == 0 || day > days_in_month {
        return None;
    }
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.splitn(3, ':');
    let (h, mi, sec): (i64, i64, i64) = (
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
    );
    if frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) || y < 1 {
        return None;
    }
    let us: i64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<6}").parse().ok()?
    };
    Some((y, m, day, ((h * 60 + mi) * 60 + sec) * MICROS_PER_SEC + us))
}

/// [`push_zoned_timestamp`] of a timestamp given as its civil parts (for the years the
/// microsecond `i64` does not reach).
pub(crate) fn push_zoned_parts(buf: &mut Vec<u8>, (y, m, d, tod): (i64, u32, u32, i64), frac: u8) {
    push_year(buf, y);
    buf.push(b'-');
    push_2(buf, m);
    buf.push(b'-');
    push_2(buf, d);
    buf.push(b'T');
    push_hms(buf, tod);
    push_fraction(buf, ((tod % MICROS_PER_SEC) * 1000) as u32, frac);
    buf.push(b'Z');
}

/// Milliseconds since 1970 of civil parts, when they fit an `i64`.
pub(crate) fn parts_millis((y, m, d, tod): (i64, u32, u32, i64)) -> Option<i64> {
    // Days since 1970-01-01 (H. Hinnant's algorithm), in i128.
    let y = y as i128 - i128::from(m <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i128 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i128 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    i64::try_from(days * 86_400_000 + (tod / 1000) as i128).ok()
}

/// `io.debezium.time.ZonedTime` text: the time normalised to UTC, as `OffsetTime` in UTC
/// prints (`HH:MM:SS[.fraction]Z`, fraction as short as possible).
pub fn push_zoned_time(buf: &mut Vec<u8>, micros: i64, offset_seconds: i32) {
    let utc = (micros - offset_seconds as i64 * MICROS_PER_SEC).rem_euclid(MICROS_PER_DAY);
    push_hms(buf, utc);
    push_fraction(buf, ((utc % MICROS_PER_SEC) * 1000) as u32, 0);
    buf.push(b'Z');
}

/// Microseconds in Debezium's `MicroDuration` approximation: a month is 365.25 / 12 =
/// 30.4375 days, which is exactly 2 629 800 s, so the sum is exact in i128 and saturates
/// only outside i64 (Debezium computes it in a double and loses precision earlier).
pub fn interval_micros(months: i32, days: i32, micros: i64) -> i64 {
    let total =
        months as i128 * 2_629_800_000_000 + days as i128 * MICROS_PER_DAY as i128 + micros as i128;
    total.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// `io.debezium.time.Interval` text: `P<y>Y<m>M<d>DT<h>H<min>M<s>S`, every component
/// present, seconds without trailing zeros — Debezium's `Interval.toIsoString`.
pub fn push_interval_iso(buf: &mut Vec<u8>, months: i32, days: i32, micros: i64) {
    let mut ib = itoa::Buffer::new();
    let years = months / 12;
    let months = months % 12;
    let hours = micros / 3_600_000_000;
    let minutes = (micros % 3_600_000_000) / 60_000_000;
    let sec_micros = micros % 60_000_000;
    buf.push(b'P');
    buf.extend_from_slice(ib.format(years).as_bytes());
    buf.push(b'Y');
    buf.extend_from_slice(ib.format(months).as_bytes());
    buf.push(b'M');
    buf.extend_from_slice(ib.format(days).as_bytes());
    buf.extend_from_slice(b"DT");
    buf.extend_from_slice(ib.format(hours).as_bytes());
    buf.push(b'H');
    buf.extend_from_slice(ib.format(minutes).as_bytes());
    buf.push(b'M');
    if sec_micros < 0 {
        buf.push(b'-');
    }
    let abs = sec_micros.unsigned_abs();
    buf.extend_from_slice(ib.format(abs / 1_000_000).as_bytes());
    push_fraction(buf, ((abs % 1_000_000) * 1000) as u32, 0);
    buf.push(b'S');
}

/// Floor division to milliseconds, as `Instant.toEpochMilli()` does for negative values.
/// Postgres' ±infinity sentinels stay sentinels (`i64::MAX` / `i64::MIN`).
pub fn micros_to_millis(micros: i64) -> i64 {
    if micros == i64::MAX || micros == i64::MIN {
        return micros;
    }
    micros.div_euclid(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zts(micros: i64, frac: u8) -> String {
        let mut b = Vec::new();
        push_zoned_timestamp(&mut b, micros, frac);
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(24_855), (2038, 1, 19));
        assert_eq!(civil_from_days(-719_528), (0, 1, 1));
        assert_eq!(civil_from_days(2_932_896), (9999, 12, 31));
    }

    #[test]
    fn wide_timestamps_need_a_real_date() {
        assert_eq!(
            parse_wide_timestamp("294277-01-01 00:00:00.5+00", true),
            Some((294_277, 1, 1, 500_000))
        );
        assert_eq!(
            parse_wide_timestamp("2024-02-29 00:00:00", false),
            Some((2024, 2, 29, 0))
        );
        // MySQL's zero and invalid dates, kept as raw text.
        for t in [
            "0000-00-00 00:00:00",
            "2024-00-10 10:00:00.000",
            "2024-05-00 00:00:00",
            "2023-02-29 00:00:00",
            "2024-04-31 00:00:00",
        ] {
            assert_eq!(parse_wide_timestamp(t, false), None, "{t}");
        }
    }

    #[test]
    fn zoned_timestamps() {
        assert_eq!(zts(0, 6), "1970-01-01T00:00:00.000000Z");
        assert_eq!(zts(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(zts(1_500_000, 0), "1970-01-01T00:00:01.5Z");
        assert_eq!(zts(-1, 6), "1969-12-31T23:59:59.999999Z");
        assert_eq!(zts(1_740_218_268_517_360, 6), "2025-02-22T09:57:48.517360Z");
        assert_eq!(zts(1_740_218_268_517_360, 3), "2025-02-22T09:57:48.517Z");
        assert_eq!(zts(253_402_300_800_000_000, 0), "+10000-01-01T00:00:00Z");
        assert_eq!(
            zts(-62_167_219_200_000_001, 0),
            "-0001-12-31T23:59:59.999999Z"
        );
        assert_eq!(zts(i64::MAX, 6), "infinity");
        assert_eq!(zts(i64::MIN, 6), "-infinity");
    }

    #[test]
    fn zoned_time_normalises_to_utc() {
        let mut b = Vec::new();
        // 10:15:30.5+02:00 is 08:15:30.5Z
        push_zoned_time(
            &mut b,
            (10 * 3600 + 15 * 60 + 30) * 1_000_000 + 500_000,
            7200,
        );
        assert_eq!(b, b"08:15:30.5Z");
        b.clear();
        push_zoned_time(&mut b, 3600 * 1_000_000, 7200);
        assert_eq!(b, b"23:00:00Z");
    }

    #[test]
    fn intervals() {
        let mut b = Vec::new();
        push_interval_iso(
            &mut b,
            14,
            3,
            4 * 3_600_000_000 + 5 * 60_000_000 + 6_780_000,
        );
        assert_eq!(b, b"P1Y2M3DT4H5M6.78S");
        b.clear();
        push_interval_iso(&mut b, 0, 0, -1_500_000);
        assert_eq!(b, b"P0Y0M0DT0H0M-1.5S");
        assert_eq!(interval_micros(1, 0, 0), 2_629_800_000_000);
        assert_eq!(interval_micros(0, 1, 1), 86_400_000_001);
        assert_eq!(interval_micros(i32::MAX, i32::MAX, i64::MAX), i64::MAX);
    }
}
