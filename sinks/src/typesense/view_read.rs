//! Reading a Typesense sink's view back, for `cdc verify --sink NAME`.
//!
//! A table's collection is named by the sink's `collection` template; a row is the
//! document whose `id` is the row's key text ([`crate::view_read::key_id`]). Documents are
//! fetched by id filters (as the sink's deletes name them), counted from the collection's
//! `num_documents`, and scanned through an export of the ids only (a few bytes a row),
//! whose pages are then fetched by id. Nothing here writes.
//!
//! A document holds the row with `id` set to the key text (the sink's
//! [`super::deliver::document`]): [`TypesenseView::normalize`] gives a source row the
//! same `id`, so a row compares equal to the document it wrote.

use std::collections::HashMap;
use std::sync::Arc;

use cdc_schemas::TableId;
use reqwest::Method;
use serde_json::{Map, Value};

use super::client::Client;
use super::config::Settings;
use super::deliver::{delete_filters, document};
use crate::config::SinkSpec;
use crate::search::names::NameTemplate;
use crate::view_read::{key_id, ScanPage, ViewReader, ViewRow};
use crate::SinkError;

const WHAT: &str = "reading the Typesense view";

/// A Typesense sink's collections, read-only.
pub struct TypesenseView {
    client: Client,
    names: NameTemplate,
    /// The ids of the last scan's collection, exported at its first page.
    scan_ids: Vec<String>,
}

impl TypesenseView {
    pub fn open(spec: &SinkSpec) -> Result<TypesenseView, SinkError> {
        let r = Settings::resolve(spec)
            .map_err(|(k, m)| SinkError::definite(WHAT, format!("{k}: {m}"), "fix the key"))?;
        Ok(TypesenseView {
            client: Client::new(r.url, r.api_key)?,
            names: r.names,
            scan_ids: Vec::new(),
        })
    }

    fn collection(&mut self, table: &TableId) -> Arc<str> {
        let schema: Arc<str> = table.schema.as_str().into();
        let name: Arc<str> = table.name.as_str().into();
        self.names.render(&schema, &name)
    }

    /// The documents of `ids` in `collection`, by id.
    async fn by_ids(
        &self,
        collection: &str,
        ids: &[&str],
    ) -> Result<HashMap<String, ViewRow>, SinkError> {
        let mut out = HashMap::with_capacity(ids.len());
        let (filters, odd) = delete_filters(ids);
        for f in filters {
            for doc in self.client.export(collection, &f).await? {
                if let Value::Object(m) = doc {
                    if let Some(Value::String(id)) = m.get("id") {
                        out.insert(id.clone(), m);
                    }
                }
            }
        }
        // Ids a filter cannot quote: one request each.
        for id in odd {
            let url = self
                .client
                .url(&["collections", collection, "documents", &id], &[]);
            let a = self.client.send(WHAT, Method::GET, url, None).await?;
            if a.ok() {
                if let Value::Object(m) = a.json() {
                    out.insert(id.clone(), m);
                }
            }
        }
        Ok(out)
    }
}

impl ViewReader for TypesenseView {
    async fn get(
        &mut self,
        table: &TableId,
        keys: &[Map<String, Value>],
    ) -> Result<Vec<Option<ViewRow>>, SinkError> {
        let collection = self.collection(table);
        let ids: Vec<String> = keys.iter().map(key_id).collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let mut found = self.by_ids(&collection, &refs).await?;
        Ok(ids.iter().map(|id| found.remove(id)).collect())
    }

    async fn count(&mut self, table: &TableId) -> Result<u64, SinkError> {
        let collection = self.collection(table);
        Ok(self
            .client
            .collection(&collection)
            .await?
            .and_then(|c| c.get("num_documents").and_then(Value::as_u64))
            .unwrap_or(0))
    }

    async fn scan(
        &mut self,
        table: &TableId,
        cursor: Option<String>,
        max: usize,
    ) -> Result<ScanPage, SinkError> {
        let collection = self.collection(table);
        let at: usize = match cursor {
            None => {
                let url = self.client.url(
                    &["collections", &collection, "documents", "export"],
                    &[("include_fields", "id")],
                );
                let a = self.client.send(WHAT, Method::GET, url, None).await?;
                self.scan_ids = if a.ok() {
                    a.body
                        .lines()
                        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                        .filter_map(|v| v.get("id").and_then(Value::as_str).map(String::from))
                        .collect()
                } else {
                    Vec::new()
                };
                0
            }
            Some(c) => c
                .parse()
                .map_err(|_| SinkError::transient(WHAT, format!("bad scan cursor {c:?}")))?,
        };
        let end = (at + max.max(1)).min(self.scan_ids.len());
        let page: Vec<&str> = self.scan_ids[at.min(end)..end]
            .iter()
            .map(String::as_str)
            .collect();
        let mut found = self.by_ids(&collection, &page).await?;
        let rows = page
            .iter()
            .filter_map(|id| found.remove(*id).map(|r| (id.to_string(), Some(r))))
            .collect();
        Ok(ScanPage {
            rows,
            next: (end < self.scan_ids.len()).then(|| end.to_string()),
        })
    }

    fn id_of(&self, _table: &TableId, key: &Map<String, Value>) -> String {
        key_id(key)
    }

    fn normalize(&self, key: &Map<String, Value>, row: ViewRow) -> ViewRow {
        match document(&key_id(key), &row) {
            Value::Object(m) => m,
            _ => row,
        }
    }
}
