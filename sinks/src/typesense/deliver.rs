//! Applying changes to Typesense: the collection of each table made ready (created from
//! the first after-image's columns and `schema_file`, new columns added to its schema),
//! upserts through the JSONL import API and deletes by an id filter, a truncate as drop +
//! re-create, and the truncate markers in the `_cdc_truncates` collection.
//!
//! Typesense has no conditional write, so the guarantee rests on the log's order: a key's
//! changes are in one partition and delivered in offset order, and within a chunk only a
//! key's last change is written (its earlier ones would be overwritten in the same
//! request anyway). After any replay the final state is the table's; while a replay runs,
//! a reader may see a document older than the one it saw before. A truncate's version is
//! recorded after the collection is cleared, so a replay passes over the changes of the
//! truncate's partition older than it instead of bringing their rows back.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::search::fields::{self, FieldKind};
use crate::search::plan::{Engine, Item, Truncates, Written};
use crate::typesense::client::Client;
use crate::view::key_text;
use crate::SinkError;

/// Where the sink keeps its truncate markers: one document per collection and place
/// (`<topic>/<partition>`), `{collection, place, version}`.
pub const STATE_COLLECTION: &str = "_cdc_truncates";

/// How many ids one delete-by-filter request names (the filter travels in the URL).
const IDS_PER_DELETE: usize = 100;

/// Typesense's name of a field kind; `None` for kinds left undeclared (an object would
/// need `enable_nested_fields`: it is stored, not indexed).
pub fn type_name(kind: FieldKind) -> Option<&'static str> {
    Some(match kind {
        FieldKind::Int => "int64",
        FieldKind::Float => "float",
        FieldKind::Bool => "bool",
        FieldKind::String => "string",
        FieldKind::IntArray => "int64[]",
        FieldKind::FloatArray => "float[]",
        FieldKind::BoolArray => "bool[]",
        FieldKind::StringArray => "string[]",
        FieldKind::Object => return None,
    })
}

/// A declared field: optional, since any column may be NULL.
fn field(name: &str, type_name: &str) -> Value {
    json!({"name": name, "type": type_name, "optional": true})
}

/// What the sink knows of a collection.
struct Collection {
    /// Whether it exists (a truncate of a table never written has nothing to clear).
    exists: bool,
    /// Columns declared, or known to stay undeclared.
    known: HashSet<String>,
    /// Its schema as a create request, to re-create it after a truncate.
    schema: Value,
}

/// The Typesense [`Engine`].
pub struct Typesense {
    pub client: Client,
    /// `schema_file`: per collection, its schema overrides.
    pub overrides: Map<String, Value>,
    collections: HashMap<Arc<str>, Collection>,
    state_exists: bool,
}

impl Typesense {
    pub fn new(client: Client, overrides: Map<String, Value>) -> Self {
        Typesense {
            client,
            overrides,
            collections: HashMap::new(),
            state_exists: false,
        }
    }

    /// The create request for `name` with the columns of `after`: the schema file's
    /// entry, its fields first, then one field per other column that has a type.
    fn schema_for(&self, name: &str, after: &Map<String, Value>) -> Value {
        let mut schema = match self.overrides.get(name) {
            Some(Value::Object(o)) => o.clone(),
            _ => Map::new(),
        };
        schema.insert("name".into(), Value::String(name.to_string()));
        let mut fields: Vec<Value> = schema
            .get("fields")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let given: HashSet<String> = field_names(&fields).collect();
        for (col, kind) in fields::new_fields(after, |k| k == "id" || given.contains(k)) {
            if let Some(t) = type_name(kind) {
                fields.push(field(col, t));
            }
        }
        if fields.is_empty() {
            // Typesense wants at least one field; with no column to go by (all NULL),
            // let it detect the types itself.
            fields.push(json!({"name": ".*", "type": "auto"}));
        }
        schema.insert("fields".into(), Value::Array(fields));
        Value::Object(schema)
    }

    async fn load_truncates(
        &self,
        target: &Arc<str>,
        truncates: &mut Truncates,
    ) -> Result<(), SinkError> {
        let filter = format!("collection:=`{}`", target.replace('`', ""));
        let docs = self.client.export(STATE_COLLECTION, &filter).await?;
        let mut markers = BTreeMap::new();
        for d in docs {
            if d.get("collection").and_then(Value::as_str) != Some(target) {
                continue;
            }
            if let (Some(place), Some(v)) = (
                d.get("place").and_then(Value::as_str),
                d.get("version").and_then(Value::as_u64),
            ) {
                markers.insert(place.to_string(), v);
            }
        }
        truncates.load(target, markers);
        Ok(())
    }
}

fn field_names(fields: &[Value]) -> impl Iterator<Item = String> + '_ {
    fields
        .iter()
        .filter_map(|f| f.get("name").and_then(Value::as_str).map(String::from))
}

/// A schema as Typesense returns it, as a create request (without the read-only keys).
fn as_create_request(schema: &Value) -> Value {
    let mut out = Map::new();
    for k in [
        "name",
        "default_sorting_field",
        "token_separators",
        "symbols_to_index",
        "enable_nested_fields",
    ] {
        match schema.get(k) {
            Some(Value::String(s)) if s.is_empty() => {}
            Some(v) => {
                out.insert(k.into(), v.clone());
            }
            None => {}
        }
    }
    let fields: Vec<Value> = schema
        .get("fields")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|f| {
                    let mut g = Map::new();
                    for k in [
                        "name", "type", "optional", "facet", "index", "sort", "infix", "locale",
                    ] {
                        if let Some(v) = f.get(k) {
                            g.insert(k.into(), v.clone());
                        }
                    }
                    Value::Object(g)
                })
                .collect()
        })
        .unwrap_or_default();
    out.insert("fields".into(), Value::Array(fields));
    Value::Object(out)
}

/// The document of an upsert: the after-image with `id` = the key text (Typesense's ids
/// are strings; a column named `id` is replaced by it).
pub fn document(id: &str, after: &Map<String, Value>) -> Value {
    let mut doc = Map::with_capacity(after.len() + 1);
    doc.insert("id".into(), Value::String(id.to_string()));
    for (k, v) in after {
        if k != "id" {
            doc.insert(k.clone(), v.clone());
        }
    }
    Value::Object(doc)
}

/// `id:[`a`,`b`]` filters for `ids`, at most [`IDS_PER_DELETE`] each; ids with a
/// backtick cannot be quoted and come back in the second list.
pub fn delete_filters(ids: &[&str]) -> (Vec<String>, Vec<String>) {
    let (plain, odd): (Vec<&str>, Vec<&str>) = ids.iter().partition(|id| !id.contains('`'));
    let filters = plain
        .chunks(IDS_PER_DELETE)
        .map(|c| {
            let quoted: Vec<String> = c.iter().map(|id| format!("`{id}`")).collect();
            format!("id:[{}]", quoted.join(","))
        })
        .collect();
    (filters, odd.into_iter().map(String::from).collect())
}

impl Engine for Typesense {
    async fn open(
        &mut self,
        target: &Arc<str>,
        after: Option<&Map<String, Value>>,
        truncates: &mut Truncates,
    ) -> Result<(), SinkError> {
        if !truncates.is_loaded(target) {
            self.load_truncates(target, truncates).await?;
        }
        let exists = self.collections.get(target).is_some_and(|c| c.exists);
        if !exists {
            let mut found = self.client.collection(target).await?;
            if found.is_none() {
                let Some(after) = after else {
                    // Nothing to create it from (a truncate first): nothing in it.
                    self.collections.insert(
                        target.clone(),
                        Collection {
                            exists: false,
                            known: HashSet::new(),
                            schema: Value::Null,
                        },
                    );
                    return Ok(());
                };
                let schema = self.schema_for(target, after);
                if self.client.create(&schema).await? {
                    tracing::info!(collection = %target, "typesense sink: collection created");
                    found = Some(schema);
                } else {
                    // Created by someone else meanwhile: take theirs.
                    found = self.client.collection(target).await?;
                }
            }
            let Some(schema) = found else {
                return Err(SinkError::transient(
                    "creating a Typesense collection",
                    format!("{target:?} neither exists nor can be created"),
                ));
            };
            let known = schema
                .get("fields")
                .and_then(Value::as_array)
                .map(|a| field_names(a).collect())
                .unwrap_or_default();
            self.collections.insert(
                target.clone(),
                Collection {
                    exists: true,
                    known,
                    schema: as_create_request(&schema),
                },
            );
        }
        let Some(after) = after else {
            return Ok(());
        };
        let coll = self.collections.get_mut(target).expect("registered above");
        let new = fields::new_fields(after, |k| k == "id" || coll.known.contains(k));
        if new.is_empty() {
            return Ok(());
        }
        let declare: Vec<Value> = new
            .iter()
            .filter_map(|(col, kind)| type_name(*kind).map(|t| field(col, t)))
            .collect();
        let names: Vec<String> = new.iter().map(|(c, _)| c.to_string()).collect();
        if !declare.is_empty() {
            match self.client.add_fields(target, &declare).await? {
                Ok(()) => {
                    tracing::info!(collection = %target, fields = ?names, "typesense sink: fields added to the collection");
                    if let Some(Value::Array(f)) = coll.schema.get_mut("fields") {
                        f.extend(declare);
                    }
                }
                // Valid data never stops the sink: the columns stay stored but undeclared.
                Err(m) => {
                    tracing::warn!(collection = %target, fields = ?names, error = %m, "typesense sink: Typesense refused new fields; their values are stored, not indexed")
                }
            }
        }
        coll.known.extend(names);
        Ok(())
    }

    async fn write(&mut self, items: &[Item<'_>]) -> Result<Written, SinkError> {
        // A key's last change in the chunk is the one that counts.
        let mut ids: Vec<String> = Vec::with_capacity(items.len());
        let mut last: HashMap<(&str, &str), usize> = HashMap::with_capacity(items.len());
        for it in items {
            let mut id = String::new();
            key_text(&it.change.key, &mut id);
            ids.push(id);
        }
        for (n, it) in items.iter().enumerate() {
            last.insert((&it.target, &ids[n]), n);
        }
        let mut per_target: BTreeMap<&str, (Vec<usize>, Vec<usize>)> = BTreeMap::new();
        for (n, it) in items.iter().enumerate() {
            if last.get(&(&*it.target, ids[n].as_str())) != Some(&n) {
                continue;
            }
            let e = per_target.entry(&it.target).or_default();
            if it.change.op.upserts() {
                e.0.push(n);
            } else {
                e.1.push(n);
            }
        }
        let mut w = Written::default();
        for (target, (upserts, deletes)) in per_target {
            if !upserts.is_empty() {
                let mut jsonl = String::new();
                for &n in &upserts {
                    let after = items[n]
                        .change
                        .after
                        .as_ref()
                        .expect("an upsert has an after-image");
                    jsonl.push_str(&document(&ids[n], after).to_string());
                    jsonl.push('\n');
                }
                let Some(results) = self.client.import(target, jsonl).await? else {
                    // Dropped behind the sink's back: create it again on the retry.
                    self.collections.remove(target);
                    return Err(SinkError::transient(
                        "importing documents into Typesense",
                        format!(
                            "collection {target:?} does not exist (any more); it is created again"
                        ),
                    ));
                };
                if results.len() != upserts.len() {
                    return Err(SinkError::transient(
                        "importing documents into Typesense",
                        format!("{} results for {} documents", results.len(), upserts.len()),
                    ));
                }
                for (&n, r) in upserts.iter().zip(&results) {
                    if r.get("success").and_then(Value::as_bool) == Some(true) {
                        continue;
                    }
                    let code = r.get("code").and_then(Value::as_u64).unwrap_or(400);
                    // Only the error, never the document Typesense echoes back.
                    let error = r.get("error").and_then(Value::as_str).unwrap_or("refused");
                    if crate::search::http::is_transient_status(code as u16) {
                        return Err(SinkError::transient(
                            "importing documents into Typesense",
                            format!("HTTP {code}: {error}"),
                        ));
                    }
                    w.rejected.push((
                        items[n].index,
                        format!("Typesense refused the document (HTTP {code}): {error}"),
                    ));
                }
            }
            if !deletes.is_empty() {
                let del_ids: Vec<&str> = deletes.iter().map(|&n| ids[n].as_str()).collect();
                let (filters, odd) = delete_filters(&del_ids);
                for f in filters {
                    self.client.delete_where(target, &f).await?;
                }
                for id in odd {
                    self.client.delete_id(target, &id).await?;
                }
            }
        }
        Ok(w)
    }

    async fn clear(&mut self, target: &Arc<str>) -> Result<(), SinkError> {
        let Some(coll) = self.collections.get(target) else {
            return Ok(());
        };
        if !coll.exists {
            return Ok(());
        }
        let schema = coll.schema.clone();
        self.client.drop_collection(target).await?;
        // Re-created at once, with the schema it had, so readers find it (empty).
        if !schema.is_null() {
            self.client.create(&schema).await?;
        }
        Ok(())
    }

    async fn record_truncates(
        &mut self,
        target: &Arc<str>,
        markers: &BTreeMap<String, u64>,
    ) -> Result<(), SinkError> {
        if !self.state_exists {
            let schema = json!({
                "name": STATE_COLLECTION,
                "fields": [
                    {"name": "collection", "type": "string"},
                    {"name": "place", "type": "string"},
                    {"name": "version", "type": "int64"},
                ]
            });
            self.client.create(&schema).await?;
            self.state_exists = true;
        }
        let mut jsonl = String::new();
        for (place, version) in markers {
            let doc = json!({
                "id": format!("{target}/{place}"),
                "collection": &**target,
                "place": place,
                "version": version,
            });
            jsonl.push_str(&doc.to_string());
            jsonl.push('\n');
        }
        let results = self
            .client
            .import(STATE_COLLECTION, jsonl)
            .await?
            .unwrap_or_default();
        if results.len() != markers.len()
            || results
                .iter()
                .any(|r| r.get("success").and_then(Value::as_bool) != Some(true))
        {
            self.state_exists = false;
            return Err(SinkError::transient(
                "recording a truncate in Typesense",
                format!("the {STATE_COLLECTION} collection did not take the marker"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_filters_and_types() {
        let after = json!({"id": 7, "name": "x"});
        assert_eq!(
            document("7", after.as_object().unwrap()),
            json!({"id": "7", "name": "x"})
        );
        let (f, odd) = delete_filters(&["1", "a,b", "x`y"]);
        assert_eq!(f, vec!["id:[`1`,`a,b`]".to_string()]);
        assert_eq!(odd, vec!["x`y".to_string()]);
        let many: Vec<String> = (0..250).map(|i| i.to_string()).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(delete_filters(&many).0.len(), 3);
        assert_eq!(type_name(FieldKind::Int), Some("int64"));
        assert_eq!(type_name(FieldKind::Object), None);
    }

    #[test]
    fn a_returned_schema_becomes_a_create_request() {
        let got = json!({"created_at": 1, "default_sorting_field": "", "enable_nested_fields": false,
            "fields": [{"facet": false, "index": true, "infix": false, "locale": "", "name": "n", "nested": false, "optional": true, "sort": true, "type": "int64"}],
            "name": "t", "num_documents": 3, "symbols_to_index": [], "token_separators": []});
        assert_eq!(
            as_create_request(&got),
            json!({"name": "t", "token_separators": [], "symbols_to_index": [], "enable_nested_fields": false,
                "fields": [{"name": "n", "type": "int64", "optional": true, "facet": false, "index": true, "sort": true, "infix": false, "locale": ""}]})
        );
    }
}
