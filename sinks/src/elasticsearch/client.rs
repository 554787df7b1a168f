//! Elasticsearch's (and OpenSearch's) HTTP API, the calls the sink makes: an index's
//! mapping (get, create the index, add properties or `_meta`), `_bulk`, and
//! `_delete_by_query`. Basic authentication when a username is configured.
//!
//! Invariants: a request without an answer and the statuses 408/429/5xx are transient
//! failures ([`crate::search::http`]), 401/403 definite ones whose fix names the sink's
//! `username` / `password` / `password_file`; every other status is handed to the
//! caller, who knows what it means for that call.

use reqwest::{Method, Url};
use serde_json::Value;

use crate::search::http::{self, Secret};
use crate::SinkError;

/// One cluster (any node, or a load balancer in front).
pub struct Client {
    http: reqwest::Client,
    base: Url,
    auth: Option<(String, Secret)>,
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
    /// The error's `type: reason`, else the body.
    pub fn message(&self) -> String {
        let j = self.json();
        let e = j.get("error");
        match (
            e.and_then(|e| e.get("type")).and_then(Value::as_str),
            e.and_then(|e| e.get("reason")).and_then(Value::as_str),
        ) {
            (Some(t), Some(r)) => format!("{t}: {}", http::short(r)),
            _ => http::short(&self.body),
        }
    }
    fn error_type(&self) -> Option<String> {
        self.json()
            .get("error")
            .and_then(|e| e.get("type"))
            .and_then(Value::as_str)
            .map(String::from)
    }
}

impl Client {
    pub fn new(base: Url, auth: Option<(String, Secret)>) -> Result<Client, SinkError> {
        Ok(Client {
            http: http::client()?,
            base,
            auth,
        })
    }

    /// Sends a request; `Err` only for no answer, a transient status or bad credentials.
    pub(crate) async fn send(
        &self,
        what: &str,
        method: Method,
        segments: &[&str],
        query: &[(&str, &str)],
        body: Option<(String, &'static str)>,
    ) -> Result<Answer, SinkError> {
        let url = http::endpoint(&self.base, segments, query);
        let mut rb = self.http.request(method, url);
        if let Some((user, password)) = &self.auth {
            rb = rb.basic_auth(user, Some(password.expose()));
        }
        if let Some((body, content_type)) = body {
            rb = rb
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(body);
        }
        let resp = rb.send().await.map_err(|e| http::no_answer(what, e))?;
        let status = resp.status().as_u16();
        let body = resp.text().await.map_err(|e| http::no_answer(what, e))?;
        let answer = Answer { status, body };
        if status == 401 || status == 403 {
            return Err(self.refused(what, status, &answer.message()));
        }
        if http::is_transient_status(status) {
            return Err(http::failed(what, status, &answer.message(), ""));
        }
        Ok(answer)
    }

    /// A 401 or 403: definite (retrying sends the same credentials). The fix names the
    /// keys that hold them, since the cluster's message does not know them.
    fn refused(&self, what: &str, status: u16, message: &str) -> SinkError {
        let fix = match (&self.auth, status) {
            (None, 401) => "the cluster requires authentication: set the sink's username and \
                            password (or password_file)"
                .to_string(),
            (Some((user, _)), 401) => format!(
                "the cluster did not accept user {user:?}: check the sink's username and its \
                 password / password_file (the file's content, less one trailing newline)"
            ),
            (None, _) => "the cluster refuses anonymous requests: set the sink's username and \
                          password (or password_file) of a user that may write the indexes"
                .to_string(),
            (Some((user, _)), _) => format!(
                "user {user:?} (the sink's username) lacks a privilege: grant it create_index, \
                 view_index_metadata, manage, read and write on the sink's indexes"
            ),
        };
        SinkError::definite(
            what,
            format!("HTTP {status}: {}", http::short(message)),
            fix,
        )
    }

    /// The index's mapping (`{"properties": …, "_meta": …}`), `None` when there is no
    /// such index.
    pub async fn mapping(&self, index: &str) -> Result<Option<Value>, SinkError> {
        let what = "reading an Elasticsearch index's mapping";
        let a = self
            .send(what, Method::GET, &[index, "_mapping"], &[], None)
            .await?;
        match a.status {
            404 => Ok(None),
            _ if a.ok() => {
                // Keyed by the concrete index name (which differs when `index` is an alias).
                let j = a.json();
                let m = j
                    .as_object()
                    .and_then(|o| o.values().next())
                    .and_then(|v| v.get("mappings"))
                    .cloned()
                    .unwrap_or(Value::Object(Default::default()));
                Ok(Some(m))
            }
            s => Err(http::failed(
                what,
                s,
                &a.message(),
                "check the url (it must point at the cluster's REST API)",
            )),
        }
    }

    /// Creates the index; `Ok(false)` when it exists already.
    pub async fn create_index(&self, index: &str, body: &Value) -> Result<bool, SinkError> {
        let what = "creating an Elasticsearch index";
        let a = self
            .send(
                what,
                Method::PUT,
                &[index],
                &[],
                Some((body.to_string(), "application/json")),
            )
            .await?;
        if a.ok() {
            return Ok(true);
        }
        if a.error_type().as_deref() == Some("resource_already_exists_exception") {
            return Ok(false);
        }
        Err(http::failed(
            what,
            a.status,
            &a.message(),
            "fix the index's entry in mapping_file",
        ))
    }

    /// Updates the index's mapping (new properties, `_meta`); the error message when the
    /// cluster refuses.
    pub async fn put_mapping(
        &self,
        index: &str,
        body: &Value,
    ) -> Result<Result<(), String>, SinkError> {
        let a = self
            .send(
                "updating an Elasticsearch mapping",
                Method::PUT,
                &[index, "_mapping"],
                &[],
                Some((body.to_string(), "application/json")),
            )
            .await?;
        Ok(if a.ok() { Ok(()) } else { Err(a.message()) })
    }

    /// Sends a `_bulk` body; the response.
    pub async fn bulk(&self, ndjson: String) -> Result<Value, SinkError> {
        let what = "writing to Elasticsearch (_bulk)";
        let a = self
            .send(
                what,
                Method::POST,
                &["_bulk"],
                &[],
                Some((ndjson, "application/x-ndjson")),
            )
            .await?;
        if a.ok() {
            return Ok(a.json());
        }
        Err(http::failed(
            what,
            a.status,
            &a.message(),
            if a.status == 413 {
                "lower batch_documents (the request is larger than the cluster's http.max_content_length)"
            } else {
                "check the url and the cluster's version (Elasticsearch 7+ or OpenSearch)"
            },
        ))
    }

    /// Deletes every document of the index (gone already is fine).
    pub async fn delete_all(&self, index: &str) -> Result<(), SinkError> {
        let what = "clearing an Elasticsearch index (_delete_by_query)";
        // _delete_by_query deletes what a search finds, and a search finds only what a
        // refresh made visible: without one, documents written in the last second
        // (`index.refresh_interval`) would survive the truncate.
        let r = self
            .send(what, Method::POST, &[index, "_refresh"], &[], None)
            .await?;
        if r.status == 404 {
            return Ok(());
        }
        if !r.ok() {
            return Err(http::failed(
                what,
                r.status,
                &r.message(),
                "check the user's permissions (refresh and delete on the index)",
            ));
        }
        let body = serde_json::json!({"query": {"match_all": {}}}).to_string();
        let a = self
            .send(
                what,
                Method::POST,
                &[index, "_delete_by_query"],
                &[("conflicts", "proceed"), ("refresh", "true")],
                Some((body, "application/json")),
            )
            .await?;
        if a.status == 404 {
            return Ok(());
        }
        if a.ok() {
            // Per-document failures (a shard busy) leave documents behind: retried.
            let failures = a
                .json()
                .get("failures")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            if failures > 0 {
                return Err(SinkError::transient(
                    what,
                    format!("{failures} documents could not be deleted"),
                ));
            }
            return Ok(());
        }
        Err(http::failed(
            what,
            a.status,
            &a.message(),
            "check the user's permissions (delete on the index)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_credentials_are_definite_and_name_the_keys() {
        let url = Url::parse("http://127.0.0.1:1").unwrap();
        let auth = Some(("cdc".to_string(), Secret::from("hunter2".to_string())));
        let with = Client::new(url.clone(), auth).unwrap();
        let e = with.refused(
            "w",
            401,
            "security_exception: unable to authenticate user [cdc]",
        );
        assert!(!e.is_transient());
        let text = e.to_string();
        for needle in [
            "HTTP 401",
            "username",
            "password / password_file",
            "\"cdc\"",
        ] {
            assert!(text.contains(needle), "{needle}: {text}");
        }
        assert!(!text.contains("hunter2"), "{text}");
        let without = Client::new(url, None).unwrap();
        let text = without.refused("w", 401, "").to_string();
        assert!(text.contains("set the sink's username and password (or password_file)"));
        assert!(with.refused("w", 403, "").to_string().contains("privilege"));
        assert!(!without.refused("w", 403, "").is_transient());
    }
}
