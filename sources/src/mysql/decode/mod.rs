//! MySQL / MariaDB values into the core's model: a column's declared type into a
//! [`ColumnType`], a binlog row event's value ([`BinlogValue`], as `mysql_common` reads
//! it with the table map) and a snapshot's text-protocol value into a [`Value`].
//!
//! Each column is resolved once into a [`ColumnDecoder`] (its kind, signedness and width,
//! fractional digits, character set, ENUM/SET members); a [`TableDecoder`] holds one per
//! column of a [`MyTable`] and decodes whole rows. The free functions [`column_type`],
//! [`binlog_value`] and [`text_value`] resolve the column on every call (convenient,
//! slower).
//!
//! The mapping, as Debezium 3.6's MySQL connector maps the types:
//!
//! | MySQL | [`ColumnType`] | [`Value`] |
//! |---|---|---|
//! | TINYINT, SMALLINT, TINYINT UNSIGNED | `Int16` | `Int16` |
//! | SMALLINT UNSIGNED, MEDIUMINT (both), INT | `Int32` | `Int32` |
//! | INT UNSIGNED, BIGINT | `Int64` | `Int64` |
//! | BIGINT UNSIGNED | `UInt64` | `UInt64` |
//! | DECIMAL(p,s) | `Decimal{p,s}` | `Decimal` with scale s |
//! | FLOAT / FLOAT(M,D), DOUBLE | `Float32` / `Float64`, `Float64` | `Float32`, `Float64` |
//! | BIT(1), BIT(n) | `Bits{1}` (boolean), `Bits{n}` | `Bits` (left-aligned) |
//! | DATE | `Date` | `Date` (days) |
//! | DATETIME(fsp) | `Timestamp{fsp}` | `Timestamp` (µs, wall clock) |
//! | TIMESTAMP(fsp) | `TimestampTz{fsp}` | `TimestampTz` (µs since the epoch, UTC) |
//! | TIME(fsp) | `Time{fsp}` | `Time` (µs, may be negative or > 24 h) |
//! | YEAR | `Year` | `Int32` (0 for `0000`) |
//! | CHAR, VARCHAR, *TEXT | `Text` | `Text` (UTF-8) |
//! | BINARY, VARBINARY, *BLOB | `Bytes` | `Bytes` (BINARY(n) zero-padded to n) |
//! | ENUM, SET | `Enum`, `Set` | `Text` (member names, SET's joined by `,`) |
//! | JSON (MySQL) | `Json` | `Json` (MySQL's text of it) |
//! | JSON (MariaDB: LONGTEXT) | `Text` | `Text` |
//! | INET6, INET4, UUID (MariaDB) | `TextLike` | `Text`, as the server prints them |
//! | GEOMETRY, LINESTRING, …; POINT | `Geometry{point}` | `Bytes`: MySQL's internal form, a 4-byte little-endian SRID then WKB |
//!
//! Time zones: a binlog TIMESTAMP is seconds since the epoch (UTC); the snapshot session
//! runs with `time_zone = '+00:00'`, so its TIMESTAMP text is UTC too. DATETIME has no
//! zone: its wall-clock reading is counted as if it were UTC (as Debezium does).
//!
//! Text: row events carry a string in the column's character set ([`charset`]); the text
//! protocol converts it to the session's `character_set_results`, which the snapshot
//! leaves at `utf8mb4` (mysql_async's default), so [`text_value`] reads UTF-8 for every
//! non-binary string column.
//!
//! Zero dates (`0000-00-00`, `0000-00-00 00:00:00`), dates with a zero month or day and
//! other dates that do not exist (`ALLOW_INVALID_DATES`) follow [`ZeroDateMode`]: by
//! default as Debezium 3.6 (NULL in a nullable column, the epoch in a NOT NULL one), or
//! as [`Value::raw`] with the server's text.
//!
//! Generated columns: with `binlog_row_image = FULL` the table map and the row image
//! list every column, VIRTUAL and STORED alike, in ordinal order (checked on MariaDB
//! 10.11 by `tests/tests/my_decode.rs`; MySQL logs full images the same way); they
//! decode like any other column of their type.
//!
//! Timestamps with a fraction (TIMESTAMP(fsp)) keep `fsp` as the [`ColumnType`]
//! precision: the encoder pads the zoned text to it, as Debezium does since DBZ-5996.
//!
//! `mysql_common` 0.35.5's row-image parser mishandles a negative TIME(1) or TIME(2) with
//! a non-zero fraction (a panic in a debug build, a value 625 h too large in release) and
//! trusts DECIMAL digit groups and table-map metadata: [`crate::mysql::binlog::for_each_row`]
//! reads those values itself and checks the metadata first.
//!
//! Invariants: valid data never fails here. A value the model cannot hold exactly (a
//! zero date in `raw` mode, an unknown charset's bytes, a malformed value) becomes
//! [`Value::raw`] with the server's (or a lossy) text; every decoder is total.

pub mod charset;
pub mod jsonb;

use std::str::FromStr;
use std::sync::Arc;

use cdc_schemas::{ColumnType, Decimal, Value};
use mysql_async::binlog::value::BinlogValue;
use mysql_async::Value as MyValue;

pub use charset::Charset;

use super::table::{MyColumn, MyTable};

/// How zero and invalid dates are decoded (`0000-00-00`, `2024-00-10`, `2024-02-31`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ZeroDateMode {
    /// Debezium 3.6's behaviour: NULL when the column is nullable, else the epoch
    /// (`1970-01-01`, `1970-01-01T00:00:00Z`).
    #[default]
    Null,
    /// [`Value::raw`] with the server's text (`0000-00-00 00:00:00`) and no typed form:
    /// the record then holds Debezium's stand-in and the text travels in a
    /// `cdc.unrepresentable.*` header.
    Raw,
}

/// A `ZeroDateMode` name that is not one.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown zero-date mode {0:?}: use \"null\" (Debezium's) or \"raw\" (the server's text)")]
pub struct ParseModeError(pub String);

impl ZeroDateMode {
    /// `null` or `raw` (case-insensitive).
    pub fn parse(s: &str) -> Result<Self, ParseModeError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "null" => Ok(ZeroDateMode::Null),
            "raw" => Ok(ZeroDateMode::Raw),
            _ => Err(ParseModeError(s.to_string())),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ZeroDateMode::Null => "null",
            ZeroDateMode::Raw => "raw",
        }
    }
}

/// How values are decoded (the `[source]` keys that shape them).
#[derive(Clone, Debug, Default)]
pub struct DecodeOptions {
    pub zero_date: ZeroDateMode,
}

/// An integer column's storage: bits and signedness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct IntSpec {
    bits: u8,
    unsigned: bool,
}

/// What a column's values are, resolved once from its declaration.
#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Int(IntSpec),
    Float32,
    Float64,
    Decimal,
    Bit {
        len: u32,
    },
    Date,
    DateTime,
    Timestamp,
    Time,
    Year,
    Text(Charset),
    /// `pad`: BINARY(n) is stored with trailing zero bytes stripped in row events and
    /// read back padded to n.
    Bytes {
        pad: Option<usize>,
    },
    Enum(Arc<[String]>),
    Set(Arc<[String]>),
    Json,
    Geometry,
    /// MariaDB's INET6, INET4 and UUID: a row event holds the address / UUID bytes
    /// (network order, trailing zero bytes stripped); the text protocol the server's text.
    Inet6,
    Inet4,
    Uuid,
    /// A type this module does not know: its bytes as (lossy) text.
    Unknown,
}

/// One column, ready to decode values: built once per column (per table version).
#[derive(Clone, Debug)]
pub struct ColumnDecoder {
    kind: Kind,
    nullable: bool,
    ty: ColumnType,
}

impl ColumnDecoder {
    pub fn new(c: &MyColumn) -> Self {
        let (kind, ty) = resolve(c);
        ColumnDecoder {
            kind,
            nullable: c.nullable,
            ty,
        }
    }

    /// The core type of the column.
    pub fn column_type(&self) -> &ColumnType {
        &self.ty
    }

    /// A value of a binlog row event.
    pub fn binlog(&self, v: &BinlogValue<'_>, opts: &DecodeOptions) -> Value {
        match v {
            BinlogValue::Value(v) => self.binlog_plain(v, opts),
            BinlogValue::Jsonb(j) => match jsonb::to_text(j) {
                Ok(s) => match self.kind {
                    Kind::Json => Value::Json(s),
                    _ => Value::Text(s),
                },
                Err(e) => Value::raw(format!("invalid binary JSON: {e}"), Value::Null),
            },
            // A partial JSON update (`binlog_row_value_options = PARTIAL_JSON`) carries
            // a diff, not the value: nothing here can rebuild the document.
            BinlogValue::JsonDiff(_) => Value::raw(
                "partial JSON update (set binlog_row_value_options='' on the server)",
                Value::Null,
            ),
        }
    }

    /// A binlog value taken by value: text and bytes reuse their buffers.
    pub fn binlog_owned(&self, v: BinlogValue<'static>, opts: &DecodeOptions) -> Value {
        match v {
            BinlogValue::Value(MyValue::Bytes(b)) => match &self.kind {
                Kind::Text(cs) => charset::decode_owned(cs, b),
                Kind::Bytes { pad } => Value::Bytes(pad_binary(b, *pad)),
                Kind::Geometry => Value::Bytes(b),
                _ => self.binlog_plain(&MyValue::Bytes(b), opts),
            },
            other => self.binlog(&other, opts),
        }
    }

    fn binlog_plain(&self, v: &MyValue, opts: &DecodeOptions) -> Value {
        use MyValue as V;
        if let V::NULL = v {
            return Value::Null;
        }
        match (&self.kind, v) {
            (Kind::Int(spec), V::Int(i)) => int_value(*spec, *i as u64),
            (Kind::Int(spec), V::UInt(u)) => int_value(*spec, *u),
            (Kind::Float32, V::Float(f)) => Value::Float32(*f),
            (Kind::Float32, V::Double(f)) => Value::Float32(*f as f32),
            (Kind::Float64, V::Double(f)) => Value::Float64(*f),
            (Kind::Float64, V::Float(f)) => Value::Float64(*f as f64),
            (Kind::Decimal, V::Bytes(b)) => decimal_text(b),
            (Kind::Bit { len }, V::Bytes(b)) => bits_value(*len, b),
            (Kind::Date, V::Date(y, m, d, ..)) => self.date(*y as i64, *m as u32, *d as u32, opts),
            (Kind::DateTime, V::Date(y, mo, d, h, mi, s, us)) => self.datetime(
                [
                    *y as i64, *mo as i64, *d as i64, *h as i64, *mi as i64, *s as i64,
                ],
                *us as i64,
                false,
                opts,
            ),
            (Kind::Timestamp, V::Bytes(b)) => self.timestamp_epoch_text(b, opts),
            (Kind::Timestamp, V::Int(sec)) => self.timestamp_epoch(*sec, 0, opts),
            (Kind::Time, V::Time(neg, days, h, m, s, us)) => {
                let secs = *days as i64 * 86_400 + *h as i64 * 3600 + *m as i64 * 60 + *s as i64;
                let micros = secs * 1_000_000 + *us as i64;
                Value::Time(if *neg { -micros } else { micros })
            }
            (Kind::Year, V::Bytes(b)) => year_binlog(b),
            (Kind::Year, V::Int(y)) => Value::Int32(*y as i32),
            (Kind::Text(cs), V::Bytes(b)) => charset::decode(cs, b),
            (Kind::Bytes { pad }, V::Bytes(b)) => Value::Bytes(pad_binary(b.clone(), *pad)),
            (Kind::Geometry, V::Bytes(b)) => Value::Bytes(b.clone()),
            (Kind::Enum(members), V::Int(i)) => enum_value(members, *i),
            (Kind::Enum(members), V::UInt(i)) => enum_value(members, *i as i64),
            (Kind::Set(members), V::Bytes(b)) => set_value(members, b),
            (Kind::Set(members), V::Int(i)) => set_value(members, &i.to_le_bytes()),
            // MariaDB's JSON is LONGTEXT; a MySQL JSON column arrives as Jsonb (above).
            (Kind::Json, V::Bytes(b)) => match std::str::from_utf8(b) {
                Ok(s) => Value::Json(s.to_owned()),
                Err(_) => charset::lossy(b),
            },
            (Kind::Inet6, V::Bytes(b)) => Value::Text(inet6_text(b)),
            (Kind::Inet4, V::Bytes(b)) => Value::Text(inet4_text(b)),
            (Kind::Uuid, V::Bytes(b)) => Value::Text(uuid_text(b)),
            (Kind::Unknown, V::Bytes(b)) => charset::decode(&Charset::Utf8, b),
            (_, other) => mismatched(other),
        }
    }

    /// A value of a snapshot row (text protocol; the session's `time_zone` is `+00:00`
    /// and its `character_set_results` is `utf8mb4`).
    pub fn text(&self, v: Option<&[u8]>, opts: &DecodeOptions) -> Value {
        let Some(b) = v else {
            return Value::Null;
        };
        let parsed = match &self.kind {
            Kind::Int(spec) => parse_int(b).map(|(neg, mag)| {
                let u = if neg { mag.wrapping_neg() } else { mag };
                int_value(*spec, u)
            }),
            Kind::Float32 => std::str::from_utf8(b)
                .ok()
                .and_then(|s| s.parse().ok())
                .map(Value::Float32),
            Kind::Float64 => std::str::from_utf8(b)
                .ok()
                .and_then(|s| s.parse().ok())
                .map(Value::Float64),
            Kind::Decimal => return decimal_text(b),
            Kind::Bit { len } => return bits_value(*len, b),
            Kind::Date => parse_date(b).map(|(y, m, d)| self.date(y, m, d, opts)),
            Kind::DateTime | Kind::Timestamp => parse_datetime(b)
                .map(|(ymdhms, us)| self.datetime(ymdhms, us, self.kind == Kind::Timestamp, opts)),
            Kind::Time => parse_time(b).map(Value::Time),
            Kind::Year => parse_int(b)
                .filter(|(neg, y)| !neg && *y <= 9999)
                .map(|(_, y)| Value::Int32(y as i32)),
            Kind::Text(Charset::Binary) => return Value::Bytes(b.to_vec()),
            Kind::Text(_)
            | Kind::Enum(_)
            | Kind::Set(_)
            | Kind::Inet6
            | Kind::Inet4
            | Kind::Uuid
            | Kind::Unknown => return charset::decode(&Charset::Utf8, b),
            Kind::Json => std::str::from_utf8(b)
                .ok()
                .map(|s| Value::Json(s.to_owned())),
            Kind::Bytes { .. } | Kind::Geometry => return Value::Bytes(b.to_vec()),
        };
        parsed.unwrap_or_else(|| unparsed(b))
    }

    fn zero_date(&self, opts: &DecodeOptions, text: impl FnOnce() -> String) -> Value {
        match opts.zero_date {
            ZeroDateMode::Raw => Value::raw(text(), Value::Null),
            ZeroDateMode::Null if self.nullable => Value::Null,
            ZeroDateMode::Null => match self.kind {
                Kind::Date => Value::Date(0),
                Kind::Timestamp => Value::TimestampTz(0),
                _ => Value::Timestamp(0),
            },
        }
    }

    fn date(&self, y: i64, m: u32, d: u32, opts: &DecodeOptions) -> Value {
        if !valid_date(y, m, d) {
            return self.zero_date(opts, || format!("{y:04}-{m:02}-{d:02}"));
        }
        Value::Date(days_from_civil(y, m, d) as i32)
    }

    /// A DATETIME (wall clock) or a TIMESTAMP read as UTC text (`zoned`).
    fn datetime(&self, p: [i64; 6], us: i64, zoned: bool, opts: &DecodeOptions) -> Value {
        let [y, mo, d, h, mi, s] = p;
        if !valid_date(y, mo as u32, d as u32) || h > 23 || mi > 59 || s > 59 {
            return self.zero_date(opts, || datetime_text(p, us, self.fsp()));
        }
        let days = days_from_civil(y, mo as u32, d as u32);
        let micros = ((days * 24 + h) * 60 + mi) * 60_000_000 + s * 1_000_000 + us;
        if zoned {
            Value::TimestampTz(micros)
        } else {
            Value::Timestamp(micros)
        }
    }

    /// A binlog TIMESTAMP2 as `mysql_common` prints it: `<seconds>[.<µs, 6 digits>]`.
    fn timestamp_epoch_text(&self, b: &[u8], opts: &DecodeOptions) -> Value {
        let (sec, frac) = match b.iter().position(|&c| c == b'.') {
            Some(i) => (&b[..i], Some(&b[i + 1..])),
            None => (b, None),
        };
        let Some((neg, sec)) = parse_int(sec) else {
            return unparsed(b);
        };
        let us = match frac.map(parse_int) {
            None => 0,
            Some(Some((false, us))) if us < 1_000_000 => us as i64,
            Some(_) => return unparsed(b),
        };
        let sec = if neg { -(sec as i64) } else { sec as i64 };
        self.timestamp_epoch(sec, us, opts)
    }

    fn timestamp_epoch(&self, sec: i64, us: i64, opts: &DecodeOptions) -> Value {
        // The row event holds an unsigned 32-bit count that mysql_common reads as i32:
        // MariaDB 11.5+ stores TIMESTAMPs past 2038 there.
        let sec = if sec < 0 { sec + (1 << 32) } else { sec };
        if sec == 0 && us == 0 {
            return self.zero_date(opts, || datetime_text([0, 0, 0, 0, 0, 0], 0, self.fsp()));
        }
        Value::TimestampTz(sec * 1_000_000 + us)
    }

    fn fsp(&self) -> u8 {
        match self.ty {
            ColumnType::Timestamp { precision }
            | ColumnType::TimestampTz { precision }
            | ColumnType::Time { precision } => precision.unwrap_or(0),
            _ => 0,
        }
    }
}

/// Every column of a table, resolved once: decodes whole rows.
#[derive(Clone, Debug)]
pub struct TableDecoder {
    columns: Vec<ColumnDecoder>,
}

impl TableDecoder {
    pub fn new(t: &MyTable) -> Self {
        TableDecoder {
            columns: t.columns.iter().map(ColumnDecoder::new).collect(),
        }
    }

    pub fn columns(&self) -> &[ColumnDecoder] {
        &self.columns
    }

    /// One row of a row event, from `mysql_common`'s values (`BinlogRow::unwrap`): the
    /// values of the columns `present` says the image holds (`true` per column in ordinal
    /// order, as the event's column bitmap), in that order. A column the image does not
    /// hold (a `binlog_row_image = MINIMAL` or `NOBLOB` image) is [`Value::Unchanged`];
    /// values beyond the table's columns (a table map wider than this table) are dropped.
    pub fn row_from_binlog(
        &self,
        values: Vec<BinlogValue<'static>>,
        present: impl IntoIterator<Item = bool>,
        opts: &DecodeOptions,
    ) -> Vec<Value> {
        let mut out = Vec::with_capacity(self.columns.len());
        let mut values = values.into_iter();
        let mut present = present.into_iter();
        for c in &self.columns {
            if present.next().unwrap_or(false) {
                match values.next() {
                    Some(v) => out.push(c.binlog_owned(v, opts)),
                    None => out.push(Value::Unchanged),
                }
            } else {
                out.push(Value::Unchanged);
            }
        }
        out
    }

    /// One snapshot row in the text protocol: a value (`None`: NULL) per column.
    pub fn row_from_text<'a>(
        &self,
        values: impl IntoIterator<Item = Option<&'a [u8]>>,
        opts: &DecodeOptions,
    ) -> Vec<Value> {
        self.columns
            .iter()
            .zip(values)
            .map(|(c, v)| c.text(v, opts))
            .collect()
    }
}

/// The core type of a column.
pub fn column_type(c: &MyColumn) -> ColumnType {
    resolve(c).1
}

/// A value of a binlog row event.
pub fn binlog_value(c: &MyColumn, v: &BinlogValue<'_>, opts: &DecodeOptions) -> Value {
    ColumnDecoder::new(c).binlog(v, opts)
}

/// A value of a snapshot row (text protocol; the session's `time_zone` is `+00:00`).
pub fn text_value(c: &MyColumn, v: Option<&[u8]>, opts: &DecodeOptions) -> Value {
    ColumnDecoder::new(c).text(v, opts)
}

/// The expression a snapshot `SELECT` should read `c` with, given its quoted name
/// (`` `f` ``): the name itself, except for FLOAT, which the text protocol prints with
/// six significant digits (`3.14159` for the stored `3.1415927`): `` `f` + 0E0 `` widens
/// it to DOUBLE exactly, printed in full, and [`text_value`] reads the single-precision
/// number back unchanged. (MySQL 5.7 and MariaDB both accept `+ 0E0`; `CAST(… AS
/// DOUBLE)` needs MySQL 8.0.17.)
pub fn select_expr<'a>(c: &MyColumn, quoted_name: &'a str) -> std::borrow::Cow<'a, str> {
    if c.data_type.eq_ignore_ascii_case("float") {
        std::borrow::Cow::Owned(format!("{quoted_name} + 0E0"))
    } else {
        std::borrow::Cow::Borrowed(quoted_name)
    }
}

/// The column's kind and core type, from `information_schema`'s DATA_TYPE and
/// COLUMN_TYPE.
fn resolve(c: &MyColumn) -> (Kind, ColumnType) {
    let dt = c.data_type.to_ascii_lowercase();
    let ct = c.column_type.as_str();
    let unsigned = c.unsigned();
    let int = |bits: u8, ty: ColumnType| (Kind::Int(IntSpec { bits, unsigned }), ty);
    match dt.as_str() {
        "tinyint" => int(8, ColumnType::Int16),
        "smallint" if unsigned => int(16, ColumnType::Int32),
        "smallint" => int(16, ColumnType::Int16),
        "mediumint" => int(24, ColumnType::Int32),
        "int" | "integer" if unsigned => int(32, ColumnType::Int64),
        "int" | "integer" => int(32, ColumnType::Int32),
        "bigint" if unsigned => int(64, ColumnType::UInt64),
        "bigint" => int(64, ColumnType::Int64),
        "decimal" | "numeric" | "dec" | "fixed" => {
            let args = type_args(ct);
            let mut it = args.split(',').map(|a| a.trim().parse::<u32>().ok());
            let precision = it.next().flatten().unwrap_or(10);
            let scale = it.next().flatten().unwrap_or(0);
            (
                Kind::Decimal,
                ColumnType::Decimal {
                    precision: Some(precision),
                    scale: Some(scale),
                },
            )
        }
        // FLOAT(M,D) is a FLOAT64 field in Debezium; its values stay single precision.
        "float" if type_args(ct).contains(',') => (Kind::Float32, ColumnType::Float64),
        "float" => (Kind::Float32, ColumnType::Float32),
        "double" | "real" | "double precision" => (Kind::Float64, ColumnType::Float64),
        "bit" => {
            let len = type_args(ct).trim().parse().unwrap_or(1);
            (
                Kind::Bit { len },
                ColumnType::Bits {
                    len: Some(len),
                    varying: false,
                },
            )
        }
        "date" => (Kind::Date, ColumnType::Date),
        "datetime" => (
            Kind::DateTime,
            ColumnType::Timestamp {
                precision: Some(fsp(ct)),
            },
        ),
        "timestamp" => (
            Kind::Timestamp,
            ColumnType::TimestampTz {
                precision: Some(fsp(ct)),
            },
        ),
        "time" => (
            Kind::Time,
            ColumnType::Time {
                precision: Some(fsp(ct)),
            },
        ),
        "year" => (Kind::Year, ColumnType::Year),
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "long"
        | "long varchar" => {
            let cs = Charset::from_name(c.charset.as_deref());
            if cs == Charset::Binary {
                return (Kind::Bytes { pad: None }, ColumnType::Bytes);
            }
            let max_len = match dt.as_str() {
                "char" | "varchar" => type_args(ct).trim().parse().ok(),
                _ => None,
            };
            (Kind::Text(cs), ColumnType::Text { max_len })
        }
        "binary" => {
            let pad = type_args(ct).trim().parse().ok();
            (Kind::Bytes { pad }, ColumnType::Bytes)
        }
        "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" | "long varbinary" => {
            (Kind::Bytes { pad: None }, ColumnType::Bytes)
        }
        "enum" => {
            let symbols = members(ct, "enum");
            (
                Kind::Enum(symbols.clone().into()),
                ColumnType::Enum {
                    name: c.name.clone(),
                    symbols,
                },
            )
        }
        "set" => {
            let symbols = members(ct, "set");
            (
                Kind::Set(symbols.clone().into()),
                ColumnType::Set { symbols },
            )
        }
        "json" => (Kind::Json, ColumnType::Json),
        "geometry" | "point" | "linestring" | "polygon" | "multipoint" | "multilinestring"
        | "multipolygon" | "geometrycollection" | "geomcollection" => (
            Kind::Geometry,
            ColumnType::Geometry {
                point: dt == "point",
            },
        ),
        "inet6" | "inet4" | "uuid" => (
            match dt.as_str() {
                "inet6" => Kind::Inet6,
                "inet4" => Kind::Inet4,
                _ => Kind::Uuid,
            },
            ColumnType::TextLike { name: dt.clone() },
        ),
        other => (
            Kind::Unknown,
            ColumnType::Unknown {
                name: other.to_string(),
            },
        ),
    }
}

/// What is between the first `(` and its `)` of a column type (`""` when none).
fn type_args(ct: &str) -> &str {
    match (ct.find('('), ct.find(')')) {
        (Some(a), Some(b)) if b > a => &ct[a + 1..b],
        _ => "",
    }
}

/// Fractional-second digits of `datetime(3)`, `time`, `timestamp(6)`.
fn fsp(ct: &str) -> u8 {
    type_args(ct).trim().parse::<u8>().unwrap_or(0).min(6)
}

/// The members of `enum('a','b''c')` / `set(...)` as the server prints them in
/// COLUMN_TYPE: single-quoted, a quote inside doubled, and a backslash, NUL, newline,
/// carriage return and Ctrl-Z escaped with a backslash (`\\`, `\0`, `\n`, `\r`, `\Z`).
pub fn members(column_type: &str, keyword: &str) -> Vec<String> {
    let t = column_type.trim();
    let Some(body) = t
        .get(..keyword.len())
        .filter(|k| k.eq_ignore_ascii_case(keyword))
        .map(|_| t[keyword.len()..].trim_start())
        .and_then(|r| r.strip_prefix('('))
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut chars = body.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.next() {
            Some('\'') => {}
            _ => break,
        }
        let mut m = String::new();
        loop {
            match chars.next() {
                Some('\'') if chars.peek() == Some(&'\'') => {
                    chars.next();
                    m.push('\'');
                }
                Some('\'') | None => break,
                Some('\\') => match chars.next() {
                    Some('0') => m.push('\0'),
                    Some('n') => m.push('\n'),
                    Some('r') => m.push('\r'),
                    Some('t') => m.push('\t'),
                    Some('b') => m.push('\u{8}'),
                    Some('Z') => m.push('\u{1a}'),
                    Some(c) => m.push(c),
                    None => break,
                },
                Some(c) => m.push(c),
            }
        }
        out.push(m);
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.next() {
            Some(',') => continue,
            _ => break,
        }
    }
    out
}

/// An integer of `spec`'s storage, from its bits in the low end of `raw` (whatever the
/// sign `mysql_common` read it with), as the value type its [`ColumnType`] holds.
fn int_value(spec: IntSpec, raw: u64) -> Value {
    let shift = 64 - spec.bits as u32;
    if spec.unsigned {
        let u = (raw << shift) >> shift;
        match spec.bits {
            8 => Value::Int16(u as i16),
            16 | 24 => Value::Int32(u as i32),
            32 => Value::Int64(u as i64),
            _ => Value::UInt64(u),
        }
    } else {
        let i = ((raw << shift) as i64) >> shift;
        match spec.bits {
            8 | 16 => Value::Int16(i as i16),
            24 | 32 => Value::Int32(i as i32),
            _ => Value::Int64(i),
        }
    }
}

/// `[-+]digits` as sign and magnitude (`None`: not an integer, or beyond u64).
fn parse_int(b: &[u8]) -> Option<(bool, u64)> {
    let (neg, digits) = match b.first()? {
        b'-' => (true, &b[1..]),
        b'+' => (false, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    Some((neg, v))
}

/// `[-]digits[.digits]` (the server's and mysql_common's DECIMAL text) as a decimal with
/// exactly the printed scale; up to 38 digits without going through a string.
fn decimal_text(b: &[u8]) -> Value {
    if let Some(d) = small_decimal(b) {
        return Value::Decimal(d);
    }
    match std::str::from_utf8(b).ok().map(Decimal::from_str) {
        Some(Ok(d)) => Value::Decimal(d),
        _ => unparsed(b),
    }
}

fn small_decimal(b: &[u8]) -> Option<Decimal> {
    let (neg, digits) = match b.first()? {
        b'-' => (true, &b[1..]),
        _ => (false, b),
    };
    // 38 digits always fit an i128.
    if digits.is_empty() || digits.len() > 38 {
        return None;
    }
    let mut v: i128 = 0;
    let mut scale: Option<u32> = None;
    let mut any = false;
    for &c in digits {
        match c {
            b'0'..=b'9' => {
                any = true;
                v = v * 10 + (c - b'0') as i128;
                if let Some(s) = scale.as_mut() {
                    *s += 1;
                }
            }
            b'.' if scale.is_none() => scale = Some(0),
            _ => return None,
        }
    }
    if !any {
        return None;
    }
    let unscaled = if neg { -v } else { v };
    Some(Decimal::new(unscaled.into(), scale.unwrap_or(0)))
}

/// BIT(len) as stored (big-endian, right-aligned in `ceil(len / 8)` bytes) into
/// [`Value::Bits`] (left-aligned: the first bit is the top bit of the first byte).
fn bits_value(len: u32, b: &[u8]) -> Value {
    let n = (len as usize).div_ceil(8);
    let mut v: u64 = 0;
    for &byte in b.iter().rev().take(8).rev() {
        v = (v << 8) | byte as u64;
    }
    let len = len.clamp(1, 64);
    let aligned = if len == 64 { v } else { v << (64 - len) };
    let bytes = aligned.to_be_bytes()[..n.min(8)].to_vec();
    Value::Bits { len, bytes }
}

/// YEAR from a row event: `mysql_common` prints 1900 + the stored byte, and the byte 0
/// is the year `0000` (1900 itself is not a YEAR value).
fn year_binlog(b: &[u8]) -> Value {
    match parse_int(b) {
        Some((false, 1900)) => Value::Int32(0),
        Some((false, y)) if y <= 9999 => Value::Int32(y as i32),
        _ => unparsed(b),
    }
}

fn enum_value(members: &[String], index: i64) -> Value {
    match index {
        // Index 0 is the empty string MySQL stores for an invalid value (non-strict mode).
        0 => Value::Text(String::new()),
        i if i > 0 && (i as usize) <= members.len() => Value::Text(members[i as usize - 1].clone()),
        i => Value::raw(format!("enum index {i}"), Value::Null),
    }
}

/// SET from its little-endian member bitmap: the members in declaration order, joined
/// by `,` (as the server prints them).
fn set_value(members: &[String], bitmap: &[u8]) -> Value {
    let mut s = String::new();
    for (i, m) in members.iter().enumerate() {
        if bitmap.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0) {
            if !s.is_empty() {
                s.push(',');
            }
            s.push_str(m);
        }
    }
    Value::Text(s)
}

/// `n` bytes of `b`, the stripped trailing zeros restored.
fn fixed<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    let n = b.len().min(N);
    a[..n].copy_from_slice(&b[..n]);
    a
}

/// MariaDB's text of an INET6: lowercase hex groups without leading zeros, the longest
/// run of two or more zero groups (the first of equal runs) as `::`, and the embedded
/// IPv4 dotted for IPv4-mapped (`::ffff:1.2.3.4`) and IPv4-compatible (`::1.2.3.4`,
/// not `::` or `::1`) addresses.
fn inet6_text(b: &[u8]) -> String {
    use std::fmt::Write as _;
    let a: [u8; 16] = fixed(b);
    let g: [u16; 8] = std::array::from_fn(|i| u16::from_be_bytes([a[2 * i], a[2 * i + 1]]));
    let v4 = format!("{}.{}.{}.{}", a[12], a[13], a[14], a[15]);
    if g[..5].iter().all(|&x| x == 0) && g[5] == 0xffff {
        return format!("::ffff:{v4}");
    }
    if g[..6].iter().all(|&x| x == 0) && (g[6] != 0 || g[7] > 1) {
        return format!("::{v4}");
    }
    let (mut best, mut best_len, mut i) = (0usize, 0usize, 0usize);
    while i < 8 {
        if g[i] == 0 {
            let start = i;
            while i < 8 && g[i] == 0 {
                i += 1;
            }
            if i - start > best_len {
                best = start;
                best_len = i - start;
            }
        } else {
            i += 1;
        }
    }
    let mut s = String::with_capacity(39);
    let mut i = 0;
    while i < 8 {
        if best_len >= 2 && i == best {
            s.push_str("::");
            i += best_len;
            continue;
        }
        if !s.is_empty() && !s.ends_with(':') {
            s.push(':');
        }
        let _ = write!(s, "{:x}", g[i]);
        i += 1;
    }
    s
}

fn inet4_text(b: &[u8]) -> String {
    let a: [u8; 4] = fixed(b);
    format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, lowercase, from the 16 bytes in order.
fn uuid_text(b: &[u8]) -> String {
    use std::fmt::Write as _;
    let a: [u8; 16] = fixed(b);
    let mut s = String::with_capacity(36);
    for (i, x) in a.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// BINARY(n): zero bytes restored up to n (row events strip them).
fn pad_binary(mut b: Vec<u8>, pad: Option<usize>) -> Vec<u8> {
    if let Some(n) = pad {
        if b.len() < n {
            b.resize(n, 0);
        }
    }
    b
}

fn valid_date(y: i64, m: u32, d: u32) -> bool {
    if !(1..=12).contains(&m) || d == 0 || !(0..=9999).contains(&y) {
        return false;
    }
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let max = match m {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    d <= max
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub(crate) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The server's text of a DATETIME / TIMESTAMP: `YYYY-MM-DD HH:MM:SS[.f…]` with `fsp`
/// fractional digits.
fn datetime_text(p: [i64; 6], us: i64, fsp: u8) -> String {
    let [y, mo, d, h, mi, s] = p;
    let mut t = format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}");
    if fsp > 0 {
        let f = format!("{us:06}");
        t.push('.');
        t.push_str(&f[..fsp as usize]);
    }
    t
}

fn num(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 9 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0i64, |a, &c| a * 10 + (c - b'0') as i64))
}

/// `YYYY-MM-DD` (any field may be zero).
fn parse_date(b: &[u8]) -> Option<(i64, u32, u32)> {
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    Some((num(&b[..4])?, num(&b[5..7])? as u32, num(&b[8..10])? as u32))
}

/// Fraction digits after a `.` as microseconds.
fn parse_frac(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 6 {
        return None;
    }
    let v = num(b)?;
    Some(v * 10i64.pow(6 - b.len() as u32))
}

/// `YYYY-MM-DD HH:MM:SS[.ffffff]`.
fn parse_datetime(b: &[u8]) -> Option<([i64; 6], i64)> {
    if b.len() < 19 || b[10] != b' ' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = parse_date(&b[..10])?;
    let us = match &b[19..] {
        [] => 0,
        [b'.', f @ ..] => parse_frac(f)?,
        _ => return None,
    };
    Some((
        [
            y,
            mo as i64,
            d as i64,
            num(&b[11..13])?,
            num(&b[14..16])?,
            num(&b[17..19])?,
        ],
        us,
    ))
}

/// `[-]H…H:MM:SS[.ffffff]` as signed microseconds.
fn parse_time(b: &[u8]) -> Option<i64> {
    let (neg, rest) = match b.first()? {
        b'-' => (true, &b[1..]),
        _ => (false, b),
    };
    let (hms, frac) = match rest.iter().position(|&c| c == b'.') {
        Some(i) => (&rest[..i], parse_frac(&rest[i + 1..])?),
        None => (rest, 0),
    };
    let mut parts = hms.split(|&c| c == b':');
    let h = num(parts.next()?)?;
    let m = num(parts.next()?)?;
    let s = num(parts.next()?)?;
    if parts.next().is_some() || m > 59 || s > 59 {
        return None;
    }
    let micros = (h * 3600 + m * 60 + s) * 1_000_000 + frac;
    Some(if neg { -micros } else { micros })
}

/// Text the decoder could not parse as the column's type: kept as the server's text.
#[cold]
fn unparsed(b: &[u8]) -> Value {
    Value::raw(String::from_utf8_lossy(b).into_owned(), Value::Null)
}

/// A binlog value whose variant does not belong to the column's kind (the table map and
/// the column disagree): kept as its text, with the closest typed form.
#[cold]
fn mismatched(v: &MyValue) -> Value {
    let typed = match v {
        MyValue::Int(i) => Value::Int64(*i),
        MyValue::UInt(u) => Value::UInt64(*u),
        MyValue::Float(f) => Value::Float32(*f),
        MyValue::Double(f) => Value::Float64(*f),
        MyValue::Bytes(b) => match std::str::from_utf8(b) {
            Ok(s) => Value::Text(s.to_owned()),
            Err(_) => Value::Bytes(b.clone()),
        },
        _ => Value::Null,
    };
    let text = match v {
        MyValue::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        other => other.as_sql(true),
    };
    Value::raw(text, typed)
}

#[cfg(test)]
mod tests;
