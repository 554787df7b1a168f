//! Values the record format cannot carry, and the record headers that carry them instead.
//!
//! Some valid database values have no exact form in the chosen record format: a `numeric`
//! NaN or ±Infinity in a Connect Decimal (`decimal.handling.mode=precise`), an unchanged
//! TOASTed value of a type without a placeholder form (`int4[]`, precise `numeric`, …), a
//! timestamp beyond the microsecond `int64` range ([`Value::Raw`]), a multi-dimensional
//! array in an array column where the schema has one level (JSON with schemas, Avro), a
//! `BIGINT UNSIGNED` above `i64::MAX` in `long` mode. Stopping on them would stop the
//! stream (and make the database retain its log) for valid data, so by default
//! ([`UnrepresentableMode::Header`]) the record holds what Debezium 3.6 holds for the value
//! (its *stand-in*: see [`stand_in`]) and the exact value travels in a record header:
//!
//! - key: `cdc.unrepresentable.<image>.<column>`, `<image>` = `key`, `before` or `after`
//!   (the part of the record the column is in), `<column>` = the column's name as is;
//! - value: the database's own text of the value (UTF-8): `NaN`, `Infinity`,
//!   `{{1,2},{3,4}}`, `294276-12-31 23:59:59`; for an unchanged TOASTed value, which the
//!   database did not send, the 11 bytes `unavailable` (never the valid text of a type that
//!   gets this header: those types' placeholder-free texts are numbers, arrays, times).
//!
//! One header per such column and image, in column order, after any key-change header.
//! [`UnrepresentableMode::Fail`] keeps the old behaviour: an [`crate::encode::EncodeError`]
//! that names the column and the setting.
//!
//! Invariant: a value gets a header exactly when the `fail` mode would stop on it; values
//! the record carries exactly (or with Debezium's string/bytes placeholder, as unchanged
//! TOASTed text does) get none.

use std::fmt::Write as _;
use std::ops::Range;
use std::sync::Arc;

use crate::decimal::Decimal;
use crate::encode::connect::{ColumnPlan, Conv};
use crate::encode::convert::ValueError;
use crate::value::Value;

/// Prefix of the header keys this module writes.
pub const HEADER_UNREPRESENTABLE: &str = "cdc.unrepresentable.";

/// What the header holds for an unchanged TOASTed value (the database did not send it).
pub const UNAVAILABLE_TEXT: &str = "unavailable";

/// `format.unrepresentable_handling_mode`: what to do with a value the record format
/// cannot carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum UnrepresentableMode {
    /// Debezium's stand-in in the record, the exact text in a header; the stream goes on.
    #[default]
    Header,
    /// Stop with an encoding error naming the table and column.
    Fail,
}

/// Why a value could not be carried by the record (the metric's `reason` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HiddenReason {
    /// `numeric` NaN / ±Infinity in a Connect Decimal.
    NumericSpecial,
    /// An unchanged TOASTed value whose type has no placeholder form.
    UnchangedToast,
    /// Outside the range the model or the field type holds (microsecond timestamps after
    /// 294247 AD,
    /// `BIGINT UNSIGNED` above `i64::MAX` in `long` mode).
    OutOfRange,
    /// A multi-dimensional array in a one-level array field.
    NestedArray,
}

impl HiddenReason {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            HiddenReason::NumericSpecial => "numeric_nan_infinity",
            HiddenReason::UnchangedToast => "unchanged_toast",
            HiddenReason::OutOfRange => "out_of_range",
            HiddenReason::NestedArray => "nested_array",
        }
    }
}

/// Which part of a record a column value is in: the header key's `<image>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Image {
    Key,
    Before,
    After,
}

impl Image {
    pub fn name(self) -> &'static str {
        match self {
            Image::Key => "key",
            Image::Before => "before",
            Image::After => "after",
        }
    }
}

/// A record header inside a [`crate::encode::RecordBuf`]: ranges of its header bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderSpan {
    pub key: Range<usize>,
    pub value: Range<usize>,
    /// Set for the headers of this module: the table and why.
    pub hidden: Option<(Arc<str>, HiddenReason)>,
}

/// The header side of a [`crate::encode::RecordBuf`]: keys and values back to back in one
/// buffer, kept apart from the record bytes because a header is found while its record's
/// value is still being written.
#[derive(Clone, Debug, Default)]
pub struct HeaderBuf {
    pub bytes: Vec<u8>,
    pub spans: Vec<HeaderSpan>,
}

impl HeaderBuf {
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.spans.clear();
    }

    pub(crate) fn truncate(&mut self, bytes: usize, spans: usize) {
        self.bytes.truncate(bytes);
        self.spans.truncate(spans);
    }

    /// Appends a header with a fixed key.
    pub fn push(&mut self, key: &str, value: &[u8]) {
        let k = self.bytes.len();
        self.bytes.extend_from_slice(key.as_bytes());
        let v = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.spans.push(HeaderSpan {
            key: k..v,
            value: v..self.bytes.len(),
            hidden: None,
        });
    }

    /// Appends copies of `other`'s headers `range`.
    pub(crate) fn extend_from(&mut self, other: &HeaderBuf, range: Range<usize>) {
        for span in &other.spans[range] {
            let base = self.bytes.len();
            let start = span.key.start;
            self.bytes
                .extend_from_slice(&other.bytes[start..span.value.end]);
            let shift = |r: &Range<usize>| base + (r.start - start)..base + (r.end - start);
            self.spans.push(HeaderSpan {
                key: shift(&span.key),
                value: shift(&span.value),
                hidden: span.hidden.clone(),
            });
        }
    }

    /// Appends the header of one value the record could not carry.
    pub(crate) fn push_hidden(
        &mut self,
        table: &Arc<str>,
        image: Image,
        column: &str,
        v: &Value,
        reason: HiddenReason,
    ) {
        let k = self.bytes.len();
        self.bytes
            .extend_from_slice(HEADER_UNREPRESENTABLE.as_bytes());
        self.bytes.extend_from_slice(image.name().as_bytes());
        self.bytes.push(b'.');
        self.bytes.extend_from_slice(column.as_bytes());
        let start = self.bytes.len();
        let mut s = String::new();
        database_text(v, &mut s);
        self.bytes.extend_from_slice(s.as_bytes());
        self.spans.push(HeaderSpan {
            key: k..start,
            value: start..self.bytes.len(),
            hidden: Some((table.clone(), reason)),
        });
    }

    pub(crate) fn key(&self, i: usize) -> &str {
        std::str::from_utf8(&self.bytes[self.spans[i].key.clone()]).unwrap_or("")
    }

    pub(crate) fn value(&self, i: usize) -> &[u8] {
        &self.bytes[self.spans[i].value.clone()]
    }
}

/// Where a row writer reports the values it could not carry.
pub(crate) struct Hidden<'a> {
    pub mode: UnrepresentableMode,
    pub image: Image,
    pub table: &'a Arc<str>,
    /// `None`: the caller has no record to attach headers to (the plain `encode_value`
    /// API); the stand-in is written all the same.
    pub out: Option<&'a mut HeaderBuf>,
}

impl Hidden<'_> {
    /// Records one hidden value; `false` when the mode says to stop instead.
    #[inline(never)]
    pub(crate) fn note(&mut self, plan: &ColumnPlan, v: &Value, reason: HiddenReason) -> bool {
        if self.mode == UnrepresentableMode::Fail {
            return false;
        }
        if let Some(out) = self.out.as_deref_mut() {
            out.push_hidden(self.table, self.image, &plan.name, v, reason);
        }
        true
    }
}

/// A [`Value::Raw`] that a field carries exactly after all, as a value of another plan
/// with the same representation: a timestamp after 294247 AD as a `ZonedTimestamp` string
/// or in milliseconds (`Timestamp`, `time.precision.mode=connect` or precision ≤ 3), as
/// Debezium carries them. (The microsecond forms cannot: those are hidden.)
pub(crate) fn exact_form(conv: &Conv, v: &Value) -> Option<(Conv, Value)> {
    let Value::Raw(r) = v else { return None };
    if !r.typed.is_null() {
        return None;
    }
    use crate::encode::temporal;
    match conv {
        Conv::ZonedTimestamp { frac } => {
            let parts = temporal::parse_wide_timestamp(&r.text, true)
                .or_else(|| temporal::parse_wide_timestamp(&r.text, false))?;
            let mut b = Vec::with_capacity(40);
            temporal::push_zoned_parts(&mut b, parts, *frac);
            Some((Conv::Text, Value::Text(String::from_utf8(b).ok()?)))
        }
        Conv::TimestampMillis => {
            let parts = temporal::parse_wide_timestamp(&r.text, true)
                .or_else(|| temporal::parse_wide_timestamp(&r.text, false))?;
            Some((Conv::Int64, Value::Int64(temporal::parts_millis(parts)?)))
        }
        _ => None,
    }
}

/// Whether the failure `e` to write `v` is one this module carries, and why.
pub(crate) fn reason(conv: &Conv, v: &Value, e: &ValueError) -> Option<HiddenReason> {
    if let ValueError::Unrepresentable { reason, .. } = e {
        return Some(*reason);
    }
    match (conv, v) {
        (_, Value::Raw(r)) => Some(typed_reason(&r.typed)),
        (Conv::Array(inner), Value::Array(items)) if !matches!(**inner, Conv::Array(_)) => items
            .iter()
            .any(|i| matches!(i, Value::Array(_)))
            .then_some(HiddenReason::NestedArray),
        _ => None,
    }
}

/// Why a [`Value::Raw`] with this typed form cannot be written: no typed form (out of
/// range), or an array holding one, or a multi-dimensional array.
fn typed_reason(typed: &Value) -> HiddenReason {
    fn has_raw(v: &Value) -> bool {
        match v {
            Value::Raw(_) => true,
            Value::Array(items) => items.iter().any(has_raw),
            _ => false,
        }
    }
    match typed {
        Value::Array(_) if !has_raw(typed) => HiddenReason::NestedArray,
        _ => HiddenReason::OutOfRange,
    }
}

/// The error `fail` mode stops with, for `v` that failed with `e`.
pub(crate) fn fail_error(v: &Value, e: ValueError) -> ValueError {
    match (v, &e) {
        (_, ValueError::Unrepresentable { .. }) => e,
        (Value::Raw(r), _) => ValueError::unrepresentable(
            typed_reason(&r.typed),
            match typed_reason(&r.typed) {
                HiddenReason::NestedArray => "a multi-dimensional array in an array column: the field's schema has one level",
                _ => "the value is outside the range the data model holds (e.g. a timestamp after 294247 AD)",
            },
        ),
        _ => e,
    }
}

/// What the record holds in place of `v` in a field planned as `conv`: `None` is a null
/// (optional fields); otherwise the value to write, which `conv` always carries.
///
/// As Debezium 3.6.3 (recorded in `tests/golden/`): null for a precise-mode NaN/±Infinity,
/// for an unchanged TOASTed value without a placeholder form and for an out-of-range
/// timestamp; one null per sub-array for a multi-dimensional array; for an unchanged
/// TOASTed `int2[]`/`int4[]`/`int8[]`, the placeholder's UTF-8 bytes as the integers
/// (Debezium's int-array placeholder). A required (NOT NULL) field cannot hold a null
/// (Debezium stops there): it holds its type's zero (`0`, `""`, `[]`, 1970-01-01).
pub(crate) fn stand_in(conv: &Conv, v: &Value, optional: bool, placeholder: &str) -> Option<Value> {
    match (conv, v) {
        (Conv::Array(inner), Value::Unchanged)
            if matches!(**inner, Conv::Int16 | Conv::Int32 | Conv::Int64) =>
        {
            let int = |b: u8| match **inner {
                Conv::Int16 => Value::Int16(b as i16),
                Conv::Int32 => Value::Int32(b as i32),
                _ => Value::Int64(b as i64),
            };
            return Some(Value::Array(placeholder.bytes().map(int).collect()));
        }
        (Conv::Array(_), Value::Raw(r)) => {
            if let Value::Array(items) = &r.typed {
                return Some(Value::Array(vec![Value::Null; items.len()]));
            }
        }
        (Conv::Array(_), Value::Array(items)) => {
            return Some(Value::Array(vec![Value::Null; items.len()]));
        }
        (Conv::UInt64Long, Value::UInt64(u)) => {
            // Debezium's `long` mode wraps the value.
            return Some(Value::Int64(*u as i64));
        }
        _ => {}
    }
    if optional {
        None
    } else {
        Some(zero(conv))
    }
}

/// The zero value of a field planned as `conv` (every arm is a value `conv` carries).
fn zero(conv: &Conv) -> Value {
    match conv {
        Conv::Bool => Value::Bool(false),
        Conv::BitBool => Value::Bits {
            len: 1,
            bytes: vec![0],
        },
        Conv::Int16 => Value::Int16(0),
        Conv::Int32 | Conv::Year => Value::Int32(0),
        Conv::Int64 | Conv::UInt64Long | Conv::UInt64Precise => Value::Int64(0),
        Conv::Float32 => Value::Float32(0.0),
        Conv::Float64 => Value::Float64(0.0),
        Conv::DecimalPrecise { .. }
        | Conv::DecimalVariable
        | Conv::DecimalDouble
        | Conv::DecimalString => Value::Decimal(Decimal::new(0.into(), 0)),
        Conv::Text => Value::Text(String::new()),
        Conv::Bytes(_) => Value::Bytes(Vec::new()),
        Conv::Uuid => Value::Uuid([0; 16]),
        Conv::DateDays => Value::Date(0),
        Conv::TimeMillis | Conv::TimeMicros => Value::Time(0),
        Conv::ZonedTime => Value::TimeTz {
            micros: 0,
            offset_seconds: 0,
        },
        Conv::TimestampMillis | Conv::TimestampMicros | Conv::ZonedTimestamp { .. } => {
            Value::TimestampTz(0)
        }
        Conv::IntervalMicros | Conv::IntervalIso => Value::Interval {
            months: 0,
            days: 0,
            micros: 0,
        },
        Conv::Bits { .. } => Value::Bits {
            len: 0,
            bytes: Vec::new(),
        },
        Conv::Array(_) => Value::Array(Vec::new()),
        // SRID 0 and the WKB of POINT(0 0): a value of both the Geometry and Point forms.
        Conv::Geometry { .. } => {
            let mut b = vec![0, 0, 0, 0, 1, 1, 0, 0, 0];
            b.extend_from_slice(&[0; 16]);
            Value::Bytes(b)
        }
    }
}

/// The database's text of `v`, for the header: the source's own text where it kept one
/// ([`Value::Raw`]), else the value printed as Postgres prints it (arrays as
/// `{1,NULL,"a b"}`; element types without a short text form print as their debug form).
pub(crate) fn database_text(v: &Value, out: &mut String) {
    match v {
        Value::Raw(r) => out.push_str(&r.text),
        Value::Unchanged => out.push_str(UNAVAILABLE_TEXT),
        Value::Null => out.push_str("NULL"),
        Value::Decimal(d) => {
            let _ = write!(out, "{d}");
        }
        Value::UInt64(u) => {
            let _ = write!(out, "{u}");
        }
        Value::Int16(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Int32(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Int64(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Bool(b) => out.push(if *b { 't' } else { 'f' }),
        Value::Float32(f) => float_text(*f as f64, out),
        Value::Float64(f) => float_text(*f, out),
        Value::Text(s) | Value::Json(s) => out.push_str(s),
        Value::Array(items) => {
            out.push('{');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let mut s = String::new();
                database_text(item, &mut s);
                if matches!(item, Value::Array(_) | Value::Null) || !needs_quotes(&s) {
                    out.push_str(&s);
                } else {
                    out.push('"');
                    for c in s.chars() {
                        if c == '"' || c == '\\' {
                            out.push('\\');
                        }
                        out.push(c);
                    }
                    out.push('"');
                }
            }
            out.push('}');
        }
        other => {
            let _ = write!(out, "{other:?}");
        }
    }
}

fn float_text(f: f64, out: &mut String) {
    if f.is_nan() {
        out.push_str("NaN");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
    } else {
        let _ = write!(out, "{f}");
    }
}

/// Whether an array element's text must be quoted (Postgres' `array_out` rule).
fn needs_quotes(s: &str) -> bool {
    s.is_empty()
        || s.eq_ignore_ascii_case("NULL")
        || s.chars()
            .any(|c| matches!(c, '{' | '}' | ',' | '"' | '\\') || c.is_ascii_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(v: &Value) -> String {
        let mut s = String::new();
        database_text(v, &mut s);
        s
    }

    #[test]
    fn database_texts() {
        assert_eq!(text(&Value::Decimal(Decimal::NaN)), "NaN");
        assert_eq!(text(&Value::Decimal(Decimal::NegInfinity)), "-Infinity");
        assert_eq!(text(&Value::Unchanged), "unavailable");
        assert_eq!(
            text(&Value::raw("{{1,2},{3,4}}", Value::Null)),
            "{{1,2},{3,4}}"
        );
        let a = Value::Array(vec![
            Value::Array(vec![Value::Int32(1), Value::Null]),
            Value::Array(vec![Value::Text("a b".into()), Value::Text("".into())]),
        ]);
        assert_eq!(text(&a), r#"{{1,NULL},{"a b",""}}"#);
        assert_eq!(
            text(&Value::Array(vec![
                Value::Decimal(Decimal::NaN),
                Value::Float64(1.5)
            ])),
            "{NaN,1.5}"
        );
    }

    #[test]
    fn stand_ins_as_debezium() {
        let ints = Conv::Array(Box::new(Conv::Int32));
        assert_eq!(
            stand_in(&ints, &Value::Unchanged, true, "ab"),
            Some(Value::Array(vec![Value::Int32(97), Value::Int32(98)]))
        );
        let nested = Value::Array(vec![Value::Array(vec![]), Value::Array(vec![])]);
        assert_eq!(
            stand_in(&ints, &nested, true, "x"),
            Some(Value::Array(vec![Value::Null, Value::Null]))
        );
        let dec = Conv::DecimalVariable;
        assert_eq!(
            stand_in(&dec, &Value::Decimal(Decimal::NaN), true, "x"),
            None
        );
        assert_eq!(
            stand_in(&dec, &Value::Decimal(Decimal::NaN), false, "x"),
            Some(Value::Decimal(Decimal::new(0.into(), 0)))
        );
    }
}
