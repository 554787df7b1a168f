//! A delete record made from the last record of a key, for a row that was deleted while
//! the source could not see it (a re-snapshot after a lost replication slot or a purged
//! binlog finds the row gone, and nothing in the stream says so).
//!
//! The delete is Debezium's: `op = "d"`, `before` = the last known row (the `after` of the
//! key's last record), `after` = null, `ts_ms` (`ts_us`, `ts_ns`) = when it was made; `source` and
//! `transaction` are the last record's (they say where the row was last seen). For the
//! JSON formats the last record's envelope is rewritten in place, so the `schema` of
//! `json-schemas` stays the one the record was written with. An Avro datum is rewritten
//! with its writer schema ([`super::redelete_avro`]), which the caller looks up by the id in
//! the record's frame; without it the caller falls back to a tombstone alone (which is what
//! log compaction and every keyed view act on).

use crate::encode::redelete_avro::{AvroRedeleteError, WriterSchema};
use crate::encode::RecordFormat;

/// Why a delete could not be made from a record.
#[derive(Debug, thiserror::Error)]
pub enum RedeleteError {
    #[error("the record's value is not a JSON change envelope: {0}")]
    NotJson(#[from] serde_json::Error),
    #[error("the record's value is not a change envelope (no {0:?} field)")]
    NotEnvelope(&'static str),
    #[error("the record's Avro value: {0}")]
    Avro(#[from] AvroRedeleteError),
}

/// The schema id in a Confluent-framed Avro value.
pub fn avro_schema_id(value: &[u8]) -> Option<u32> {
    match value {
        [0, a, b, c, d, ..] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

/// Whether `value` (a non-null record value written in `format`) is a delete envelope.
/// `None`: it cannot be read (Avro without its writer schema, or not an envelope).
pub fn is_delete(
    format: &RecordFormat,
    value: &[u8],
    writer: Option<&WriterSchema>,
) -> Option<bool> {
    #[derive(serde::Deserialize)]
    struct Op<'a> {
        #[serde(borrow)]
        op: Option<std::borrow::Cow<'a, str>>,
    }
    #[derive(serde::Deserialize)]
    struct WithSchema<'a> {
        #[serde(borrow)]
        payload: Option<Op<'a>>,
    }
    match format {
        RecordFormat::Json {
            schemas_enable: false,
        } => serde_json::from_slice::<Op>(value)
            .ok()
            .map(|o| o.op.as_deref() == Some("d")),
        RecordFormat::Json {
            schemas_enable: true,
        } => serde_json::from_slice::<WithSchema>(value)
            .ok()
            .map(|o| o.payload.and_then(|p| p.op).as_deref() == Some("d")),
        RecordFormat::Avro => writer?.is_delete(value.get(5..)?).ok(),
    }
}

/// The delete envelope for the row whose last record's value is `last`, stamped `ts_ms`
/// (`writer`: an Avro value's writer schema). `Ok(None)`: no delete can be made — Avro
/// without its writer schema, or the last record holds no row (a delete, a truncate, a
/// message).
pub fn delete_from_last(
    format: &RecordFormat,
    last: &[u8],
    ts_ms: i64,
    writer: Option<&WriterSchema>,
) -> Result<Option<Vec<u8>>, RedeleteError> {
    let schemas = match format {
        RecordFormat::Json { schemas_enable } => *schemas_enable,
        RecordFormat::Avro => {
            return match writer {
                Some(w) => Ok(w.delete_from_last(last, ts_ms)?),
                None => Ok(None),
            }
        }
    };
    let mut doc: serde_json::Value = serde_json::from_slice(last)?;
    let env = if schemas {
        doc.get_mut("payload")
            .ok_or(RedeleteError::NotEnvelope("payload"))?
    } else {
        &mut doc
    };
    let env = env
        .as_object_mut()
        .ok_or(RedeleteError::NotEnvelope("op"))?;
    match env.get("op").and_then(|o| o.as_str()) {
        Some("c" | "r" | "u") => {}
        Some(_) => return Ok(None),
        None => return Err(RedeleteError::NotEnvelope("op")),
    }
    let after = env
        .get_mut("after")
        .map(serde_json::Value::take)
        .ok_or(RedeleteError::NotEnvelope("after"))?;
    if after.is_null() {
        return Ok(None);
    }
    // The map keeps its insertion order (serde_json's preserve_order): fields stay in
    // Debezium's order, only their values change.
    env.insert("before".into(), after);
    env.insert("op".into(), "d".into());
    env.insert("ts_ms".into(), ts_ms.into());
    // The finer processing-time fields say the same time, where the envelope has them.
    for (field, scale) in [("ts_us", 1_000i64), ("ts_ns", 1_000_000)] {
        if let Some(v) = env.get_mut(field).filter(|v| !v.is_null()) {
            *v = ts_ms.saturating_mul(scale).into();
        }
    }
    Ok(Some(serde_json::to_vec(&doc)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PLAIN: RecordFormat = RecordFormat::Json {
        schemas_enable: false,
    };
    const SCHEMAS: RecordFormat = RecordFormat::Json {
        schemas_enable: true,
    };

    fn envelope(op: &str, after: serde_json::Value) -> serde_json::Value {
        json!({"before": null, "after": after, "source": {"lsn": 7, "table": "t"}, "op": op, "ts_ms": 1, "transaction": null})
    }

    #[test]
    fn plain_json_delete_holds_the_last_row_and_keeps_source_and_field_order() {
        let last = envelope("u", json!({"id": 3, "v": "x"}));
        let d = delete_from_last(&PLAIN, &serde_json::to_vec(&last).unwrap(), 99, None)
            .unwrap()
            .unwrap();
        let text = String::from_utf8(d.clone()).unwrap();
        assert_eq!(
            text,
            r#"{"before":{"id":3,"v":"x"},"after":null,"source":{"lsn":7,"table":"t"},"op":"d","ts_ms":99,"transaction":null}"#
        );
        assert_eq!(is_delete(&PLAIN, &d, None), Some(true));
        assert_eq!(
            is_delete(&PLAIN, &serde_json::to_vec(&last).unwrap(), None),
            Some(false)
        );
    }

    #[test]
    fn json_with_schemas_rewrites_the_payload_only() {
        let last = json!({"schema": {"type": "struct", "name": "t.Envelope"}, "payload": envelope("r", json!({"id": 1}))});
        let d = delete_from_last(&SCHEMAS, &serde_json::to_vec(&last).unwrap(), 5, None)
            .unwrap()
            .unwrap();
        let got: serde_json::Value = serde_json::from_slice(&d).unwrap();
        assert_eq!(got["schema"], last["schema"]);
        assert_eq!(got["payload"]["before"], json!({"id": 1}));
        assert_eq!(got["payload"]["after"], serde_json::Value::Null);
        assert_eq!(got["payload"]["op"], "d");
        assert_eq!(got["payload"]["ts_ms"], 5);
        assert_eq!(is_delete(&SCHEMAS, &d, None), Some(true));
    }

    #[test]
    fn no_delete_from_a_delete_a_message_or_avro_without_its_schema() {
        let del = serde_json::to_vec(&envelope("d", serde_json::Value::Null)).unwrap();
        assert_eq!(delete_from_last(&PLAIN, &del, 1, None).unwrap(), None);
        let msg = serde_json::to_vec(&envelope("m", serde_json::Value::Null)).unwrap();
        assert_eq!(delete_from_last(&PLAIN, &msg, 1, None).unwrap(), None);
        assert_eq!(
            delete_from_last(&RecordFormat::Avro, b"\0\0\0\0\x01", 1, None).unwrap(),
            None
        );
        assert_eq!(is_delete(&RecordFormat::Avro, b"\0", None), None);
        assert!(delete_from_last(&PLAIN, b"not json", 1, None).is_err());
        assert_eq!(avro_schema_id(b"\0\0\0\x01\x02rest"), Some(258));
        assert_eq!(avro_schema_id(b"{}"), None);
        assert!(delete_from_last(&PLAIN, b"{\"after\":{}}", 1, None).is_err());
    }
}
