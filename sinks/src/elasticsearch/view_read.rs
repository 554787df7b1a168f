//! Reading an Elasticsearch / OpenSearch sink's view back, for `cdc verify --sink NAME`.
//!
//! A table's index is named by the sink's `index` template; a row is the document whose
//! `_id` is the row's key text ([`crate::view_read::key_id`]) and whose `_source` is the
//! after-image as the sink wrote it. Documents are fetched with `_mget`, counted with
//! `_count` (after a refresh, so that what the sink wrote is visible), and scanned with a
//! scroll sorted by `_doc`, which is cleared at its end. Nothing here writes documents.

use std::sync::Arc;

use cdc_schemas::TableId;
use reqwest::Method;
use serde_json::{json, Map, Value};

use super::client::Client;
use super::config::Settings;
use crate::config::SinkSpec;
use crate::search::http;
use crate::search::names::NameTemplate;
use crate::view_read::{key_id, ScanPage, ViewReader, ViewRow};
use crate::SinkError;

const WHAT: &str = "reading the Elasticsearch view";
const JSON: &str = "application/json";

/// An Elasticsearch / OpenSearch sink's indexes, read-only.
pub struct ElasticsearchView {
    client: Client,
    names: NameTemplate,
}

impl ElasticsearchView {
    pub fn open(spec: &SinkSpec) -> Result<ElasticsearchView, SinkError> {
        let r = Settings::resolve(spec)
            .map_err(|(k, m)| SinkError::definite(WHAT, format!("{k}: {m}"), "fix the key"))?;
        Ok(ElasticsearchView {
            client: Client::new(r.url, r.auth)?,
            names: r.names,
        })
    }

    fn index(&mut self, table: &TableId) -> Arc<str> {
        let schema: Arc<str> = table.schema.as_str().into();
        let name: Arc<str> = table.name.as_str().into();
        self.names.render(&schema, &name)
    }

    /// `body` to `segments`; the answer's JSON, `None` for a 404 (no such index).
    async fn call(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, &str)],
        body: Option<Value>,
    ) -> Result<Option<Value>, SinkError> {
        let a = self
            .client
            .send(
                WHAT,
                method,
                segments,
                query,
                body.map(|b| (b.to_string(), JSON)),
            )
            .await?;
        match a.status {
            404 => Ok(None),
            _ if a.ok() => Ok(Some(a.json())),
            s => Err(http::failed(
                WHAT,
                s,
                &a.message(),
                "check the sink's url and index",
            )),
        }
    }
}

/// The `_source` of a hit or `_mget` doc, with its `_id`.
fn hit(doc: &Value) -> Option<(String, ViewRow)> {
    let id = doc.get("_id")?.as_str()?.to_string();
    let source = doc.get("_source")?.as_object()?.clone();
    Some((id, source))
}

impl ViewReader for ElasticsearchView {
    async fn get(
        &mut self,
        table: &TableId,
        keys: &[Map<String, Value>],
    ) -> Result<Vec<Option<ViewRow>>, SinkError> {
        let index = self.index(table);
        let ids: Vec<String> = keys.iter().map(key_id).collect();
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(1000) {
            let a = self
                .call(
                    Method::POST,
                    &[&index, "_mget"],
                    &[],
                    Some(json!({ "ids": chunk })),
                )
                .await?;
            let docs = a
                .as_ref()
                .and_then(|a| a.get("docs"))
                .and_then(Value::as_array);
            match docs {
                // `_mget` answers in the order asked.
                Some(docs) if docs.len() == chunk.len() => out.extend(docs.iter().map(|d| {
                    (d.get("found") == Some(&Value::Bool(true)))
                        .then(|| hit(d).map(|(_, s)| s))
                        .flatten()
                })),
                // No index: nothing written yet.
                _ => out.extend(chunk.iter().map(|_| None)),
            }
        }
        Ok(out)
    }

    async fn count(&mut self, table: &TableId) -> Result<u64, SinkError> {
        let index = self.index(table);
        self.call(Method::POST, &[&index, "_refresh"], &[], None)
            .await?;
        Ok(self
            .call(Method::GET, &[&index, "_count"], &[], None)
            .await?
            .and_then(|a| a.get("count").and_then(Value::as_u64))
            .unwrap_or(0))
    }

    async fn scan(
        &mut self,
        table: &TableId,
        cursor: Option<String>,
        max: usize,
    ) -> Result<ScanPage, SinkError> {
        let a = match cursor {
            None => {
                let index = self.index(table);
                self.call(
                    Method::POST,
                    &[&index, "_search"],
                    &[("scroll", "2m")],
                    Some(json!({"size": max.max(1), "sort": ["_doc"]})),
                )
                .await?
            }
            Some(id) => {
                self.call(
                    Method::POST,
                    &["_search", "scroll"],
                    &[],
                    Some(json!({"scroll": "2m", "scroll_id": id})),
                )
                .await?
            }
        };
        let Some(a) = a else {
            return Ok(ScanPage::default());
        };
        let rows: Vec<(String, Option<ViewRow>)> = a
            .pointer("/hits/hits")
            .and_then(Value::as_array)
            .map(|h| {
                h.iter()
                    .filter_map(hit)
                    .map(|(id, s)| (id, Some(s)))
                    .collect()
            })
            .unwrap_or_default();
        let scroll = a
            .get("_scroll_id")
            .and_then(Value::as_str)
            .map(String::from);
        if rows.is_empty() {
            if let Some(id) = scroll {
                // The scroll is done: free it now rather than at its timeout.
                let _ = self
                    .call(
                        Method::DELETE,
                        &["_search", "scroll"],
                        &[],
                        Some(json!({ "scroll_id": id })),
                    )
                    .await;
            }
            return Ok(ScanPage { rows, next: None });
        }
        Ok(ScanPage { rows, next: scroll })
    }

    fn id_of(&self, _table: &TableId, key: &Map<String, Value>) -> String {
        key_id(key)
    }
}
