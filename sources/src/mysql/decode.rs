//! MySQL / MariaDB values into the core's model: a column's declared type into a
//! [`ColumnType`], a binlog row event's value ([`BinlogValue`], as `mysql_common` reads
//! it with the table map) and a snapshot's text-protocol value into a [`Value`].
//!
//! Invariants: valid data never fails here. A value the model cannot hold exactly (a
//! zero date, an unknown charset's bytes) becomes [`Value::raw`] with the server's text;
//! every decoder is total.

use cdc_schemas::{ColumnType, Value};
use mysql_async::binlog::value::BinlogValue;

use super::table::MyColumn;

/// How values are decoded (the `[source]` keys that shape them).
#[derive(Clone, Debug, Default)]
pub struct DecodeOptions {}

/// The core type of a column.
pub fn column_type(c: &MyColumn) -> ColumnType {
    match c.data_type.as_str() {
        "tinyint" | "smallint" => ColumnType::Int16,
        "mediumint" | "int" | "integer" => ColumnType::Int32,
        "bigint" if c.unsigned() => ColumnType::UInt64,
        "bigint" => ColumnType::Int64,
        "char" | "varchar" | "text" | "tinytext" | "mediumtext" | "longtext" => {
            ColumnType::Text { max_len: None }
        }
        _ => ColumnType::Unknown {
            name: c.data_type.clone(),
        },
    }
}

/// A value of a binlog row event.
pub fn binlog_value(c: &MyColumn, v: &BinlogValue<'_>, _opts: &DecodeOptions) -> Value {
    use mysql_async::Value as V;
    match v {
        BinlogValue::Value(V::NULL) => Value::Null,
        BinlogValue::Value(V::Int(i)) => int_value(c, *i),
        BinlogValue::Value(V::UInt(u)) => Value::UInt64(*u),
        BinlogValue::Value(V::Bytes(b)) => Value::Text(String::from_utf8_lossy(b).into_owned()),
        other => Value::Text(format!("{other:?}")),
    }
}

/// A value of a snapshot row (text protocol; the session's `time_zone` is `+00:00`).
pub fn text_value(c: &MyColumn, v: Option<&[u8]>, _opts: &DecodeOptions) -> Value {
    let Some(b) = v else {
        return Value::Null;
    };
    let s = String::from_utf8_lossy(b);
    match column_type(c) {
        ColumnType::Int16 => s.parse().map(Value::Int16).unwrap_or(Value::Null),
        ColumnType::Int32 => s.parse().map(Value::Int32).unwrap_or(Value::Null),
        ColumnType::Int64 => s.parse().map(Value::Int64).unwrap_or(Value::Null),
        ColumnType::UInt64 => s.parse().map(Value::UInt64).unwrap_or(Value::Null),
        _ => Value::Text(s.into_owned()),
    }
}

fn int_value(c: &MyColumn, i: i64) -> Value {
    match column_type(c) {
        ColumnType::Int16 => Value::Int16(i as i16),
        ColumnType::Int32 => Value::Int32(i as i32),
        ColumnType::UInt64 => Value::UInt64(i as u64),
        _ => Value::Int64(i),
    }
}
