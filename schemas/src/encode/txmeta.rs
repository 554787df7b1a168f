//! Debezium's transaction metadata records (`provide.transaction.metadata=true`): the
//! BEGIN and END records of the `<prefix>.transaction` topic, in every record format.
//!
//! Key `io.debezium.connector.common.TransactionMetadataKey` v1 `{id}`; value
//! `io.debezium.connector.common.TransactionMetadataValue` v1, fields in this order:
//! `status` (`"BEGIN"` / `"END"`), `id`, `event_count` (optional int64: null in BEGIN),
//! `data_collections` (optional array of optional `event.collection` v1 `{data_collection,
//! event_count}`: null in BEGIN), `ts_ms` (int64). The schemas are in `record_schema.rs`.
//!
//! The encoder knows nothing of transactions: which id, which counts and when to write a
//! record is the caller's (the pipeline's `txmeta.rs`).
//!
//! Invariants: as for [`super::Encoder`], each call appends to its buffers and, on error,
//! truncates them back to their length on entry; in Avro the bytes are exactly described by
//! [`TransactionMetadataEncoder::avro_key_schema`] / `avro_value_schema`, framed with the
//! ids given to [`TransactionMetadataEncoder::set_schema_ids`].

use crate::encode::connect::ConnectSchema;
use crate::encode::writer::{field, with_writer, AnyWriter, FormatWriter, IdsMissing};
use crate::encode::{avro, avro_schema, json, record_schema, EncodeError, RecordFormat, SchemaIds};

/// The `data_collection` Debezium gives a table: `schema.table` (Postgres) or `db.table`
/// (MySQL / MariaDB), without the topic prefix.
pub fn data_collection(table: &crate::TableId) -> String {
    table.to_string()
}

/// The `data_collection` our END records give Postgres logical decoding messages (all
/// prefixes together, as the source counts their `data_collection_order`). Debezium
/// writes the `toString()` of a Java object there (`…LogicalDecodingMessageId@549623de`),
/// which changes from run to run; a name without a dot cannot be a table's.
pub const MESSAGE_DATA_COLLECTION: &str = "message";

/// Encodes BEGIN and END records of the transaction metadata topic. See the module docs.
pub struct TransactionMetadataEncoder {
    key_schema: ConnectSchema,
    value_schema: ConnectSchema,
    avro_key: String,
    avro_value: String,
    writer: AnyWriter,
    ids: Option<SchemaIds>,
}

impl TransactionMetadataEncoder {
    pub fn new(format: RecordFormat) -> Result<Self, EncodeError> {
        let key_schema = record_schema::transaction_metadata_key_schema();
        let value_schema = record_schema::transaction_metadata_value_schema();
        let avro_key = avro_schema::avro_schema_json(&key_schema)?;
        let avro_value = avro_schema::avro_schema_json(&value_schema)?;
        let writer = match format {
            RecordFormat::Json { schemas_enable } => AnyWriter::Json(json::JsonWriter::new(
                schemas_enable,
                Some(&key_schema),
                &value_schema,
            )),
            RecordFormat::Avro => AnyWriter::Avro(avro::AvroWriter),
        };
        Ok(TransactionMetadataEncoder {
            key_schema,
            value_schema,
            avro_key,
            avro_value,
            writer,
            ids: None,
        })
    }

    /// The Connect schema of the key.
    pub fn key_schema(&self) -> &ConnectSchema {
        &self.key_schema
    }

    /// The Connect schema of the value.
    pub fn value_schema(&self) -> &ConnectSchema {
        &self.value_schema
    }

    /// The Avro schema JSON of the key, to register under `<prefix>.transaction-key`.
    pub fn avro_key_schema(&self) -> &str {
        &self.avro_key
    }

    /// The Avro schema JSON of the value, to register under `<prefix>.transaction-value`.
    pub fn avro_value_schema(&self) -> &str {
        &self.avro_value
    }

    /// Sets the registry ids the Avro frames carry (both are required: the key always
    /// exists).
    pub fn set_schema_ids(&mut self, ids: SchemaIds) {
        self.ids = Some(ids);
    }

    /// Appends the key and value of transaction `id`'s BEGIN record (`ts_ms`: when the
    /// transaction committed, as the source block's `ts_ms` of its changes).
    pub fn encode_begin(
        &self,
        id: &str,
        ts_ms: i64,
        key: &mut Vec<u8>,
        value: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        self.encode::<&str>(id, None, ts_ms, key, value)
    }

    /// Appends the key and value of transaction `id`'s END record: `event_count` change
    /// events in all, `collections` their count per data collection (in the order given).
    pub fn encode_end<S: AsRef<str>>(
        &self,
        id: &str,
        event_count: u64,
        collections: &[(S, u64)],
        ts_ms: i64,
        key: &mut Vec<u8>,
        value: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        self.encode(id, Some((event_count, collections)), ts_ms, key, value)
    }

    fn encode<S: AsRef<str>>(
        &self,
        id: &str,
        end: Option<(u64, &[(S, u64)])>,
        ts_ms: i64,
        key: &mut Vec<u8>,
        value: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        let (k0, v0) = (key.len(), value.len());
        let r = with_writer!(self.writer, w => {
            self.write_key(w, id, key)
                .and_then(|()| self.write_value(w, id, end, ts_ms, value))
        });
        if r.is_err() {
            key.truncate(k0);
            value.truncate(v0);
        }
        r.map_err(|IdsMissing| EncodeError::SchemaIdsMissing {
            table: "<transaction metadata>".into(),
        })
    }

    fn write_key<W: FormatWriter>(
        &self,
        w: &W,
        id: &str,
        out: &mut Vec<u8>,
    ) -> Result<(), IdsMissing> {
        w.open_key(out, self.ids.and_then(|i| i.key))?;
        w.field(out, field!(first "id"));
        w.string(out, id);
        w.end_struct(out);
        w.close_key(out);
        Ok(())
    }

    fn write_value<W: FormatWriter, S: AsRef<str>>(
        &self,
        w: &W,
        id: &str,
        end: Option<(u64, &[(S, u64)])>,
        ts_ms: i64,
        out: &mut Vec<u8>,
    ) -> Result<(), IdsMissing> {
        w.open_value(out, self.ids.map(|i| i.value))?;
        w.field(out, field!(first "status"));
        w.symbol(out, if end.is_some() { "END" } else { "BEGIN" });
        w.field(out, field!("id"));
        w.string(out, id);
        w.field(out, field!("event_count"));
        w.opt_long(out, end.map(|(n, _)| clamp(n)));
        w.field(out, field!("data_collections"));
        match end {
            Some((_, collections)) => {
                w.branch(out, 1);
                w.open_array(out, collections.len());
                for (i, (name, n)) in collections.iter().enumerate() {
                    w.array_item(out, i);
                    // Optional items: `["null", item]` in Avro.
                    w.branch(out, 1);
                    w.field(out, field!(first "data_collection"));
                    w.string(out, name.as_ref());
                    w.field(out, field!("event_count"));
                    w.long(out, clamp(*n));
                    w.end_struct(out);
                }
                w.close_array(out);
            }
            None => w.null(out),
        }
        w.field(out, field!("ts_ms"));
        w.long(out, ts_ms);
        w.end_struct(out);
        w.close_value(out);
        Ok(())
    }
}

fn clamp(n: u64) -> i64 {
    n.min(i64::MAX as u64) as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value as J};

    fn j(b: &[u8]) -> J {
        serde_json::from_slice(b).unwrap()
    }

    #[test]
    fn json_records_have_debeziums_shape() {
        let e = TransactionMetadataEncoder::new(RecordFormat::Json {
            schemas_enable: false,
        })
        .unwrap();
        let (mut k, mut v) = (Vec::new(), Vec::new());
        e.encode_begin("7:42", 1000, &mut k, &mut v).unwrap();
        assert_eq!(j(&k), json!({"id": "7:42"}));
        assert_eq!(
            String::from_utf8(v.clone()).unwrap(),
            r#"{"status":"BEGIN","id":"7:42","event_count":null,"data_collections":null,"ts_ms":1000}"#
        );
        let (mut k, mut v) = (Vec::new(), Vec::new());
        e.encode_end(
            "7:42",
            3,
            &[("public.a", 2), ("public.\"b\"", 1)],
            1001,
            &mut k,
            &mut v,
        )
        .unwrap();
        assert_eq!(
            j(&v),
            json!({"status": "END", "id": "7:42", "event_count": 3,
                   "data_collections": [{"data_collection": "public.a", "event_count": 2},
                                        {"data_collection": "public.\"b\"", "event_count": 1}],
                   "ts_ms": 1001})
        );
    }

    #[test]
    fn json_schemas_are_debeziums() {
        let e = TransactionMetadataEncoder::new(RecordFormat::Json {
            schemas_enable: true,
        })
        .unwrap();
        let (mut k, mut v) = (Vec::new(), Vec::new());
        e.encode_end("x", 1, &[("d.t", 1)], 5, &mut k, &mut v)
            .unwrap();
        // Debezium 3.6.3's output (tests/golden/debezium_pg_default.jsonl).
        assert_eq!(
            j(&k)["schema"],
            json!({"type":"struct","fields":[{"type":"string","optional":false,"field":"id"}],
                   "optional":false,"name":"io.debezium.connector.common.TransactionMetadataKey",
                   "version":1})
        );
        let want = r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"status"},{"type":"string","optional":false,"field":"id"},{"type":"int64","optional":true,"field":"event_count"},{"type":"array","items":{"type":"struct","fields":[{"type":"string","optional":false,"field":"data_collection"},{"type":"int64","optional":false,"field":"event_count"}],"optional":true,"name":"event.collection","version":1},"optional":true,"field":"data_collections"},{"type":"int64","optional":false,"field":"ts_ms"}],"optional":false,"name":"io.debezium.connector.common.TransactionMetadataValue","version":1}"#;
        let text = String::from_utf8(v.clone()).unwrap();
        assert!(
            text.starts_with(&format!("{{\"schema\":{want},\"payload\":")),
            "{text}"
        );
        assert_eq!(j(&v)["payload"]["data_collections"][0]["event_count"], 1);
    }

    #[test]
    fn avro_needs_ids_and_restores_the_buffers() {
        let mut e = TransactionMetadataEncoder::new(RecordFormat::Avro).unwrap();
        let (mut k, mut v) = (b"k".to_vec(), b"v".to_vec());
        assert!(matches!(
            e.encode_begin("a", 1, &mut k, &mut v),
            Err(EncodeError::SchemaIdsMissing { .. })
        ));
        assert_eq!((k.as_slice(), v.as_slice()), (&b"k"[..], &b"v"[..]));
        e.set_schema_ids(SchemaIds {
            key: Some(3),
            value: 4,
        });
        let (mut k, mut v) = (Vec::new(), Vec::new());
        e.encode_end("ab", 2, &[("s.t", 2)], 1, &mut k, &mut v)
            .unwrap();
        assert_eq!(k, [0, 0, 0, 0, 3, 4, b'a', b'b']);
        let mut want = vec![0, 0, 0, 0, 4];
        want.extend_from_slice(&[6, b'E', b'N', b'D', 4, b'a', b'b']);
        // event_count: branch 1, 2; data_collections: branch 1, one block of 1 item (an
        // optional one: branch 1).
        want.extend_from_slice(&[2, 4, 2, 2, 2, 6, b's', b'.', b't', 4, 0]);
        // ts_ms
        want.push(2);
        assert_eq!(v, want);
        // What a reader with the registered schema decodes.
        let schema = apache_avro::Schema::parse_str(e.avro_value_schema()).unwrap();
        let got = apache_avro::from_avro_datum(&schema, &mut &v[5..], None).unwrap();
        let got: J = J::try_from(got).unwrap();
        assert_eq!(
            got,
            json!({"status": "END", "id": "ab", "event_count": 2,
                   "data_collections": [{"data_collection": "s.t", "event_count": 2}],
                   "ts_ms": 1})
        );
        let (mut k, mut v) = (Vec::new(), Vec::new());
        e.encode_begin("ab", 1, &mut k, &mut v).unwrap();
        let got = apache_avro::from_avro_datum(&schema, &mut &v[5..], None).unwrap();
        assert_eq!(
            J::try_from(got).unwrap(),
            json!({"status": "BEGIN", "id": "ab", "event_count": null,
                   "data_collections": null, "ts_ms": 1})
        );
        let ks = apache_avro::Schema::parse_str(e.avro_key_schema()).unwrap();
        assert_eq!(
            ks.canonical_form(),
            r#"{"name":"io.debezium.connector.common.TransactionMetadataKey","type":"record","fields":[{"name":"id","type":"string"}]}"#
        );
    }
}
