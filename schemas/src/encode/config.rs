//! Encoder configuration: the Debezium options that change record shapes, and the
//! source-level metadata a [`crate::ChangeEvent`] does not carry.
//!
//! Every option keeps Debezium's name (in the doc comment) and default, so a Debezium
//! connector configuration translates one to one.

/// Which Debezium connector's record shapes to produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectorKind {
    /// `io.debezium.connector.postgresql`, `source.connector = "postgresql"`.
    Postgres,
    /// `io.debezium.connector.mysql`, `source.connector = "mysql"`.
    MySql,
    /// Debezium 3's separate MariaDB connector: `source.connector = "mariadb"`, source
    /// block `io.debezium.connector.mariadb.Source` (same fields as MySQL's).
    MariaDb,
}

impl ConnectorKind {
    /// `source.connector`.
    pub fn name(self) -> &'static str {
        match self {
            ConnectorKind::Postgres => "postgresql",
            ConnectorKind::MySql => "mysql",
            ConnectorKind::MariaDb => "mariadb",
        }
    }

    /// The Connect name of the `source` block.
    pub fn source_schema_name(self) -> &'static str {
        match self {
            ConnectorKind::Postgres => "io.debezium.connector.postgresql.Source",
            ConnectorKind::MySql => "io.debezium.connector.mysql.Source",
            ConnectorKind::MariaDb => "io.debezium.connector.mariadb.Source",
        }
    }
}

/// Source-level metadata: fixed for a connector instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceInfo {
    pub connector: ConnectorKind,
    /// Debezium's `topic.prefix` (formerly `database.server.name`): first part of topic
    /// and schema names, and `source.name`.
    pub topic_prefix: String,
    /// Postgres: the database name (`source.db`). MySQL/MariaDB: ignored, `source.db` is the
    /// table's database.
    pub database: String,
    /// `source.version`: the producing connector's version string.
    pub version: String,
}

impl SourceInfo {
    pub fn new(connector: ConnectorKind, topic_prefix: &str, database: &str) -> Self {
        SourceInfo {
            connector,
            topic_prefix: topic_prefix.to_string(),
            database: database.to_string(),
            version: concat!("cdc-", env!("CARGO_PKG_VERSION")).to_string(),
        }
    }
}

/// `decimal.handling.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DecimalHandlingMode {
    /// Connect `Decimal` (or `VariableScaleDecimal` for unconstrained numeric).
    #[default]
    Precise,
    Double,
    String,
}

/// `time.precision.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TimePrecisionMode {
    /// Postgres' default: millisecond types for precision ≤ 3, microsecond types above.
    #[default]
    Adaptive,
    /// MySQL's default: like adaptive, but `TIME` is always `MicroTime`.
    AdaptiveTimeMicroseconds,
    /// Kafka Connect's built-in `Date`, `Time`, `Timestamp` (millisecond precision).
    Connect,
}

impl TimePrecisionMode {
    /// Debezium's default for a connector.
    pub fn default_for(connector: ConnectorKind) -> Self {
        match connector {
            ConnectorKind::Postgres => TimePrecisionMode::Adaptive,
            ConnectorKind::MySql | ConnectorKind::MariaDb => {
                TimePrecisionMode::AdaptiveTimeMicroseconds
            }
        }
    }
}

/// `binary.handling.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BinaryHandlingMode {
    /// Connect `bytes` (base64 text in JSON, Avro `bytes`).
    #[default]
    Bytes,
    /// A string with the standard base64 alphabet.
    Base64,
    /// A string with the URL-safe base64 alphabet.
    Base64UrlSafe,
    /// A string of lowercase hex digits.
    Hex,
}

/// `interval.handling.mode` (Postgres).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IntervalHandlingMode {
    /// `io.debezium.time.MicroDuration`: int64 microseconds, a month counted as 30.4375 days.
    #[default]
    Numeric,
    /// `io.debezium.time.Interval`: ISO-8601 `PnYnMnDTnHnMnS`.
    String,
}

/// `bigint.unsigned.handling.mode` (MySQL).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BigIntUnsignedHandlingMode {
    /// int64; a value above `i64::MAX` is an encoding error (Debezium would wrap it).
    #[default]
    Long,
    /// Connect Decimal with scale 0.
    Precise,
}

/// The record encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordFormat {
    /// Kafka Connect JSON converter. `schemas_enable = false`: the payload alone;
    /// `true`: `{"schema": ..., "payload": ...}`.
    Json { schemas_enable: bool },
    /// Avro datum in the Confluent wire format (magic 0, 4-byte schema id, datum).
    Avro,
}

/// Everything that decides the bytes of a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncoderConfig {
    pub source: SourceInfo,
    pub format: RecordFormat,
    pub decimal_handling_mode: DecimalHandlingMode,
    pub time_precision_mode: TimePrecisionMode,
    pub binary_handling_mode: BinaryHandlingMode,
    pub interval_handling_mode: IntervalHandlingMode,
    pub bigint_unsigned_handling_mode: BigIntUnsignedHandlingMode,
    /// `unavailable.value.placeholder`: stands in for an unchanged TOASTed value.
    pub unavailable_value_placeholder: String,
    /// `tombstones.on.delete`: follow every delete with a null-valued record.
    pub tombstones_on_delete: bool,
    /// What to do with a value the format cannot carry (not a Debezium option: Debezium
    /// writes its stand-in and loses the value, or stops).
    pub unrepresentable_handling_mode: crate::encode::hidden::UnrepresentableMode,
}

impl EncoderConfig {
    /// Debezium's defaults for `source`, in `format`.
    pub fn new(source: SourceInfo, format: RecordFormat) -> Self {
        let time_precision_mode = TimePrecisionMode::default_for(source.connector);
        EncoderConfig {
            source,
            format,
            decimal_handling_mode: DecimalHandlingMode::default(),
            time_precision_mode,
            binary_handling_mode: BinaryHandlingMode::default(),
            interval_handling_mode: IntervalHandlingMode::default(),
            bigint_unsigned_handling_mode: BigIntUnsignedHandlingMode::default(),
            unavailable_value_placeholder: "__debezium_unavailable_value".to_string(),
            tombstones_on_delete: true,
            unrepresentable_handling_mode: Default::default(),
        }
    }
}
