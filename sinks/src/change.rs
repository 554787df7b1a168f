//! A record of the log read back as a row change: the Debezium envelope (JSON with or
//! without schemas, or Avro in Confluent's wire format through the registry) decoded into
//! a [`Change`], the one shape every sink applies.
//!
//! Invariants: a record decodes to at most one change; a record that is not a row change
//! (a tombstone, a logical decoding message, a transaction BEGIN) is [`Decoded::Skip`]
//! and counts as delivered; a record that cannot be read as an envelope is a
//! [`DecodeError::Malformed`] (it goes to the dead-letter topic), and only a registry
//! that cannot be reached is transient. Avro values are turned into the JSON Kafka
//! Connect's `JsonConverter` writes for the same value (see [`crate::avro`]), so a view is
//! the same whatever `[format] value` the connector used.

use std::collections::HashMap;
use std::sync::Arc;

use cdc_schemas::registry::SchemaRegistry;
use serde_json::{Map, Value};

use crate::{SinkError, SinkRecord};

/// What happened to the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `c`: inserted.
    Create,
    /// `r`: read by a snapshot.
    Read,
    /// `u`: updated.
    Update,
    /// `d`: deleted.
    Delete,
    /// `t`: the table was truncated (no key; clears the table's part of a view).
    Truncate,
    /// A source transaction ended: Debezium's END record of `<name>.transaction`, with
    /// the count of its change records per table ([`Change::tx_end`]).
    TxEnd,
}

impl Op {
    /// Whether the row exists after this change (its after-image is the new value).
    pub fn upserts(self) -> bool {
        matches!(self, Op::Create | Op::Read | Op::Update)
    }
}

/// A source transaction's place in a change record (Debezium's `transaction` block).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxInfo {
    pub id: Arc<str>,
    /// 1-based position of the change among all changes of the transaction.
    pub total_order: u64,
    /// 1-based position among the transaction's changes of the same table.
    pub data_collection_order: u64,
}

/// The END record of a transaction: how many change records it wrote, per table
/// (`schema.table` / `db.table`, Debezium's `data_collection`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxEnd {
    pub id: Arc<str>,
    pub event_count: u64,
    pub data_collections: Vec<(String, u64)>,
}

/// One row change, ready to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// Where the record is in the log (its offset gives [`Change::version`]).
    pub topic: Arc<str>,
    pub partition: u32,
    pub offset: u64,
    /// The record's log timestamp (ms since the epoch).
    pub timestamp_ms: i64,
    pub op: Op,
    /// Postgres schema or MySQL database (`source.schema` / `source.db`).
    pub schema: Arc<str>,
    /// `source.table`.
    pub table: Arc<str>,
    /// The record key's fields (the row's primary key or configured key), in key order.
    /// Empty for truncates and transaction ends.
    pub key: Map<String, Value>,
    /// The row after the change, for creates, reads and updates (after the sink's column
    /// selection and renames); `None` otherwise.
    pub after: Option<Map<String, Value>>,
    /// The after-image as the record's JSON text, kept instead of `after` when the decoder
    /// was asked to ([`Decoder::keep_after_json`]) and the record is JSON: a sink that
    /// stores the row as JSON writes these bytes as they are, without building and
    /// re-serializing a map. [`Change::parse_after`] turns it into `after`.
    pub after_json: Option<Box<str>>,
    /// For a truncate of a topic of several partitions, which the connector writes to
    /// every partition: how many copies there are (its `cdc.truncate.partitions` header).
    /// 0 for anything else, and for a truncate written once (one partition, or a log of
    /// another writer).
    pub truncate_copies: u32,
    /// `source.ts_ms`: when the change was committed in the database, if known.
    pub source_ts_ms: Option<i64>,
    pub tx: Option<TxInfo>,
    /// Set for [`Op::TxEnd`].
    pub tx_end: Option<TxEnd>,
}

impl Change {
    /// The change's version for conditional writes: the record's offset + 1. All changes
    /// of one key are in one partition of one topic, in commit order, so a higher version
    /// is a later change of the key; a replay carries the same versions again. (Versions
    /// of different topics or partitions are not comparable, and need not be: a key
    /// never moves between them while the topic's partition count stays, which the log
    /// enforces.)
    pub fn version(&self) -> u64 {
        self.offset + 1
    }

    /// Moves a kept [`Change::after_json`] into `after` (parsed), for code that reads the
    /// columns. (The text was read as a JSON value of the record, so it parses; anything
    /// but an object would have been refused when the record was decoded.)
    pub fn parse_after(&mut self) {
        if let Some(text) = self.after_json.take() {
            if let Ok(Value::Object(m)) = serde_json::from_str::<Value>(&text) {
                self.after = Some(m);
            }
        }
    }

    /// Whether the change carries an after-image, parsed or as text.
    pub fn has_after(&self) -> bool {
        self.after.is_some() || self.after_json.is_some()
    }

    /// `schema.table` (Postgres) or `db.table` (MySQL), Debezium's `data_collection`.
    pub fn table_id(&self) -> String {
        format!("{}.{}", self.schema, self.table)
    }
}

/// A record read back.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    Change(Box<Change>),
    /// Not a row change: nothing to apply.
    Skip,
}

/// Why a record could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The record is not a Debezium envelope this sink can read: it goes to the
    /// dead-letter topic.
    #[error("{0}")]
    Malformed(String),
    /// The registry could not be asked for the record's schema (retried).
    #[error(transparent)]
    Registry(SinkError),
}

/// Decodes records; keeps the Avro schemas it fetched from the registry, by id.
pub struct Decoder {
    registry: Option<Arc<dyn SchemaRegistry>>,
    schemas: HashMap<u32, Arc<apache_avro::Schema>>,
    keep_after_json: bool,
}

impl Decoder {
    /// `registry` is needed for Avro records only; without one, an Avro record is
    /// malformed (its schema cannot be known).
    pub fn new(registry: Option<Arc<dyn SchemaRegistry>>) -> Self {
        Decoder {
            registry,
            schemas: HashMap::new(),
            keep_after_json: false,
        }
    }

    /// Keep the after-image of JSON records as text ([`Change::after_json`]) instead of
    /// parsing it: for a sink that stores it as JSON. (Avro records are parsed whatever
    /// this says.)
    pub fn keep_after_json(&mut self, on: bool) {
        self.keep_after_json = on;
    }

    /// Reads `r` back as a change.
    pub async fn decode(&mut self, r: &SinkRecord) -> Result<Decoded, DecodeError> {
        let Some(value) = r.value.as_deref() else {
            return Ok(Decoded::Skip);
        };
        let lean = if self.keep_after_json {
            lean_envelope::<&serde_json::value::RawValue>(value)
                .map(|(v, a)| (v, a.map(|a| After::Text(a.get().into()))))
        } else {
            lean_envelope::<Value>(value).map(|(v, a)| (v, a.map(After::Value)))
        };
        let (value, after) = match lean {
            Some((v, a)) => (v, a),
            None => {
                let mut v = self.json_of(value).await?;
                let a = v
                    .as_object_mut()
                    .and_then(|m| m.remove("after"))
                    .map(After::Value);
                (v, a)
            }
        };
        let key = match r.key.as_deref() {
            Some(k) if !k.is_empty() => Some(self.json_of(k).await?),
            _ => None,
        };
        from_envelope(r, key, value, after).map(|c| match c {
            Some(c) => Decoded::Change(Box::new(c)),
            None => Decoded::Skip,
        })
    }

    /// JSON (with or without a `schema`/`payload` wrapper) or Confluent-framed Avro, as
    /// a JSON value.
    async fn json_of(&mut self, bytes: &[u8]) -> Result<Value, DecodeError> {
        if bytes.len() >= 5 && bytes[0] == 0 {
            let id = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
            let schema = self.schema(id).await?;
            let mut rest = &bytes[5..];
            let v = apache_avro::from_avro_datum(&schema, &mut rest, None).map_err(|e| {
                DecodeError::Malformed(format!("Avro datum of schema id {id} unreadable: {e}"))
            })?;
            return Ok(crate::avro::to_json(v));
        }
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|e| DecodeError::Malformed(format!("not JSON and not Avro: {e}")))?;
        Ok(unwrap_payload(v))
    }

    async fn schema(&mut self, id: u32) -> Result<Arc<apache_avro::Schema>, DecodeError> {
        if let Some(s) = self.schemas.get(&id) {
            return Ok(s.clone());
        }
        let Some(registry) = &self.registry else {
            return Err(DecodeError::Malformed(format!(
                "an Avro record (schema id {id}) but no schema registry is configured"
            )));
        };
        let schema = registry.schema_by_id(id).await.map_err(|e| {
            if e.is_transient() {
                DecodeError::Registry(
                    SinkError::transient("reading a schema from the registry", e.to_string())
                        .caused_by(e),
                )
            } else {
                DecodeError::Malformed(format!("schema id {id}: {e}"))
            }
        })?;
        let parsed = apache_avro::Schema::parse_str(&schema.text).map_err(|e| {
            DecodeError::Malformed(format!("schema id {id} is not an Avro schema: {e}"))
        })?;
        let parsed = Arc::new(parsed);
        self.schemas.insert(id, parsed.clone());
        Ok(parsed)
    }
}

/// An envelope's `after`: parsed, or its JSON text.
enum After {
    Value(Value),
    Text(Box<str>),
}

/// The parts of a JSON envelope a sink uses; everything else (`before`, most of
/// `source`, a `schema` beside the `payload`) is skipped by the parser without building
/// values for it, which is most of the work of reading a change. `A`: how `after` is
/// read (a [`Value`], or its text as a borrowed `RawValue`).
#[derive(serde::Deserialize)]
#[serde(bound(deserialize = "A: serde::Deserialize<'de>"))]
struct Lean<'a, A> {
    #[serde(borrow, default)]
    op: Option<std::borrow::Cow<'a, str>>,
    #[serde(default = "Option::default")]
    after: Option<A>,
    #[serde(borrow, default)]
    source: Option<LeanSource<'a>>,
    #[serde(default)]
    transaction: Option<Value>,
    /// JsonConverter with schemas: the envelope is here.
    #[serde(borrow, default = "Option::default")]
    payload: Option<Box<Lean<'a, A>>>,
    // A transaction record.
    #[serde(default)]
    status: Option<Value>,
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    event_count: Option<Value>,
    #[serde(default)]
    data_collections: Option<Value>,
}

#[derive(serde::Deserialize)]
struct LeanSource<'a> {
    #[serde(borrow, default)]
    schema: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    db: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    table: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    ts_ms: Option<i64>,
}

/// A JSON envelope as the value [`from_envelope`] reads, holding only what it reads, and
/// its `after` apart; `None` for anything else (Avro, or not an object), which the general
/// path handles.
fn lean_envelope<'a, A: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Option<(Value, Option<A>)> {
    if bytes.first() != Some(&b'{') {
        return None;
    }
    let mut lean: Lean<'a, A> = serde_json::from_slice(bytes).ok()?;
    if let Some(p) = lean.payload.take() {
        lean = *p;
    }
    let mut m = Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            m.insert(k.to_string(), v);
        }
    };
    put("op", lean.op.map(|o| Value::String(o.into_owned())));
    put("transaction", lean.transaction);
    put("status", lean.status);
    put("id", lean.id);
    put("event_count", lean.event_count);
    put("data_collections", lean.data_collections);
    if let Some(src) = lean.source {
        let mut sm = Map::new();
        let text = |c: std::borrow::Cow<'_, str>| Value::String(c.into_owned());
        if let Some(x) = src.schema {
            sm.insert("schema".into(), text(x));
        }
        if let Some(x) = src.db {
            sm.insert("db".into(), text(x));
        }
        if let Some(x) = src.table {
            sm.insert("table".into(), text(x));
        }
        if let Some(x) = src.ts_ms {
            sm.insert("ts_ms".into(), x.into());
        }
        m.insert("source".into(), Value::Object(sm));
    }
    Some((Value::Object(m), lean.after))
}

/// `{"schema": …, "payload": p}` (JsonConverter with schemas) is `p`.
fn unwrap_payload(v: Value) -> Value {
    match v {
        Value::Object(mut m) if m.len() == 2 && m.contains_key("schema") => {
            match m.remove("payload") {
                Some(p) => p,
                None => Value::Object(m),
            }
        }
        v => v,
    }
}

fn malformed(r: &SinkRecord, what: &str) -> DecodeError {
    DecodeError::Malformed(format!(
        "record {}[{}]@{}: {what}",
        r.topic, r.partition, r.offset
    ))
}

/// The change an envelope describes, `None` when it describes none.
fn from_envelope(
    r: &SinkRecord,
    key: Option<Value>,
    value: Value,
    after: Option<After>,
) -> Result<Option<Change>, DecodeError> {
    let Value::Object(mut v) = value else {
        return Err(malformed(r, "the value is not an object"));
    };
    let base = |op: Op, schema: Arc<str>, table: Arc<str>| Change {
        topic: r.topic.clone(),
        partition: r.partition,
        offset: r.offset,
        timestamp_ms: r.timestamp_ms,
        op,
        schema,
        table,
        key: Map::new(),
        after: None,
        after_json: None,
        truncate_copies: 0,
        source_ts_ms: None,
        tx: None,
        tx_end: None,
    };
    // A record of the transaction topic: {status, id, event_count, data_collections}.
    if let Some(Value::String(status)) = v.get("status") {
        if status == "BEGIN" {
            return Ok(None);
        }
        if status != "END" {
            return Err(malformed(r, "transaction status is neither BEGIN nor END"));
        }
        let id: Arc<str> = match v.get("id") {
            Some(Value::String(s)) => s.as_str().into(),
            _ => return Err(malformed(r, "transaction END without an id")),
        };
        let event_count = v
            .get("event_count")
            .and_then(Value::as_u64)
            .ok_or_else(|| malformed(r, "transaction END without event_count"))?;
        let mut data_collections = Vec::new();
        if let Some(Value::Array(a)) = v.get("data_collections") {
            for dc in a {
                let name = dc.get("data_collection").and_then(Value::as_str);
                let n = dc.get("event_count").and_then(Value::as_u64);
                match (name, n) {
                    (Some(name), Some(n)) => data_collections.push((name.to_string(), n)),
                    _ => return Err(malformed(r, "transaction END data_collections entry")),
                }
            }
        }
        let mut c = base(Op::TxEnd, "".into(), "".into());
        c.tx_end = Some(TxEnd {
            id,
            event_count,
            data_collections,
        });
        return Ok(Some(c));
    }
    let op = match v.get("op").and_then(Value::as_str) {
        Some("c") => Op::Create,
        Some("r") => Op::Read,
        Some("u") => Op::Update,
        Some("d") => Op::Delete,
        Some("t") => Op::Truncate,
        // A logical decoding message, a heartbeat: not a row change.
        Some("m") => return Ok(None),
        Some(_) => return Err(malformed(r, "unknown op")),
        None => {
            // Schema-change and heartbeat records have no `op`.
            return Ok(None);
        }
    };
    let Some(Value::Object(source)) = v.remove("source") else {
        return Err(malformed(r, "no source block"));
    };
    let schema = source
        .get("schema")
        .or_else(|| source.get("db"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let Some(table) = source.get("table").and_then(Value::as_str) else {
        return Err(malformed(r, "the source block has no table"));
    };
    let mut c = base(op, schema.into(), table.into());
    c.source_ts_ms = source.get("ts_ms").and_then(Value::as_i64);
    if let Some(Value::Object(tx)) = v.get("transaction") {
        if let (Some(id), Some(t), Some(d)) = (
            tx.get("id").and_then(Value::as_str),
            tx.get("total_order").and_then(Value::as_u64),
            tx.get("data_collection_order").and_then(Value::as_u64),
        ) {
            c.tx = Some(TxInfo {
                id: id.into(),
                total_order: t,
                data_collection_order: d,
            });
        }
    }
    if op == Op::Truncate {
        c.truncate_copies = r
            .headers
            .iter()
            .find(|(k, _)| k == cdc_schemas::encode::HEADER_TRUNCATE_PARTITIONS)
            .and_then(|(_, v)| std::str::from_utf8(v.as_deref()?).ok()?.parse().ok())
            .unwrap_or(0);
        return Ok(Some(c));
    }
    c.key = match key {
        Some(Value::Object(k)) => k,
        Some(_) => return Err(malformed(r, "the key is not an object")),
        None => {
            return Err(malformed(
                r,
                "a row change without a key (a table without a primary key: give it one, or set source.message_key_columns)",
            ))
        }
    };
    if op.upserts() {
        match after {
            Some(After::Value(Value::Object(a))) => c.after = Some(a),
            // The text of a JSON object (a `RawValue` is valid JSON; its first byte says
            // which kind).
            Some(After::Text(t)) if t.starts_with('{') => c.after_json = Some(t),
            _ => return Err(malformed(r, "a create/read/update without an after-image")),
        }
    }
    Ok(Some(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn rec(key: Option<&str>, value: Option<&str>) -> SinkRecord {
        SinkRecord {
            topic: "app.public.t".into(),
            partition: 1,
            offset: 41,
            timestamp_ms: 7,
            key: key.map(|k| Bytes::from(k.to_string())),
            value: value.map(|v| Bytes::from(v.to_string())),
            headers: Vec::new(),
        }
    }

    fn decode(r: &SinkRecord) -> Result<Decoded, DecodeError> {
        futures_executor(Decoder::new(None).decode(r))
    }

    /// The decoder only awaits the registry, which these tests never need.
    fn futures_executor<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn an_update_with_schemas_decodes_to_its_key_and_after_image() {
        let r = rec(
            Some(r#"{"schema":{"type":"struct"},"payload":{"id":3}}"#),
            Some(
                r#"{"schema":{"type":"struct"},"payload":{"before":null,"after":{"id":3,"v":"x"},"source":{"schema":"public","table":"t","ts_ms":5},"op":"u","transaction":{"id":"9:10","total_order":2,"data_collection_order":1}}}"#,
            ),
        );
        let Decoded::Change(c) = decode(&r).unwrap() else {
            panic!("a change")
        };
        assert_eq!(c.op, Op::Update);
        assert_eq!(c.table_id(), "public.t");
        assert_eq!(Value::Object(c.key.clone()), serde_json::json!({"id": 3}));
        assert_eq!(
            c.after.clone().map(Value::Object),
            Some(serde_json::json!({"id": 3, "v": "x"}))
        );
        assert_eq!(c.version(), 42);
        assert_eq!(c.source_ts_ms, Some(5));
        assert_eq!(c.tx.as_ref().map(|t| t.total_order), Some(2));
    }

    #[test]
    fn deletes_truncates_tombstones_and_messages() {
        let d = rec(
            Some(r#"{"id":3}"#),
            Some(r#"{"before":{"id":3},"after":null,"source":{"db":"shop","table":"t"},"op":"d"}"#),
        );
        let Decoded::Change(c) = decode(&d).unwrap() else {
            panic!()
        };
        assert_eq!((c.op, c.after.is_none()), (Op::Delete, true));
        assert_eq!(c.table_id(), "shop.t");
        let t = rec(
            None,
            Some(
                r#"{"before":null,"after":null,"source":{"schema":"public","table":"t"},"op":"t"}"#,
            ),
        );
        let Decoded::Change(c) = decode(&t).unwrap() else {
            panic!()
        };
        assert_eq!((c.op, c.truncate_copies), (Op::Truncate, 0));
        let mut copy = t.clone();
        copy.headers.push((
            "cdc.truncate.partitions".into(),
            Some(Bytes::from_static(b"3")),
        ));
        let Decoded::Change(c) = decode(&copy).unwrap() else {
            panic!()
        };
        assert_eq!((c.op, c.truncate_copies), (Op::Truncate, 3));
        assert_eq!(
            decode(&rec(Some(r#"{"id":3}"#), None)).unwrap(),
            Decoded::Skip
        );
        let m = rec(None, Some(r#"{"op":"m","source":{},"message":{}}"#));
        assert_eq!(decode(&m).unwrap(), Decoded::Skip);
    }

    #[test]
    fn transaction_end_records_carry_their_counts() {
        let e = rec(
            Some(r#"{"id":"9:10"}"#),
            Some(
                r#"{"status":"END","id":"9:10","event_count":3,"data_collections":[{"data_collection":"public.a","event_count":2},{"data_collection":"public.b","event_count":1}],"ts_ms":1}"#,
            ),
        );
        let Decoded::Change(c) = decode(&e).unwrap() else {
            panic!()
        };
        let end = c.tx_end.unwrap();
        assert_eq!(end.event_count, 3);
        assert_eq!(end.data_collections[1], ("public.b".to_string(), 1));
        let b = rec(
            Some(r#"{"id":"9:10"}"#),
            Some(r#"{"status":"BEGIN","id":"9:10","event_count":null,"data_collections":null}"#),
        );
        assert_eq!(decode(&b).unwrap(), Decoded::Skip);
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        for v in [
            "",
            "{",
            "[1]",
            r#"{"op":"c"}"#,
            r#"{"op":"c","source":{"table":"t"}}"#,
        ] {
            let r = rec(Some(r#"{"id":1}"#), Some(v));
            assert!(
                matches!(decode(&r), Err(DecodeError::Malformed(_))),
                "{v:?}"
            );
        }
    }

    /// The lean reading of a JSON envelope gives the change the full one gives, with and
    /// without a schema wrapper, for row changes, truncates, END records and the rest.
    #[test]
    fn the_lean_envelope_reads_what_the_full_one_does() {
        let row = r#"{"before":{"id":3,"v":"old"},"after":{"id":3,"v":"x\"y","n":null},"source":{"version":"1","connector":"postgresql","name":"app","ts_ms":17,"snapshot":"false","db":"d","schema":"public","table":"t","lsn":5},"transaction":{"id":"9:5","total_order":2,"data_collection_order":1},"op":"u","ts_ms":18}"#;
        let my = r#"{"before":null,"after":{"id":1},"source":{"db":"shop","table":"orders","ts_ms":1},"op":"c"}"#;
        let del =
            r#"{"before":{"id":3},"after":null,"source":{"schema":"public","table":"t"},"op":"d"}"#;
        let trunc = r#"{"source":{"schema":"public","table":"t"},"op":"t"}"#;
        let end = r#"{"status":"END","id":"9:5","event_count":2,"data_collections":[{"data_collection":"public.t","event_count":2}]}"#;
        let other =
            r#"{"op":"m","source":{"schema":"public","table":""},"message":{"prefix":"p"}}"#;
        let wrapped = format!(r#"{{"schema":{{"type":"struct","fields":[]}},"payload":{row}}}"#);
        for v in [row, my, del, trunc, end, other, wrapped.as_str()] {
            let r = rec(Some(r#"{"id":3}"#), Some(v));
            let key = Some(serde_json::json!({"id": 3}));
            let mut full = unwrap_payload(serde_json::from_str(v).unwrap());
            let full_after = full
                .as_object_mut()
                .and_then(|m| m.remove("after"))
                .map(After::Value);
            let want = format!("{:?}", from_envelope(&r, key.clone(), full, full_after));
            let (lean, after) = lean_envelope::<Value>(v.as_bytes()).expect("read lean");
            let got = from_envelope(&r, key.clone(), lean, after.map(After::Value));
            assert_eq!(format!("{got:?}"), want, "{v}");
            // The after-image kept as text: the same change once parsed, and the text is
            // the record's own bytes.
            let (lean, after) =
                lean_envelope::<&serde_json::value::RawValue>(v.as_bytes()).expect("read raw");
            let after = after.map(|a| After::Text(a.get().into()));
            let mut got = from_envelope(&r, key, lean, after).unwrap();
            if let Some(c) = got.as_mut() {
                if let Some(t) = &c.after_json {
                    assert!(v.contains(&**t), "{t} is a slice of {v}");
                }
                c.parse_after();
            }
            assert_eq!(format!("{:?}", Ok::<_, DecodeError>(got)), want, "{v}");
        }
        assert!(lean_envelope::<Value>(b"\x00\x00\x00\x00\x01avro").is_none());
    }
}
