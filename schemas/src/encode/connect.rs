//! The Kafka Connect schema model the encoders derive from a [`crate::TableSchema`], and the
//! per-column conversion plans the hot path runs.
//!
//! This module owns the type mapping (which Connect type, semantic name, version and
//! parameters a [`ColumnType`] becomes under each Debezium option): it is the single
//! source the JSON-with-schema rendering and the Avro schema derivation both read, so the
//! three representations cannot drift apart. FORMATS.md documents the same table.
//!
//! Invariant: a [`ColumnPlan`]'s [`Conv`] always agrees with the [`ConnectSchema`] built
//! for the same column (the JSON and Avro writers rely on it to write values without
//! looking at the schema again).

use crate::encode::config::{
    BigIntUnsignedHandlingMode, BinaryHandlingMode, ConnectorKind, DecimalHandlingMode,
    EncoderConfig, IntervalHandlingMode, TimePrecisionMode,
};
use crate::encode::EncodeError;
use crate::table::{Column, ColumnType};

/// A Kafka Connect schema type.
#[derive(Clone, Debug, PartialEq)]
pub enum ConnectType {
    Boolean,
    Int8,
    Int16,
    Int32,
    Int64,
    Float32,
    Float64,
    String,
    Bytes,
    Array(Box<ConnectSchema>),
    Struct(Vec<ConnectField>),
}

impl ConnectType {
    /// The name the Connect JSON converter uses in `"type"`.
    pub fn json_name(&self) -> &'static str {
        match self {
            ConnectType::Boolean => "boolean",
            ConnectType::Int8 => "int8",
            ConnectType::Int16 => "int16",
            ConnectType::Int32 => "int32",
            ConnectType::Int64 => "int64",
            ConnectType::Float32 => "float",
            ConnectType::Float64 => "double",
            ConnectType::String => "string",
            ConnectType::Bytes => "bytes",
            ConnectType::Array(_) => "array",
            ConnectType::Struct(_) => "struct",
        }
    }
}

/// A Kafka Connect schema: a type plus the optional semantic name, version, parameters,
/// documentation and default that Debezium attaches.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectSchema {
    pub ty: ConnectType,
    pub optional: bool,
    pub name: Option<String>,
    pub version: Option<u32>,
    pub doc: Option<String>,
    /// In insertion order (the order Debezium adds them).
    pub parameters: Vec<(String, String)>,
    /// The default as the JSON converter writes it: `source.snapshot = "false"`, and MySQL
    /// column defaults (`7`, `"dflt"`; see [`mysql_default`]).
    pub default: Option<serde_json::Value>,
}

/// A field of a Connect struct.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectField {
    pub name: String,
    pub schema: ConnectSchema,
}

impl ConnectSchema {
    pub fn of(ty: ConnectType) -> Self {
        ConnectSchema {
            ty,
            optional: false,
            name: None,
            version: None,
            doc: None,
            parameters: Vec::new(),
            default: None,
        }
    }

    pub fn strukt(name: impl Into<String>, fields: Vec<ConnectField>) -> Self {
        let mut s = Self::of(ConnectType::Struct(fields));
        s.name = Some(name.into());
        s
    }

    pub fn named(mut self, name: &str, version: u32) -> Self {
        self.name = Some(name.to_string());
        self.version = Some(version);
        self
    }

    pub fn version(mut self, version: u32) -> Self {
        self.version = Some(version);
        self
    }

    pub fn param(mut self, key: &str, value: impl Into<String>) -> Self {
        self.parameters.push((key.to_string(), value.into()));
        self
    }

    pub fn optional_if(mut self, optional: bool) -> Self {
        self.optional = optional;
        self
    }

    pub fn optional(self) -> Self {
        self.optional_if(true)
    }

    pub fn fields(&self) -> &[ConnectField] {
        match &self.ty {
            ConnectType::Struct(f) => f,
            _ => &[],
        }
    }
}

impl ConnectField {
    pub fn new(name: impl Into<String>, schema: ConnectSchema) -> Self {
        ConnectField {
            name: name.into(),
            schema,
        }
    }
}

/// How one column value is written: decided once per column, executed per row.
#[derive(Clone, Debug, PartialEq)]
pub enum Conv {
    Bool,
    /// `bit(1)`: a one-bit string written as a boolean.
    BitBool,
    Int16,
    Int32,
    Int64,
    /// `BIGINT UNSIGNED` in `long` mode: values above `i64::MAX` are an error.
    UInt64Long,
    /// `BIGINT UNSIGNED` in `precise` mode: a Connect Decimal with scale 0.
    UInt64Precise,
    Float32,
    Float64,
    /// Connect Decimal with a fixed scale: unscaled two's-complement bytes.
    DecimalPrecise {
        scale: u32,
    },
    /// `io.debezium.data.VariableScaleDecimal` struct {scale, value}.
    DecimalVariable,
    DecimalDouble,
    DecimalString,
    /// Any value carried as text: text, json, enum, set, inet, xml, unknown types...
    Text,
    Bytes(BinaryHandlingMode),
    Uuid,
    /// Days since the epoch (`io.debezium.time.Date` and Connect `Date`).
    DateDays,
    /// Milliseconds since midnight in an int32.
    TimeMillis,
    TimeMicros,
    TimestampMillis,
    TimestampMicros,
    /// ISO-8601 string in UTC with exactly `frac` fractional digits (0: as few as needed).
    ZonedTimestamp {
        frac: u8,
    },
    ZonedTime,
    IntervalMicros,
    IntervalIso,
    Year,
    /// `io.debezium.data.Bits`: little-endian bytes of the bit string's numeric value;
    /// `minimal`: without high zero bytes (Debezium's Postgres connector, `BitSet.toByteArray`),
    /// otherwise `ceil(len / 8)` bytes (its MySQL connector pads).
    Bits {
        minimal: bool,
    },
    Array(Box<Conv>),
    /// MySQL spatial value ([`Value::Bytes`](crate::Value::Bytes): SRID then WKB) as
    /// Debezium's `io.debezium.data.geometry.Geometry` struct {wkb, srid}, or with `point`
    /// its `io.debezium.data.geometry.Point` {x, y, wkb, srid}. An SRID of 0 is null.
    Geometry {
        point: bool,
    },
}

impl Conv {
    /// True when the Connect schema of this conversion is a string, so the unavailable-value
    /// placeholder can stand in for an unchanged TOASTed value.
    pub fn is_stringy(&self) -> bool {
        matches!(
            self,
            Conv::Text
                | Conv::DecimalString
                | Conv::ZonedTimestamp { .. }
                | Conv::ZonedTime
                | Conv::IntervalIso
                | Conv::Uuid
                | Conv::Bytes(
                    BinaryHandlingMode::Base64
                        | BinaryHandlingMode::Base64UrlSafe
                        | BinaryHandlingMode::Hex
                )
        )
    }

    /// True when the Connect schema is `bytes` (placeholder stands in as its UTF-8 bytes).
    pub fn is_bytes(&self) -> bool {
        matches!(
            self,
            Conv::Bytes(BinaryHandlingMode::Bytes) | Conv::Bits { .. }
        )
    }
}

/// One column, ready for the hot path.
#[derive(Clone, Debug)]
pub struct ColumnPlan {
    pub name: String,
    /// The row index of this column.
    pub index: usize,
    pub optional: bool,
    pub conv: Conv,
    /// `"name":` with the name JSON-escaped, written before the value.
    pub json_key: Box<[u8]>,
}

const DBZ_DATE: &str = "io.debezium.time.Date";
const DBZ_TIME: &str = "io.debezium.time.Time";
const DBZ_MICRO_TIME: &str = "io.debezium.time.MicroTime";
const DBZ_TIMESTAMP: &str = "io.debezium.time.Timestamp";
const DBZ_MICRO_TIMESTAMP: &str = "io.debezium.time.MicroTimestamp";
const DBZ_ZONED_TIMESTAMP: &str = "io.debezium.time.ZonedTimestamp";
const DBZ_ZONED_TIME: &str = "io.debezium.time.ZonedTime";
const DBZ_MICRO_DURATION: &str = "io.debezium.time.MicroDuration";
const DBZ_INTERVAL: &str = "io.debezium.time.Interval";
const DBZ_YEAR: &str = "io.debezium.time.Year";
const DBZ_JSON: &str = "io.debezium.data.Json";
const DBZ_UUID: &str = "io.debezium.data.Uuid";
const DBZ_XML: &str = "io.debezium.data.Xml";
const DBZ_LTREE: &str = "io.debezium.data.Ltree";
const DBZ_ENUM: &str = "io.debezium.data.Enum";
const DBZ_ENUM_SET: &str = "io.debezium.data.EnumSet";
const DBZ_BITS: &str = "io.debezium.data.Bits";
const DBZ_VSD: &str = "io.debezium.data.VariableScaleDecimal";
const DBZ_GEOMETRY: &str = "io.debezium.data.geometry.Geometry";
const DBZ_POINT: &str = "io.debezium.data.geometry.Point";
pub(crate) const CONNECT_DECIMAL: &str = "org.apache.kafka.connect.data.Decimal";
pub(crate) const CONNECT_DATE: &str = "org.apache.kafka.connect.data.Date";
pub(crate) const CONNECT_TIME: &str = "org.apache.kafka.connect.data.Time";
pub(crate) const CONNECT_TIMESTAMP: &str = "org.apache.kafka.connect.data.Timestamp";

/// The Connect schema of a Connect Decimal with the given scale and (optional) precision,
/// as Debezium builds it (`connect.decimal.precision` becomes Avro's `precision`).
fn connect_decimal(scale: u32, precision: Option<u32>) -> ConnectSchema {
    let mut s = ConnectSchema::of(ConnectType::Bytes)
        .named(CONNECT_DECIMAL, 1)
        .param("scale", scale.to_string());
    if let Some(p) = precision {
        s = s.param("connect.decimal.precision", p.to_string());
    }
    s
}

fn variable_scale_decimal() -> ConnectSchema {
    let mut s = ConnectSchema::strukt(
        DBZ_VSD,
        vec![
            ConnectField::new("scale", ConnectSchema::of(ConnectType::Int32)),
            ConnectField::new("value", ConnectSchema::of(ConnectType::Bytes)),
        ],
    )
    .version(1);
    s.doc = Some("Variable scaled decimal".to_string());
    s
}

/// Debezium's `Geometry` struct {wkb, srid} or, for a POINT column, `Point`
/// {x, y, wkb, srid} (version 1, as its MySQL connector declares them).
fn geometry_schema(point: bool) -> ConnectSchema {
    let int32 = ConnectSchema::of(ConnectType::Int32).optional();
    let mut s = if point {
        ConnectSchema::strukt(
            DBZ_POINT,
            vec![
                ConnectField::new("x", ConnectSchema::of(ConnectType::Float64)),
                ConnectField::new("y", ConnectSchema::of(ConnectType::Float64)),
                ConnectField::new("wkb", ConnectSchema::of(ConnectType::Bytes).optional()),
                ConnectField::new("srid", int32),
            ],
        )
    } else {
        ConnectSchema::strukt(
            DBZ_GEOMETRY,
            vec![
                ConnectField::new("wkb", ConnectSchema::of(ConnectType::Bytes)),
                ConnectField::new("srid", int32),
            ],
        )
    }
    .version(1);
    s.doc = Some(
        if point {
            "Geometry (POINT)"
        } else {
            "Geometry"
        }
        .to_string(),
    );
    s
}

fn binary_schema(mode: BinaryHandlingMode) -> ConnectSchema {
    match mode {
        BinaryHandlingMode::Bytes => ConnectSchema::of(ConnectType::Bytes),
        _ => ConnectSchema::of(ConnectType::String),
    }
}

/// The default fractional width of a zoned timestamp whose column declared none:
/// Postgres' `timestamptz` is microsecond precision; MySQL's `TIMESTAMP` is whole seconds.
fn default_frac(connector: ConnectorKind) -> u8 {
    match connector {
        ConnectorKind::Postgres => 6,
        ConnectorKind::MySql | ConnectorKind::MariaDb => 0,
    }
}

/// The `allowed` parameter of an `Enum` / `EnumSet` schema: the members joined by `,`.
/// Debezium's MySQL connector escapes a comma inside a member as `\,` (so the list can be
/// split again: `ENUM('a,b')` → `a\,b`); its Postgres connector joins them as they are.
fn allowed_list(symbols: &[String], connector: ConnectorKind) -> String {
    match connector {
        ConnectorKind::Postgres => symbols.join(","),
        ConnectorKind::MySql | ConnectorKind::MariaDb => symbols
            .iter()
            .map(|s| s.replace(',', "\\,"))
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// Maps one column type to its Connect schema (not yet optional) and its conversion.
pub(crate) fn map_type(
    ty: &ColumnType,
    cfg: &EncoderConfig,
) -> Result<(ConnectSchema, Conv), EncodeError> {
    use ConnectType as T;
    let connector = cfg.source.connector;
    let tp = cfg.time_precision_mode;
    Ok(match ty {
        ColumnType::Bool => (ConnectSchema::of(T::Boolean), Conv::Bool),
        ColumnType::Int16 => (ConnectSchema::of(T::Int16), Conv::Int16),
        ColumnType::Int32 => (ConnectSchema::of(T::Int32), Conv::Int32),
        ColumnType::Int64 => (ConnectSchema::of(T::Int64), Conv::Int64),
        ColumnType::UInt64 => match cfg.bigint_unsigned_handling_mode {
            BigIntUnsignedHandlingMode::Long => (ConnectSchema::of(T::Int64), Conv::UInt64Long),
            BigIntUnsignedHandlingMode::Precise => {
                (connect_decimal(0, Some(20)), Conv::UInt64Precise)
            }
        },
        ColumnType::Float32 => (ConnectSchema::of(T::Float32), Conv::Float32),
        ColumnType::Float64 => (ConnectSchema::of(T::Float64), Conv::Float64),
        ColumnType::Decimal { precision, scale } => match cfg.decimal_handling_mode {
            DecimalHandlingMode::Precise => match precision {
                Some(p) => {
                    let s = scale.unwrap_or(0);
                    (
                        connect_decimal(s, Some(*p)),
                        Conv::DecimalPrecise { scale: s },
                    )
                }
                None => (variable_scale_decimal(), Conv::DecimalVariable),
            },
            DecimalHandlingMode::Double => (ConnectSchema::of(T::Float64), Conv::DecimalDouble),
            DecimalHandlingMode::String => (ConnectSchema::of(T::String), Conv::DecimalString),
        },
        ColumnType::Text { .. } => (ConnectSchema::of(T::String), Conv::Text),
        ColumnType::Bytes => (
            binary_schema(cfg.binary_handling_mode),
            Conv::Bytes(cfg.binary_handling_mode),
        ),
        ColumnType::Json => (ConnectSchema::of(T::String).named(DBZ_JSON, 1), Conv::Text),
        ColumnType::Uuid => (ConnectSchema::of(T::String).named(DBZ_UUID, 1), Conv::Uuid),
        ColumnType::Date => match tp {
            TimePrecisionMode::Connect => (
                ConnectSchema::of(T::Int32).named(CONNECT_DATE, 1),
                Conv::DateDays,
            ),
            _ => (
                ConnectSchema::of(T::Int32).named(DBZ_DATE, 1),
                Conv::DateDays,
            ),
        },
        ColumnType::Time { precision } => {
            let p = precision.unwrap_or(6);
            match tp {
                TimePrecisionMode::Connect => (
                    ConnectSchema::of(T::Int32).named(CONNECT_TIME, 1),
                    Conv::TimeMillis,
                ),
                TimePrecisionMode::Adaptive if p <= 3 => (
                    ConnectSchema::of(T::Int32).named(DBZ_TIME, 1),
                    Conv::TimeMillis,
                ),
                _ => (
                    ConnectSchema::of(T::Int64).named(DBZ_MICRO_TIME, 1),
                    Conv::TimeMicros,
                ),
            }
        }
        ColumnType::TimeTz { .. } => (
            ConnectSchema::of(T::String).named(DBZ_ZONED_TIME, 1),
            Conv::ZonedTime,
        ),
        ColumnType::Timestamp { precision } => {
            let p = precision.unwrap_or(6);
            match tp {
                TimePrecisionMode::Connect => (
                    ConnectSchema::of(T::Int64).named(CONNECT_TIMESTAMP, 1),
                    Conv::TimestampMillis,
                ),
                _ if p <= 3 => (
                    ConnectSchema::of(T::Int64).named(DBZ_TIMESTAMP, 1),
                    Conv::TimestampMillis,
                ),
                _ => (
                    ConnectSchema::of(T::Int64).named(DBZ_MICRO_TIMESTAMP, 1),
                    Conv::TimestampMicros,
                ),
            }
        }
        ColumnType::TimestampTz { precision } => {
            let frac = precision.unwrap_or_else(|| default_frac(connector)).min(9);
            (
                ConnectSchema::of(T::String).named(DBZ_ZONED_TIMESTAMP, 1),
                Conv::ZonedTimestamp { frac },
            )
        }
        ColumnType::Interval => match cfg.interval_handling_mode {
            IntervalHandlingMode::Numeric => (
                ConnectSchema::of(T::Int64).named(DBZ_MICRO_DURATION, 1),
                Conv::IntervalMicros,
            ),
            IntervalHandlingMode::String => (
                ConnectSchema::of(T::String).named(DBZ_INTERVAL, 1),
                Conv::IntervalIso,
            ),
        },
        ColumnType::Year => (ConnectSchema::of(T::Int32).named(DBZ_YEAR, 1), Conv::Year),
        ColumnType::Enum { symbols, .. } => (
            ConnectSchema::of(T::String)
                .named(DBZ_ENUM, 1)
                .param("allowed", allowed_list(symbols, connector)),
            Conv::Text,
        ),
        ColumnType::Set { symbols } => (
            ConnectSchema::of(T::String)
                .named(DBZ_ENUM_SET, 1)
                .param("allowed", allowed_list(symbols, connector)),
            Conv::Text,
        ),
        ColumnType::Bits { len, varying } => match (len, varying) {
            (Some(1), false) => (ConnectSchema::of(T::Boolean), Conv::BitBool),
            _ => {
                let n = len.unwrap_or(0);
                (
                    ConnectSchema::of(T::Bytes)
                        .named(DBZ_BITS, 1)
                        .param("length", n.to_string()),
                    Conv::Bits {
                        minimal: connector == ConnectorKind::Postgres,
                    },
                )
            }
        },
        ColumnType::Geometry { point } => {
            (geometry_schema(*point), Conv::Geometry { point: *point })
        }
        ColumnType::TextLike { name } => {
            let s = ConnectSchema::of(T::String);
            let s = match name.as_str() {
                "xml" => s.named(DBZ_XML, 1),
                "ltree" => s.named(DBZ_LTREE, 1),
                _ => s,
            };
            (s, Conv::Text)
        }
        ColumnType::Array(inner) => {
            let (elem, conv) = map_type(inner, cfg)?;
            (
                ConnectSchema::of(T::Array(Box::new(elem.optional()))),
                Conv::Array(Box::new(conv)),
            )
        }
        ColumnType::Composite { .. } => {
            (ConnectSchema::of(T::String).named(DBZ_JSON, 1), Conv::Text)
        }
        ColumnType::Unknown { .. } => (ConnectSchema::of(T::String), Conv::Text),
    })
}

/// A MySQL / MariaDB column default (`information_schema.COLUMNS.COLUMN_DEFAULT`'s text) as
/// the Connect default Debezium puts in the field schema, for the types where the text
/// says the value unambiguously: integers (`7`) and MariaDB's quoted string literals
/// (`'dflt'`, `'it''s'`) of text, ENUM and SET columns. None for anything else (`NULL`,
/// expressions such as `current_timestamp()`, MySQL's unquoted strings, which read like
/// expressions, and the other types: FORMATS.md, deviation 13). The text alone does not
/// say the server's flavour (a `mysql://` URL may name a MariaDB): a MySQL string default
/// whose value itself starts and ends with a quote reads as MariaDB's literal.
pub(crate) fn mysql_default(ty: &ColumnType, text: &str) -> Option<serde_json::Value> {
    match ty {
        ColumnType::Int16 | ColumnType::Int32 | ColumnType::Int64 => {
            let n: i64 = text.parse().ok()?;
            let fits = match ty {
                ColumnType::Int16 => i16::try_from(n).is_ok(),
                ColumnType::Int32 => i32::try_from(n).is_ok(),
                _ => true,
            };
            fits.then(|| n.into())
        }
        ColumnType::Text { .. } | ColumnType::Enum { .. } | ColumnType::Set { .. } => {
            let inner = text.strip_prefix('\'')?.strip_suffix('\'')?;
            let mut out = String::with_capacity(inner.len());
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\'' => {
                        // A quote inside is doubled; a lone one means this is no literal.
                        if chars.next() != Some('\'') {
                            return None;
                        }
                        out.push('\'');
                    }
                    '\\' => out.push(match chars.next()? {
                        '0' => '\0',
                        'n' => '\n',
                        'r' => '\r',
                        't' => '\t',
                        'Z' => '\u{1a}',
                        c => c,
                    }),
                    c => out.push(c),
                }
            }
            Some(out.into())
        }
        _ => None,
    }
}

/// Plans one column: its Connect schema (optional when nullable) and conversion.
pub(crate) fn plan_column(
    index: usize,
    column: &Column,
    cfg: &EncoderConfig,
) -> Result<(ConnectField, ColumnPlan), EncodeError> {
    let (schema, conv) = map_type(&column.ty, cfg)?;
    let mut schema = schema.optional_if(column.nullable);
    if matches!(
        cfg.source.connector,
        ConnectorKind::MySql | ConnectorKind::MariaDb
    ) {
        schema.default = column
            .default
            .as_deref()
            .and_then(|d| mysql_default(&column.ty, d));
    }
    let mut key = Vec::with_capacity(column.name.len() + 3);
    crate::encode::json::write_str(&mut key, &column.name);
    key.push(b':');
    Ok((
        ConnectField::new(column.name.clone(), schema),
        ColumnPlan {
            name: column.name.clone(),
            index,
            optional: column.nullable,
            conv,
            json_key: key.into_boxed_slice(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mysql_defaults_debezium_would_write() {
        let text = ColumnType::Text { max_len: None };
        assert_eq!(mysql_default(&ColumnType::Int32, "7"), Some(7.into()));
        assert_eq!(mysql_default(&ColumnType::Int16, "-3"), Some((-3).into()));
        assert_eq!(mysql_default(&ColumnType::Int16, "70000"), None);
        assert_eq!(mysql_default(&ColumnType::Int32, "NULL"), None);
        assert_eq!(mysql_default(&text, "'dflt'"), Some("dflt".into()));
        assert_eq!(mysql_default(&text, "'it''s'"), Some("it's".into()));
        assert_eq!(mysql_default(&text, "'a\\\\b\\n'"), Some("a\\b\n".into()));
        assert_eq!(mysql_default(&text, "''"), Some("".into()));
        // Not literals: SQL NULL's text, expressions, MySQL's unquoted text.
        assert_eq!(mysql_default(&text, "NULL"), None);
        assert_eq!(mysql_default(&text, "uuid()"), None);
        assert_eq!(mysql_default(&text, "'a'||'b'"), None);
        assert_eq!(mysql_default(&ColumnType::Date, "'2024-01-01'"), None);
    }

    #[test]
    fn mysql_enum_allowed_escapes_commas() {
        let s = vec!["small".to_string(), "a,b".to_string()];
        assert_eq!(allowed_list(&s, ConnectorKind::MySql), "small,a\\,b");
        assert_eq!(allowed_list(&s, ConnectorKind::Postgres), "small,a,b");
    }
}
