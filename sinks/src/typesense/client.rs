//! Typesense's HTTP API, the calls the sink makes: collections (get, create, add fields,
//! drop), documents (JSONL import with `action=upsert`, delete by an id filter or by id,
//! export by a filter). Every request carries the API key in `X-TYPESENSE-API-KEY`.
//!
//! Invariants: a request without an answer and the statuses 408/429/5xx are transient
//! failures ([`crate::search::http`]), 401/403 definite ones naming the sink's API key
//! settings; every other status is
//! handed to the caller, who knows what it means for that call.

use reqwest::{Method, Url};
use serde_json::Value;

use crate::search::http::{self, Secret};
use crate::SinkError;

/// The header Typesense reads the API key from.
const API_KEY_HEADER: &str = "X-TYPESENSE-API-KEY";

/// One Typesense server (or cluster node / load balancer).
pub struct Client {
    http: reqwest::Client,
    base: Url,
    api_key: Secret,
}

/// An answer: its status and body.
pub struct Answer {
    pub status: u16,
    pub body: String,
}

impl Answer {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
    /// Typesense's `{"message": …}`, else the body.
    pub fn message(&self) -> String {
        match self.json().get("message").and_then(Value::as_str) {
            Some(m) => m.to_string(),
            None => http::short(&self.body),
        }
    }
}

impl Client {
    pub fn new(base: Url, api_key: Secret) -> Result<Client, SinkError> {
        Ok(Client {
            http: http::client()?,
            base,
            api_key,
        })
    }

    pub fn url(&self, segments: &[&str], query: &[(&str, &str)]) -> Url {
        http::endpoint(&self.base, segments, query)
    }

    /// Sends a request; `Err` only for no answer, a transient status or bad credentials.
    pub async fn send(
        &self,
        what: &str,
        method: Method,
        url: Url,
        body: Option<(String, &'static str)>,
    ) -> Result<Answer, SinkError> {
        let mut rb = self
            .http
            .request(method, url)
            .header(API_KEY_HEADER, self.api_key.expose());
        if let Some((body, content_type)) = body {
            rb = rb
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(body);
        }
        let resp = rb.send().await.map_err(|e| http::no_answer(what, e))?;
        let status = resp.status().as_u16();
        let body = resp.text().await.map_err(|e| http::no_answer(what, e))?;
        if status == 401 || status == 403 {
            return Err(refused(what, status, &body));
        }
        if http::is_transient_status(status) {
            return Err(http::failed(what, status, &body, ""));
        }
        Ok(Answer { status, body })
    }

    /// The collection's schema, `None` when there is none.
    pub async fn collection(&self, name: &str) -> Result<Option<Value>, SinkError> {
        let a = self
            .send(
                "reading a Typesense collection",
                Method::GET,
                self.url(&["collections", name], &[]),
                None,
            )
            .await?;
        match a.status {
            404 => Ok(None),
            _ if a.ok() => Ok(Some(a.json())),
            s => Err(http::failed(
                "reading a Typesense collection",
                s,
                &a.message(),
                "check the url (it must point at Typesense's API)",
            )),
        }
    }

    /// Creates a collection; `Ok(false)` when it exists already.
    pub async fn create(&self, schema: &Value) -> Result<bool, SinkError> {
        let what = "creating a Typesense collection";
        let a = self
            .send(
                what,
                Method::POST,
                self.url(&["collections"], &[]),
                Some((schema.to_string(), "application/json")),
            )
            .await?;
        match a.status {
            409 => Ok(false),
            _ if a.ok() => Ok(true),
            s => Err(http::failed(
                what,
                s,
                &a.message(),
                "fix the collection's entry in schema_file (or the field types it overrides)",
            )),
        }
    }

    /// Adds fields to a collection's schema; the error message when Typesense refuses.
    pub async fn add_fields(
        &self,
        name: &str,
        fields: &[Value],
    ) -> Result<Result<(), String>, SinkError> {
        let body = serde_json::json!({ "fields": fields }).to_string();
        let a = self
            .send(
                "adding fields to a Typesense collection",
                Method::PATCH,
                self.url(&["collections", name], &[]),
                Some((body, "application/json")),
            )
            .await?;
        Ok(if a.ok() { Ok(()) } else { Err(a.message()) })
    }

    /// Drops a collection (gone already is fine).
    pub async fn drop_collection(&self, name: &str) -> Result<(), SinkError> {
        let what = "dropping a Typesense collection";
        let a = self
            .send(
                what,
                Method::DELETE,
                self.url(&["collections", name], &[]),
                None,
            )
            .await?;
        match a.status {
            404 => Ok(()),
            _ if a.ok() => Ok(()),
            s => Err(http::failed(
                what,
                s,
                &a.message(),
                "check the API key's permissions",
            )),
        }
    }

    /// Imports JSONL documents with `action=upsert`: one result per line, in order.
    /// `None` when the collection does not exist.
    pub async fn import(&self, name: &str, jsonl: String) -> Result<Option<Vec<Value>>, SinkError> {
        let what = "importing documents into Typesense";
        let url = self.url(
            &["collections", name, "documents", "import"],
            &[("action", "upsert")],
        );
        let a = self
            .send(what, Method::POST, url, Some((jsonl, "text/plain")))
            .await?;
        match a.status {
            404 => Ok(None),
            _ if a.ok() => Ok(Some(
                a.body
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
                    .collect(),
            )),
            s => Err(http::failed(
                what,
                s,
                &a.message(),
                "check the url and the Typesense version (0.23 or later)",
            )),
        }
    }

    /// Deletes the documents `filter_by` matches.
    pub async fn delete_where(&self, name: &str, filter_by: &str) -> Result<(), SinkError> {
        let what = "deleting Typesense documents";
        let url = self.url(
            &["collections", name, "documents"],
            &[("filter_by", filter_by), ("batch_size", "500")],
        );
        let a = self.send(what, Method::DELETE, url, None).await?;
        match a.status {
            404 => Ok(()),
            _ if a.ok() => Ok(()),
            s => Err(http::failed(
                what,
                s,
                &a.message(),
                "check the Typesense version (0.23 or later)",
            )),
        }
    }

    /// Deletes one document (missing is fine).
    pub async fn delete_id(&self, name: &str, id: &str) -> Result<(), SinkError> {
        let what = "deleting a Typesense document";
        let url = self.url(&["collections", name, "documents", id], &[]);
        let a = self.send(what, Method::DELETE, url, None).await?;
        match a.status {
            404 => Ok(()),
            _ if a.ok() => Ok(()),
            s => Err(http::failed(
                what,
                s,
                &a.message(),
                "check the API key's permissions",
            )),
        }
    }

    /// The documents `filter_by` matches (JSONL export); empty when the collection does
    /// not exist.
    pub async fn export(&self, name: &str, filter_by: &str) -> Result<Vec<Value>, SinkError> {
        let what = "exporting Typesense documents";
        let url = self.url(
            &["collections", name, "documents", "export"],
            &[("filter_by", filter_by)],
        );
        let a = self.send(what, Method::GET, url, None).await?;
        match a.status {
            404 => Ok(Vec::new()),
            _ if a.ok() => Ok(a
                .body
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()),
            s => Err(http::failed(
                what,
                s,
                &a.message(),
                "check the Typesense version (0.23 or later)",
            )),
        }
    }
}

/// A request Typesense refused for its API key: definite, naming the keys that set it.
fn refused(what: &str, status: u16, body: &str) -> SinkError {
    let fix = if status == 401 {
        "Typesense did not accept the API key: check the sink's api_key or api_key_file (the \
         file's content, less one trailing newline)"
    } else {
        "the sink's API key (api_key / api_key_file) lacks an action: give it collections:* \
         and documents:* on the sink's collections"
    };
    SinkError::definite(what, format!("HTTP {status}: {}", http::short(body)), fix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_key_is_definite_and_names_the_keys() {
        let e = refused(
            "w",
            401,
            r#"{"message": "Forbidden - a valid `x-typesense-api-key` header must be sent."}"#,
        );
        assert!(!e.is_transient());
        let text = e.to_string();
        for needle in ["HTTP 401", "api_key or api_key_file", "x-typesense-api-key"] {
            assert!(text.contains(needle), "{needle}: {text}");
        }
        let e = refused("w", 403, "");
        assert!(
            !e.is_transient() && e.to_string().contains("collections:*"),
            "{e}"
        );
    }
}
