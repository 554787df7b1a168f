//! Applying changes to Elasticsearch / OpenSearch: each table's index made ready (created
//! with the properties of the first after-image's columns and `mapping_file`, new columns
//! added to its mapping), upserts and deletes through `_bulk` with external versions, a
//! truncate as `_delete_by_query` plus its version in the mapping's `_meta`.
//!
//! Guarantee: every write is conditional on [`crate::Change::version`], so after any
//! replay an index holds each row's newest version and a reader never sees an older one
//! come back — with one limit: Elasticsearch remembers a deleted document's version only
//! for `index.gc_deletes` (60 s by default). A replay that re-sends an *older* upsert of a
//! key deleted more than that ago re-creates the document (until the replay reaches the
//! delete again, which removes it). Replays start at the group's committed offset, at most
//! a batch behind the effect, so this takes a crash and a replay spanning longer than
//! `gc_deletes`; raise it on the index (`mapping_file` settings) if that matters.
//! Truncates are recorded in `_meta.cdc_truncates` (`"<topic>/<partition>": version`)
//! after the index was cleared, and older changes of that partition are passed over.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::elasticsearch::bulk::{self, Outcome};
use crate::elasticsearch::client::Client;
use crate::search::fields::{self, FieldKind};
use crate::search::plan::{Engine, Item, Truncates, Written};
use crate::view::key_text;
use crate::SinkError;

/// The `_meta` key holding the truncate markers.
pub const META_TRUNCATES: &str = "cdc_truncates";

/// The mapping of a field kind; `None` for an object (left to dynamic mapping).
pub fn property(kind: FieldKind) -> Option<Value> {
    let t = match kind {
        FieldKind::Int | FieldKind::IntArray => "long",
        FieldKind::Float | FieldKind::FloatArray => "double",
        FieldKind::Bool | FieldKind::BoolArray => "boolean",
        // What dynamic mapping gives a string: full text, and exact values beside.
        FieldKind::String | FieldKind::StringArray => {
            return Some(
                json!({"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}}),
            )
        }
        FieldKind::Object => return None,
    };
    Some(json!({ "type": t }))
}

/// What the sink knows of an index.
struct Index {
    /// Top-level properties mapped, or known to stay unmapped.
    known: HashSet<String>,
    /// The mapping's `_meta`, kept whole when the truncate markers in it change.
    meta: Map<String, Value>,
}

/// The Elasticsearch [`Engine`].
pub struct Elasticsearch {
    pub client: Client,
    /// `mapping_file`: per index, its create-index body.
    pub mappings: Map<String, Value>,
    indexes: HashMap<Arc<str>, Index>,
}

impl Elasticsearch {
    pub fn new(client: Client, mappings: Map<String, Value>) -> Self {
        Elasticsearch {
            client,
            mappings,
            indexes: HashMap::new(),
        }
    }

    /// The create-index body for `name`: the mapping file's entry, with a property added
    /// for each column of `after` it does not map.
    pub fn create_body(&self, name: &str, after: Option<&Map<String, Value>>) -> Value {
        let mut body = match self.mappings.get(name) {
            Some(Value::Object(o)) => o.clone(),
            _ => Map::new(),
        };
        let mappings = body
            .entry("mappings")
            .or_insert_with(|| Value::Object(Map::new()));
        let mappings = mappings.as_object_mut().expect("checked by the config");
        let props = mappings
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let (Some(props), Some(after)) = (props.as_object_mut(), after) {
            for (col, kind) in fields::new_fields(after, |k| props.contains_key(k)) {
                if let Some(p) = property(kind) {
                    props.insert(col.to_string(), p);
                }
            }
        }
        Value::Object(body)
    }
}

fn markers_of(meta: &Map<String, Value>) -> BTreeMap<String, u64> {
    meta.get(META_TRUNCATES)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_u64().map(|v| (k.clone(), v)))
                .collect()
        })
        .unwrap_or_default()
}

impl Engine for Elasticsearch {
    async fn open(
        &mut self,
        target: &Arc<str>,
        after: Option<&Map<String, Value>>,
        truncates: &mut Truncates,
    ) -> Result<(), SinkError> {
        if !self.indexes.contains_key(target) {
            let mut mapping = self.client.mapping(target).await?;
            if mapping.is_none() {
                let body = self.create_body(target, after);
                if self.client.create_index(target, &body).await? {
                    tracing::info!(index = %target, "elasticsearch sink: index created");
                }
                mapping = self.client.mapping(target).await?;
            }
            let Some(mapping) = mapping else {
                return Err(SinkError::transient(
                    "creating an Elasticsearch index",
                    format!("{target:?} neither exists nor can be created"),
                ));
            };
            let known = mapping
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default();
            let meta = mapping
                .get("_meta")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            truncates.load(target, markers_of(&meta));
            self.indexes.insert(target.clone(), Index { known, meta });
        }
        let Some(after) = after else {
            return Ok(());
        };
        let index = self.indexes.get_mut(target).expect("registered above");
        let new = fields::new_fields(after, |k| index.known.contains(k));
        if new.is_empty() {
            return Ok(());
        }
        let props: Map<String, Value> = new
            .iter()
            .filter_map(|(col, kind)| property(*kind).map(|p| (col.to_string(), p)))
            .collect();
        let names: Vec<String> = new.iter().map(|(c, _)| c.to_string()).collect();
        if !props.is_empty() {
            match self
                .client
                .put_mapping(target, &json!({ "properties": props }))
                .await?
            {
                Ok(()) => {
                    tracing::info!(index = %target, fields = ?names, "elasticsearch sink: fields added to the mapping")
                }
                // Valid data never stops the sink: dynamic mapping (or a rejection of
                // the document) takes it from here.
                Err(m) => {
                    tracing::warn!(index = %target, fields = ?names, error = %m, "elasticsearch sink: the cluster refused new properties")
                }
            }
        }
        index.known.extend(names);
        Ok(())
    }

    async fn write(&mut self, items: &[Item<'_>]) -> Result<Written, SinkError> {
        let mut body = String::new();
        let mut id = String::new();
        for it in items {
            id.clear();
            key_text(&it.change.key, &mut id);
            match &it.change.after {
                Some(after) if it.change.op.upserts() => {
                    bulk::push_index(&mut body, &it.target, &id, it.change.version(), after)
                }
                _ => bulk::push_delete(&mut body, &it.target, &id, it.change.version()),
            }
        }
        let response = self.client.bulk(body).await?;
        let outcomes = bulk::outcomes(&response)
            .filter(|o| o.len() == items.len())
            .ok_or_else(|| {
                SinkError::transient(
                    "writing to Elasticsearch (_bulk)",
                    "the response does not list one item per action",
                )
            })?;
        let mut w = Written::default();
        for (k, (it, o)) in items.iter().zip(outcomes).enumerate() {
            match o {
                Outcome::Done => {}
                Outcome::Rejected(m) => w
                    .rejected
                    .push((it.index, format!("Elasticsearch refused the document: {m}"))),
                Outcome::Retry(m) => {
                    if k == 0 {
                        return Err(SinkError::transient("writing to Elasticsearch (_bulk)", m));
                    }
                    // The items before took effect; this one and those after go again
                    // (the ones that did take effect then answer 409: already applied).
                    tracing::debug!(index = %it.target, error = %m, "elasticsearch sink: cluster pushed back; retrying the rest");
                    w.retry_from = Some(it.index);
                    break;
                }
            }
        }
        Ok(w)
    }

    async fn clear(&mut self, target: &Arc<str>) -> Result<(), SinkError> {
        self.client.delete_all(target).await
    }

    async fn record_truncates(
        &mut self,
        target: &Arc<str>,
        markers: &BTreeMap<String, u64>,
    ) -> Result<(), SinkError> {
        let index = self
            .indexes
            .get_mut(target)
            .expect("opened before a truncate");
        index.meta.insert(
            META_TRUNCATES.into(),
            Value::Object(markers.iter().map(|(k, v)| (k.clone(), json!(v))).collect()),
        );
        // `_meta` is replaced whole by a mapping update: send all of it.
        let body = json!({ "_meta": index.meta });
        self.client
            .put_mapping(target, &body)
            .await?
            .map_err(|m| SinkError::transient("recording a truncate in the index's _meta", m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_bodies_merge_the_mapping_file() {
        let file = json!({"orders": {"settings": {"number_of_shards": 1}, "mappings": {"properties": {"note": {"type": "keyword"}}}}});
        let es = Elasticsearch::new(
            Client::new(reqwest::Url::parse("http://127.0.0.1:1").unwrap(), None).unwrap(),
            file.as_object().unwrap().clone(),
        );
        let after = json!({"id": 1, "note": "n", "price": 2.5, "ok": true, "gone": null});
        assert_eq!(
            es.create_body("orders", after.as_object()),
            json!({"settings": {"number_of_shards": 1}, "mappings": {"properties": {
                "note": {"type": "keyword"}, "id": {"type": "long"}, "price": {"type": "double"}, "ok": {"type": "boolean"}}}})
        );
        assert_eq!(
            es.create_body("other", None),
            json!({"mappings": {"properties": {}}})
        );
    }
}
