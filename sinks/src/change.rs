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

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use cdc_schemas::registry::SchemaRegistry;
use serde::Deserialize;
use serde_json::value::RawValue;
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
    pub after_json: Option<Bytes>,
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
            if let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(&text) {
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

/// Decodes records; keeps the Avro schemas it fetched from the registry, by id, and one
/// shared copy of each schema and table name it met (so changes share their names instead
/// of allocating them each).
pub struct Decoder {
    registry: Option<Arc<dyn SchemaRegistry>>,
    schemas: HashMap<u32, Arc<apache_avro::Schema>>,
    keep_after_json: bool,
    names: HashSet<Arc<str>>,
    /// The transaction id of the last change: a transaction's changes come one after the
    /// other and share one copy of it.
    last_tx: Option<Arc<str>>,
}

/// Past this many distinct names the set is started afresh (a log of very many tables
/// must not grow it without bound; changes keep the names they hold).
const MAX_NAMES: usize = 4096;

impl Decoder {
    /// `registry` is needed for Avro records only; without one, an Avro record is
    /// malformed (its schema cannot be known).
    pub fn new(registry: Option<Arc<dyn SchemaRegistry>>) -> Self {
        Decoder {
            registry,
            schemas: HashMap::new(),
            keep_after_json: false,
            names: HashSet::new(),
            last_tx: None,
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
        let Some(value) = r.value.as_ref() else {
            return Ok(Decoded::Skip);
        };
        let key = match r.key.as_deref() {
            Some(k) if !k.is_empty() => Some(self.key_of(k).await?),
            _ => None,
        };
        let c = if is_avro(value) {
            let v = self.avro_of(value).await?;
            self.change_of_value(r, key, v)?
        } else if let Some(scanned) = crate::scan::envelope(value) {
            // The fast path; what it does not read goes to serde below.
            let after = match scanned.after {
                None => None,
                Some(a) if self.keep_after_json => Some(After::Text(value.slice_ref(a))),
                Some(a) => Some(After::Value(serde_json::from_slice(a).map_err(|e| {
                    malformed(r, &format!("the after-image is not JSON: {e}"))
                })?)),
            };
            self.change_of_envelope(r, key, Lean::<()>::scanned(scanned), after)?
        } else if self.keep_after_json {
            let mut env: Lean<&RawValue> = serde_json::from_slice(value)
                .map_err(|e| malformed(r, &format!("not JSON and not Avro: {e}")))?;
            let after = env.take_after().map(|a| {
                // The raw value is a slice of the record's bytes: shared, not copied.
                After::Text(value.slice_ref(a.get().as_bytes()))
            });
            self.change_of_envelope(r, key, env, after)?
        } else {
            let mut env: Lean<Value> = serde_json::from_slice(value)
                .map_err(|e| malformed(r, &format!("not JSON and not Avro: {e}")))?;
            let after = env.take_after().map(After::Value);
            self.change_of_envelope(r, key, env, after)?
        };
        Ok(match c {
            Some(c) => Decoded::Change(Box::new(c)),
            None => Decoded::Skip,
        })
    }

    /// The record key's fields: JSON (with or without a `schema`/`payload` wrapper) or
    /// Confluent-framed Avro.
    async fn key_of(&mut self, bytes: &[u8]) -> Result<Value, DecodeError> {
        if is_avro(bytes) {
            return self.avro_of(bytes).await;
        }
        if let Some(m) = crate::scan::flat_key(bytes) {
            return Ok(Value::Object(m));
        }
        let m: Map<String, Value> = match serde_json::from_slice(bytes) {
            Ok(m) => m,
            // Not an object: the change says what it expected.
            Err(_) => {
                let v: Value = serde_json::from_slice(bytes)
                    .map_err(|e| DecodeError::Malformed(format!("not JSON and not Avro: {e}")))?;
                return Ok(v);
            }
        };
        Ok(unwrap_payload(Value::Object(m)))
    }

    /// A Confluent-framed Avro datum as the JSON `JsonConverter` writes for it.
    async fn avro_of(&mut self, bytes: &[u8]) -> Result<Value, DecodeError> {
        let id = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
        let schema = self.schema(id).await?;
        let mut rest = &bytes[5..];
        let v = apache_avro::from_avro_datum(&schema, &mut rest, None).map_err(|e| {
            DecodeError::Malformed(format!("Avro datum of schema id {id} unreadable: {e}"))
        })?;
        Ok(crate::avro::to_json(v))
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

    /// The shared copy of `name`.
    fn name(&mut self, name: &str) -> Arc<str> {
        if let Some(n) = self.names.get(name) {
            return n.clone();
        }
        if self.names.len() >= MAX_NAMES {
            self.names.clear();
        }
        let n: Arc<str> = name.into();
        self.names.insert(n.clone());
        n
    }

    /// The change an envelope read as a JSON value describes (Avro records are).
    fn change_of_value(
        &mut self,
        r: &SinkRecord,
        key: Option<Value>,
        mut v: Value,
    ) -> Result<Option<Change>, DecodeError> {
        let mut after = v.as_object_mut().and_then(|m| m.remove("after"));
        let mut env = Lean::<Value>::deserialize(&v)
            .map_err(|e| malformed(r, &format!("not a Debezium envelope: {e}")))?;
        if let Some(a) = env.take_after() {
            // It was wrapped in a `payload`.
            after = Some(a);
        }
        self.change_of_envelope(r, key, env, after.map(After::Value))
    }

    /// The change an envelope describes, `None` when it describes none.
    fn change_of_envelope<A>(
        &mut self,
        r: &SinkRecord,
        key: Option<Value>,
        env: Lean<'_, A>,
        after: Option<After>,
    ) -> Result<Option<Change>, DecodeError> {
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
        if let Some(status) = env.status {
            if status == "BEGIN" {
                return Ok(None);
            }
            if status != "END" {
                return Err(malformed(r, "transaction status is neither BEGIN nor END"));
            }
            let Some(id) = env.id else {
                return Err(malformed(r, "transaction END without an id"));
            };
            let event_count = env
                .event_count
                .ok_or_else(|| malformed(r, "transaction END without event_count"))?;
            let mut data_collections = Vec::new();
            for dc in env.data_collections.unwrap_or_default() {
                match (dc.data_collection, dc.event_count) {
                    (Some(name), Some(n)) => data_collections.push((name.into_owned(), n)),
                    _ => return Err(malformed(r, "transaction END data_collections entry")),
                }
            }
            let mut c = base(Op::TxEnd, "".into(), "".into());
            c.tx_end = Some(TxEnd {
                id: id.as_ref().into(),
                event_count,
                data_collections,
            });
            return Ok(Some(c));
        }
        let op = match env.op.as_deref() {
            Some("c") => Op::Create,
            Some("r") => Op::Read,
            Some("u") => Op::Update,
            Some("d") => Op::Delete,
            Some("t") => Op::Truncate,
            // A logical decoding message, a heartbeat: not a row change.
            Some("m") => return Ok(None),
            Some(_) => return Err(malformed(r, "unknown op")),
            // Schema-change and heartbeat records have no `op`.
            None => return Ok(None),
        };
        let Some(source) = env.source else {
            return Err(malformed(r, "no source block"));
        };
        let schema = self.name(source.schema.or(source.db).as_deref().unwrap_or(""));
        let Some(table) = source.table else {
            return Err(malformed(r, "the source block has no table"));
        };
        let table = self.name(&table);
        let mut c = base(op, schema, table);
        c.source_ts_ms = source.ts_ms;
        if let Some(LeanTx {
            id: Some(id),
            total_order: Some(t),
            data_collection_order: Some(d),
        }) = env.transaction
        {
            let id = match &self.last_tx {
                Some(last) if **last == *id => last.clone(),
                _ => {
                    let new: Arc<str> = id.as_ref().into();
                    self.last_tx = Some(new.clone());
                    new
                }
            };
            c.tx = Some(TxInfo {
                id,
                total_order: t,
                data_collection_order: d,
            });
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
                Some(After::Text(t)) if t.first() == Some(&b'{') => c.after_json = Some(t),
                _ => return Err(malformed(r, "a create/read/update without an after-image")),
            }
        }
        Ok(Some(c))
    }
}

/// Confluent's wire format: a zero byte, then the schema id.
fn is_avro(bytes: &[u8]) -> bool {
    bytes.len() >= 5 && bytes[0] == 0
}

/// An envelope's `after`: parsed, or its JSON text (a slice of the record's value).
enum After {
    Value(Value),
    Text(Bytes),
}

/// The parts of a Debezium envelope a sink uses, typed; everything else (`before`, most
/// of `source`, a `schema` beside the `payload`) is skipped by the parser without building
/// values for it, which is most of the work of reading a change. `A`: how `after` is read
/// (a [`Value`], or its text as a borrowed [`RawValue`]). The same struct reads a JSON
/// record's bytes and an Avro record's JSON form, so both decode alike.
#[derive(serde::Deserialize)]
#[serde(bound(deserialize = "A: serde::Deserialize<'de>"))]
struct Lean<'a, A> {
    #[serde(borrow, default)]
    op: Option<Cow<'a, str>>,
    #[serde(default = "Option::default")]
    after: Option<A>,
    #[serde(borrow, default)]
    source: Option<LeanSource<'a>>,
    #[serde(borrow, default)]
    transaction: Option<LeanTx<'a>>,
    /// JsonConverter with schemas: the envelope is here.
    #[serde(borrow, default = "Option::default")]
    payload: Option<Box<Lean<'a, A>>>,
    // A record of the transaction topic.
    #[serde(borrow, default)]
    status: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(default)]
    event_count: Option<u64>,
    #[serde(borrow, default)]
    data_collections: Option<Vec<LeanCollection<'a>>>,
}

impl<'a> Lean<'a, ()> {
    /// What the fast reader read ([`crate::scan`]), without its `after`.
    fn scanned(e: crate::scan::Envelope<'a>) -> Self {
        Lean {
            op: e.op.map(Cow::Borrowed),
            after: None,
            source: e.source.map(|s| LeanSource {
                schema: s.schema.map(Cow::Borrowed),
                db: s.db.map(Cow::Borrowed),
                table: s.table.map(Cow::Borrowed),
                ts_ms: s.ts_ms,
            }),
            transaction: e.transaction.map(|t| LeanTx {
                id: t.id.map(Cow::Borrowed),
                total_order: t.total_order,
                data_collection_order: t.data_collection_order,
            }),
            payload: None,
            status: None,
            id: None,
            event_count: None,
            data_collections: None,
        }
    }
}

impl<'a, A> Lean<'a, A> {
    /// The envelope (unwrapped from a `payload`) without its `after`, and the `after`.
    fn take_after(&mut self) -> Option<A> {
        if let Some(p) = self.payload.take() {
            *self = *p;
        }
        self.after.take()
    }
}

#[derive(serde::Deserialize)]
struct LeanSource<'a> {
    #[serde(borrow, default)]
    schema: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    db: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    table: Option<Cow<'a, str>>,
    #[serde(default)]
    ts_ms: Option<i64>,
}

#[derive(serde::Deserialize)]
struct LeanTx<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(default)]
    total_order: Option<u64>,
    #[serde(default)]
    data_collection_order: Option<u64>,
}

#[derive(serde::Deserialize)]
struct LeanCollection<'a> {
    #[serde(borrow, default)]
    data_collection: Option<Cow<'a, str>>,
    #[serde(default)]
    event_count: Option<u64>,
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

    /// Every way of reading an envelope gives the same change: JSON with the after-image
    /// parsed or kept as text (then parsed), with and without a schema wrapper, and the
    /// JSON value an Avro record is read as; for row changes, truncates, END records and
    /// the rest.
    #[test]
    fn every_reading_of_an_envelope_gives_the_same_change() {
        let row = r#"{"before":{"id":3,"v":"old"},"after":{"id":3,"v":"x\"y","n":null},"source":{"version":"1","connector":"postgresql","name":"app","ts_ms":17,"snapshot":"false","db":"d","schema":"public","table":"t","lsn":5},"transaction":{"id":"9:5","total_order":2,"data_collection_order":1},"op":"u","ts_ms":18}"#;
        let my = r#"{"before":null,"after":{"id":1},"source":{"db":"shop","table":"orders","ts_ms":1},"op":"c"}"#;
        let del =
            r#"{"before":{"id":3},"after":null,"source":{"schema":"public","table":"t"},"op":"d"}"#;
        let trunc = r#"{"source":{"schema":"public","table":"t"},"op":"t"}"#;
        let end = r#"{"status":"END","id":"9:5","event_count":2,"data_collections":[{"data_collection":"public.t","event_count":2}]}"#;
        let other =
            r#"{"op":"m","source":{"schema":"public","table":""},"message":{"prefix":"p"}}"#;
        let escaped = r#"{"after":{"id":1},"source":{"schema":"p\u0075b","table":"t\"q"},"op":"c","transaction":null}"#;
        let wrapped = format!(r#"{{"schema":{{"type":"struct","fields":[]}},"payload":{row}}}"#);
        for v in [row, my, del, trunc, end, other, escaped, wrapped.as_str()] {
            let r = rec(Some(r#"{"id":3}"#), Some(v));
            let want = format!("{:?}", decode(&r).unwrap());
            let mut text = Decoder::new(None);
            text.keep_after_json(true);
            let mut got = futures_executor(text.decode(&r)).unwrap();
            if let Decoded::Change(c) = &mut got {
                if let Some(t) = &c.after_json {
                    let t = std::str::from_utf8(t).unwrap();
                    assert!(v.contains(t), "{t} is a slice of {v}");
                }
                c.parse_after();
            }
            assert_eq!(format!("{got:?}"), want, "{v}");
            let value = unwrap_payload(serde_json::from_str(v).unwrap());
            let got = Decoder::new(None)
                .change_of_value(&r, Some(serde_json::json!({"id": 3})), value)
                .unwrap();
            let got = match got {
                Some(c) => Decoded::Change(Box::new(c)),
                None => Decoded::Skip,
            };
            assert_eq!(format!("{got:?}"), want, "{v}");
        }
        let Decoded::Change(c) = decode(&rec(Some(r#"{"id":1}"#), Some(escaped))).unwrap() else {
            panic!()
        };
        assert_eq!((&*c.schema, &*c.table), ("pub", "t\"q"));
    }

    /// Changes of one table share its names.
    #[test]
    fn names_are_shared() {
        let v = r#"{"after":{"id":1},"source":{"schema":"public","table":"t"},"op":"c","transaction":{"id":"7:1","total_order":1,"data_collection_order":1}}"#;
        let mut d = Decoder::new(None);
        let r = rec(Some(r#"{"id":1}"#), Some(v));
        let (Decoded::Change(a), Decoded::Change(b)) = (
            futures_executor(d.decode(&r)).unwrap(),
            futures_executor(d.decode(&r)).unwrap(),
        ) else {
            panic!()
        };
        assert!(Arc::ptr_eq(&a.table, &b.table) && Arc::ptr_eq(&a.schema, &b.schema));
        let (ta, tb) = (a.tx.unwrap(), b.tx.unwrap());
        assert_eq!(&*ta.id, "7:1");
        assert!(
            Arc::ptr_eq(&ta.id, &tb.id),
            "one copy of a transaction's id"
        );
    }

    /// The fast reader ([`crate::scan`]) and serde's reading agree on every record the
    /// fast reader reads: envelopes of every shape (fields of the wrong types, extra and
    /// missing fields, wrappers, white space), then broken by a byte deleted, inserted or
    /// replaced.
    mod scan_agrees_with_serde {
        use super::*;
        use proptest::prelude::*;

        fn scalar() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(Value::from),
                any::<u64>().prop_map(Value::from),
                (-1e6f64..1e6).prop_map(Value::from),
                "[a-z\\\\\"/é\u{1}\u{7f}\u{1F600}]{0,6}".prop_map(Value::from),
            ]
        }

        fn json() -> impl Strategy<Value = Value> {
            scalar().prop_recursive(3, 12, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                    prop::collection::vec(("[a-z_]{1,4}", inner), 0..3)
                        .prop_map(|kv| Value::Object(kv.into_iter().collect())),
                ]
            })
        }

        /// A value that is usually of the field's type.
        fn field(typed: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
            prop_oneof![6 => typed, 1 => Just(Value::Null), 1 => json()].boxed()
        }

        fn text() -> BoxedStrategy<Value> {
            "[a-z.:_\"\\\\]{0,8}".prop_map(Value::from).boxed()
        }

        fn int() -> BoxedStrategy<Value> {
            prop_oneof![
                any::<u32>().prop_map(Value::from),
                any::<i64>().prop_map(Value::from)
            ]
            .boxed()
        }

        fn object(fields: Vec<(&'static str, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
            let n = fields.len();
            (
                fields
                    .into_iter()
                    .map(|(k, v)| (Just(k), v, any::<bool>()))
                    .collect::<Vec<_>>(),
                prop::collection::vec(("[a-z]{1,3}", json()), 0..2),
            )
                .prop_map(move |(fs, extra)| {
                    let mut m = Map::new();
                    for (k, v, keep) in fs.into_iter().take(n) {
                        if keep {
                            m.insert(k.to_string(), v);
                        }
                    }
                    for (k, v) in extra {
                        m.insert(k, v);
                    }
                    Value::Object(m)
                })
                .boxed()
        }

        fn envelope() -> BoxedStrategy<Value> {
            let source = object(vec![
                ("schema", field(text())),
                ("db", field(text())),
                ("table", field(text())),
                ("ts_ms", field(int())),
            ]);
            let tx = object(vec![
                ("id", field(text())),
                ("total_order", field(int())),
                ("data_collection_order", field(int())),
            ]);
            let after = prop_oneof![3 => json(), 1 => Just(Value::Null)].boxed();
            let env = object(vec![
                (
                    "op",
                    field(
                        prop::sample::select(vec!["c", "u", "d", "r", "t", "m", "x"])
                            .prop_map(Value::from)
                            .boxed(),
                    ),
                ),
                ("before", json().boxed()),
                ("after", after),
                ("source", field(source)),
                ("transaction", field(tx)),
                ("ts_ms", field(int())),
            ]);
            (env, any::<bool>(), json())
                .prop_map(|(env, wrap, schema)| {
                    if wrap {
                        serde_json::json!({ "schema": schema, "payload": env })
                    } else {
                        env
                    }
                })
                .boxed()
        }

        fn bytes() -> impl Strategy<Value = Vec<u8>> {
            (
                envelope(),
                any::<bool>(),
                0..4u8,
                any::<prop::sample::Index>(),
                any::<u8>(),
            )
                .prop_map(|(v, pretty, edit, at, byte)| {
                    let mut b = if pretty {
                        serde_json::to_vec_pretty(&v).unwrap()
                    } else {
                        serde_json::to_vec(&v).unwrap()
                    };
                    let i = at.index(b.len() + 1);
                    let pick = b"{}[],:\\\" 0-.eEnul\xff";
                    let c = pick[byte as usize % pick.len()];
                    match edit {
                        0 => {}
                        1 if i < b.len() => {
                            b.remove(i);
                        }
                        2 => b.insert(i, c),
                        _ if i < b.len() => b[i] = c,
                        _ => {}
                    }
                    b
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(4000))]
            #[test]
            fn agree(b in bytes()) {
                if let Some(fast) = crate::scan::envelope(&b) {
                    let mut slow: Lean<&RawValue> = match serde_json::from_slice(&b) {
                        Ok(l) => l,
                        Err(e) => return Err(TestCaseError::fail(format!(
                            "the fast reader read what serde refuses ({e}): {}",
                            String::from_utf8_lossy(&b)
                        ))),
                    };
                    let after = slow.take_after();
                    prop_assert_eq!(fast.after, after.map(|a| a.get().as_bytes()));
                    prop_assert_eq!(fast.op, slow.op.as_deref());
                    prop_assert_eq!(fast.source.is_some(), slow.source.is_some());
                    if let (Some(f), Some(s)) = (&fast.source, &slow.source) {
                        prop_assert_eq!(f.schema, s.schema.as_deref());
                        prop_assert_eq!(f.db, s.db.as_deref());
                        prop_assert_eq!(f.table, s.table.as_deref());
                        prop_assert_eq!(f.ts_ms, s.ts_ms);
                    }
                    prop_assert_eq!(fast.transaction.is_some(), slow.transaction.is_some());
                    if let (Some(f), Some(s)) = (&fast.transaction, &slow.transaction) {
                        prop_assert_eq!(f.id, s.id.as_deref());
                        prop_assert_eq!(f.total_order, s.total_order);
                        prop_assert_eq!(f.data_collection_order, s.data_collection_order);
                    }
                }
            }
        }

        /// The generated records are mostly read by the fast path (else the test above
        /// would test little).
        #[test]
        fn most_generated_records_take_the_fast_path() {
            use proptest::strategy::ValueTree;
            let mut runner = proptest::test_runner::TestRunner::deterministic();
            let mut fast = 0;
            for _ in 0..1000 {
                let v = envelope().new_tree(&mut runner).unwrap().current();
                if crate::scan::envelope(&serde_json::to_vec(&v).unwrap()).is_some() {
                    fast += 1;
                }
            }
            assert!(fast > 300, "{fast} of 1000");
        }
    }
}
