//! Avro values as the JSON Kafka Connect's `JsonConverter` writes for the same Connect
//! value, so that a sink's view of a row does not depend on `[format] value`: bytes,
//! fixed and decimals are base64 (a decimal's unscaled two's-complement bytes, as
//! Connect's `Decimal` logical type in JSON), unions are their branch, enums their
//! symbol, records objects in field order, logical dates and times their integers.
//! Floats that JSON cannot carry (NaN, ±infinity) become the strings Jackson writes.

use apache_avro::types::Value as Avro;
use base64::Engine as _;
use serde_json::{Map, Number, Value};

/// The JSON form of `v`.
pub fn to_json(v: Avro) -> Value {
    match v {
        Avro::Null => Value::Null,
        Avro::Boolean(b) => Value::Bool(b),
        Avro::Int(i) | Avro::Date(i) | Avro::TimeMillis(i) => Value::from(i),
        Avro::Long(i)
        | Avro::TimeMicros(i)
        | Avro::TimestampMillis(i)
        | Avro::TimestampMicros(i)
        | Avro::TimestampNanos(i)
        | Avro::LocalTimestampMillis(i)
        | Avro::LocalTimestampMicros(i)
        | Avro::LocalTimestampNanos(i) => Value::from(i),
        Avro::Float(f) => float(f as f64),
        Avro::Double(f) => float(f),
        Avro::Bytes(b) | Avro::Fixed(_, b) => Value::String(b64(&b)),
        Avro::Decimal(d) => match Vec::<u8>::try_from(d) {
            Ok(b) => Value::String(b64(&b)),
            Err(_) => Value::Null,
        },
        Avro::BigDecimal(d) => Value::String(d.to_string()),
        Avro::String(s) | Avro::Enum(_, s) => Value::String(s),
        Avro::Uuid(u) => Value::String(u.to_string()),
        Avro::Union(_, inner) => to_json(*inner),
        Avro::Array(a) => Value::Array(a.into_iter().map(to_json).collect()),
        Avro::Map(m) => {
            let mut entries: Vec<_> = m.into_iter().collect();
            // HashMap order is random: sort, so equal maps render equal.
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, to_json(v))).collect())
        }
        Avro::Record(fields) => {
            let mut m = Map::with_capacity(fields.len());
            for (k, v) in fields {
                m.insert(k, to_json(v));
            }
            Value::Object(m)
        }
        Avro::Duration(d) => {
            let bytes: [u8; 12] = d.into();
            Value::String(b64(&bytes))
        }
    }
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn float(f: f64) -> Value {
    match Number::from_f64(f) {
        Some(n) => Value::Number(n),
        None if f.is_nan() => Value::String("NaN".into()),
        None if f > 0.0 => Value::String("Infinity".into()),
        None => Value::String("-Infinity".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn connect_json_forms() {
        let rec = Avro::Record(vec![
            ("id".into(), Avro::Int(3)),
            (
                "name".into(),
                Avro::Union(1, Box::new(Avro::String("x".into()))),
            ),
            ("gone".into(), Avro::Union(0, Box::new(Avro::Null))),
            ("raw".into(), Avro::Bytes(vec![1, 2, 3])),
            (
                "price".into(),
                Avro::Decimal(apache_avro::Decimal::from(vec![0x01, 0x18])),
            ),
            ("nan".into(), Avro::Double(f64::NAN)),
            ("day".into(), Avro::Date(19000)),
        ]);
        assert_eq!(
            to_json(rec),
            json!({"id": 3, "name": "x", "gone": null, "raw": "AQID", "price": "ARg=", "nan": "NaN", "day": 19000})
        );
    }
}
