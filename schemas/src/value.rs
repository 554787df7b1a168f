//! Column values: typed, lossless.
//!
//! Temporal values use the sources' own integer encodings, so nothing is lost in between:
//! dates are days since 1970-01-01, times and timestamps are microseconds. Postgres'
//! `infinity` / `-infinity` for dates and timestamps are the extreme integers, exactly as
//! Postgres stores them ([`Value::TIMESTAMP_POS_INFINITY`] and friends).
//!
//! [`Value::Null`] is SQL NULL. [`Value::Unchanged`] is different: the source did not
//! send the value (a Postgres TOASTed column that an UPDATE did not touch). It must never
//! be passed off as NULL or as a real value downstream.
//!
//! [`Value::Raw`] is a valid database value that the model, or some record formats, cannot
//! hold exactly (a Postgres timestamp after 294247 AD, a multi-dimensional array in an
//! array column): it keeps the database's own text beside the closest typed form, so the
//! encoder can carry the text in a record header where the record itself cannot.

use crate::decimal::Decimal;

/// One column value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// The source did not send this value (unchanged TOASTed column).
    Unchanged,
    Bool(bool),
    Int16(i16),
    Int32(i32),
    Int64(i64),
    /// MySQL `BIGINT UNSIGNED` (the only integer type that does not fit `i64`).
    UInt64(u64),
    /// NaN and ±infinity are values, kept as they are.
    Float32(f32),
    Float64(f64),
    Decimal(Decimal),
    Text(String),
    Bytes(Vec<u8>),
    /// JSON text as the server rendered it (Postgres `json` keeps the input text,
    /// `jsonb` the server's normalised text, MySQL `JSON` its canonical text).
    Json(String),
    Uuid([u8; 16]),
    /// Days since 1970-01-01; `i32::MAX` / `i32::MIN` are Postgres' `infinity` / `-infinity`.
    Date(i32),
    /// Microseconds since midnight. MySQL `TIME` may be negative or exceed 24 h
    /// (-838:59:59 to 838:59:59); Postgres `time` is 00:00:00 to 24:00:00.
    Time(i64),
    /// Postgres `timetz`: microseconds since midnight, local to a zone that is
    /// `offset_seconds` east of UTC.
    TimeTz {
        micros: i64,
        offset_seconds: i32,
    },
    /// Microseconds since 1970-01-01 00:00:00, no zone (wall-clock time).
    Timestamp(i64),
    /// Microseconds since 1970-01-01 00:00:00 UTC (an instant).
    TimestampTz(i64),
    /// Postgres `interval`: months, days and microseconds are independent fields.
    Interval {
        months: i32,
        days: i32,
        micros: i64,
    },
    /// Bit strings (Postgres `bit`/`varbit`, MySQL `BIT(n)`): `len` bits, most
    /// significant first, packed into `bytes`.
    Bits {
        len: u32,
        bytes: Vec<u8>,
    },
    /// Elements of an array. A multi-dimensional array nests arrays; NULL elements are
    /// [`Value::Null`].
    Array(Vec<Value>),
    /// A value only partly representable: see [`RawValue`]. Boxed: rare, and it keeps
    /// `Value` small.
    Raw(Box<RawValue>),
}

/// The database's own text of a value, with the closest typed form the model has.
#[derive(Clone, Debug, PartialEq)]
pub struct RawValue {
    /// The value as the database printed it (`294276-12-31 23:59:59`, `{{1,2},{3,4}}`).
    pub text: String,
    /// The typed form where the model has one (a multi-dimensional array as nested
    /// [`Value::Array`]s), else [`Value::Null`] (the value does not fit the model).
    pub typed: Value,
}

impl Value {
    /// A value the model cannot hold, kept as the database's text.
    pub fn raw(text: impl Into<String>, typed: Value) -> Value {
        Value::Raw(Box::new(RawValue {
            text: text.into(),
            typed,
        }))
    }
}

impl Value {
    pub const DATE_POS_INFINITY: i32 = i32::MAX;
    pub const DATE_NEG_INFINITY: i32 = i32::MIN;
    pub const TIMESTAMP_POS_INFINITY: i64 = i64::MAX;
    pub const TIMESTAMP_NEG_INFINITY: i64 = i64::MIN;

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn is_unchanged(&self) -> bool {
        matches!(self, Value::Unchanged)
    }
}

/// The values of one row, one per column of its [`crate::TableSchema`], in column order.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Row(pub Vec<Value>);

impl Row {
    pub fn new(values: Vec<Value>) -> Self {
        Row(values)
    }

    pub fn values(&self) -> &[Value] {
        &self.0
    }

    pub fn get(&self, index: usize) -> Option<&Value> {
        self.0.get(index)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when any value is [`Value::Unchanged`].
    pub fn has_unchanged(&self) -> bool {
        self.0.iter().any(Value::is_unchanged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_and_unchanged_are_distinct() {
        assert_ne!(Value::Null, Value::Unchanged);
        assert!(Value::Null.is_null() && !Value::Null.is_unchanged());
        assert!(Row::new(vec![Value::Int32(1), Value::Unchanged]).has_unchanged());
    }

    #[test]
    fn nan_is_a_value_not_equal_to_itself() {
        // PartialEq follows IEEE: callers comparing rows must compare bits for floats.
        assert_ne!(Value::Float64(f64::NAN), Value::Float64(f64::NAN));
        assert_eq!(Value::Float64(f64::INFINITY), Value::Float64(f64::INFINITY));
    }
}
