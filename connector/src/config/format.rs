//! `[format]` (how records are encoded, what a schema change does) and `[[routing]]`
//! (topic routing rules). Values are checked by `Config::validate`; the encoder options
//! are built from them in `pipeline::run::encoder_config`.

use serde::Deserialize;

/// One `[[routing]]` rule: Kafka Connect's `RegexRouter` / Debezium's
/// `ByLogicalTableRouter` (`topic.regex`, `topic.replacement`). `regex` must match the
/// whole default topic name (`<name>.<schema>.<table>`, `<name>.message`); the first
/// rule that matches replaces the name with `replacement` (`$1`, `${name}`: groups).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    pub regex: String,
    pub replacement: String,
}

/// `[format]`: how records are encoded and what a schema change does.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FormatConfig {
    /// "json" (payload only), "json-schemas" (`{"schema":…,"payload":…}`) or "avro".
    #[serde(default = "default_format_value")]
    pub value: String,
    /// Debezium `decimal.handling.mode`: "precise" | "double" | "string".
    #[serde(default = "default_precise")]
    pub decimal_handling_mode: String,
    /// Debezium `time.precision.mode`: "adaptive" | "adaptive_time_microseconds" | "connect";
    /// unset: Debezium's default for the source (Postgres "adaptive", MySQL
    /// "adaptive_time_microseconds").
    #[serde(default)]
    pub time_precision_mode: Option<String>,
    /// Debezium `binary.handling.mode`: "bytes" | "base64" | "base64-url-safe" | "hex".
    #[serde(default = "default_bytes")]
    pub binary_handling_mode: String,
    /// Debezium `interval.handling.mode`: "numeric" | "string".
    #[serde(default = "default_numeric")]
    pub interval_handling_mode: String,
    /// Debezium `bigint.unsigned.handling.mode` (MySQL `BIGINT UNSIGNED`): "long" | "precise".
    #[serde(default = "default_long")]
    pub bigint_unsigned_handling_mode: String,
    /// Debezium `tombstones.on.delete`.
    #[serde(default = "default_true")]
    pub tombstones_on_delete: bool,
    /// A valid value the record format cannot carry (precise-mode numeric NaN, unchanged
    /// TOAST without a placeholder form, …): "header" (default; Debezium's stand-in in the
    /// record, the exact text in a `cdc.unrepresentable.<image>.<column>` header, counted
    /// and warned about) or "fail" (a definite error naming the table and column).
    #[serde(default = "default_header")]
    pub unrepresentable_handling_mode: String,
    /// Debezium `provide.transaction.metadata`: BEGIN and END records of every streamed
    /// transaction on `<name>.transaction` (see `pipeline::txmeta`).
    #[serde(default)]
    pub provide_transaction_metadata: bool,
    /// What an incompatible schema change does: "stop" (default; a definite error naming
    /// the table) or "force" (register under compatibility NONE for that subject, loudly).
    #[serde(default = "default_schema_change")]
    pub schema_change: String,
}

fn default_format_value() -> String {
    "json".into()
}
fn default_precise() -> String {
    "precise".into()
}
fn default_bytes() -> String {
    "bytes".into()
}
fn default_numeric() -> String {
    "numeric".into()
}
fn default_long() -> String {
    "long".into()
}
fn default_header() -> String {
    "header".into()
}
fn default_true() -> bool {
    true
}
fn default_schema_change() -> String {
    "stop".into()
}

impl Default for FormatConfig {
    fn default() -> Self {
        FormatConfig {
            value: default_format_value(),
            decimal_handling_mode: default_precise(),
            time_precision_mode: None,
            binary_handling_mode: default_bytes(),
            interval_handling_mode: default_numeric(),
            bigint_unsigned_handling_mode: default_long(),
            tombstones_on_delete: true,
            unrepresentable_handling_mode: default_header(),
            provide_transaction_metadata: false,
            schema_change: default_schema_change(),
        }
    }
}
