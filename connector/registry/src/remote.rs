//! A client for any Confluent-compatible schema registry (Confluent, Redpanda, Apicurio's
//! ccompat API, Karapace, our own `cdc registry serve`), implementing [`SchemaRegistry`].
//!
//! - Auth: HTTP basic (`username`/`password`) or a bearer token.
//! - TLS: rustls (ring), the Mozilla roots plus an optional CA file (PEM).
//! - Caches: (subject, schema) → registered version and id → schema, so steady-state
//!   registration costs no request.
//! - Retries: connect errors, timeouts, 5xx, 408 and 429 are retried with exponential
//!   backoff (bounded by `max_attempts` and `max_elapsed`); then
//!   [`RegistryError::Unavailable`] (transient, the pipeline retries later). A 4xx is
//!   definite at once: the body's Confluent `error_code` is mapped to the matching
//!   [`RegistryError`] variant, 401/403 to [`RegistryError::Unauthorized`]. A refused TLS
//!   handshake (e.g. an untrusted certificate) is definite too: `Other` with status 0.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cdc_schemas::compat::CompatibilityLevel;
use cdc_schemas::registry::{
    RegisteredSchema, RegistryError, RegistryFuture, Schema, SchemaReference, SchemaRegistry,
    SchemaType, VersionRef,
};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value as Json};

/// How to reach the registry.
#[derive(Clone)]
pub struct RemoteOptions {
    /// Base URL, e.g. `https://registry.example:8081` or `http://host/registry/`.
    pub url: String,
    pub username: Option<String>,
    pub password: Option<String>,
    pub bearer_token: Option<String>,
    /// Extra trusted CA certificates (PEM), besides the Mozilla roots.
    pub ca_file: Option<PathBuf>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Attempts per call (1 = no retry).
    pub max_attempts: u32,
    /// Stop retrying once this much time has passed since the first attempt.
    pub max_elapsed: Duration,
    /// First backoff; doubles each retry up to `max_backoff`.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl std::fmt::Debug for RemoteOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteOptions")
            .field("url", &self.url)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("bearer_token", &self.bearer_token.as_ref().map(|_| "***"))
            .field("ca_file", &self.ca_file)
            .field("timeout", &self.timeout)
            .field("max_attempts", &self.max_attempts)
            .field("max_elapsed", &self.max_elapsed)
            .finish()
    }
}

impl RemoteOptions {
    pub fn new(url: impl Into<String>) -> Self {
        RemoteOptions {
            url: url.into(),
            username: None,
            password: None,
            bearer_token: None,
            ca_file: None,
            timeout: Duration::from_secs(10),
            max_attempts: 6,
            max_elapsed: Duration::from_secs(60),
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

#[derive(Default)]
struct Cache {
    /// (subject, type, text, references) → registered version.
    registered: HashMap<(String, Schema), RegisteredSchema>,
    /// (subject, schema) → id, from register (which answers only the id).
    ids: HashMap<(String, Schema), u32>,
    by_id: HashMap<u32, Schema>,
}

/// The remote registry client. Cheap to clone (shared connection pool and caches).
#[derive(Clone)]
pub struct RemoteRegistry {
    client: reqwest::Client,
    base: String,
    options: Arc<RemoteOptions>,
    cache: Arc<Mutex<Cache>>,
}

impl std::fmt::Debug for RemoteRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteRegistry")
            .field("options", &self.options)
            .finish()
    }
}

fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn version_str(v: VersionRef) -> String {
    match v {
        VersionRef::Latest => "latest".into(),
        VersionRef::Number(n) => n.to_string(),
    }
}

fn schema_body(schema: &Schema) -> Json {
    let mut body = json!({ "schema": schema.text });
    if schema.schema_type != SchemaType::Avro {
        body["schemaType"] = json!(schema.schema_type.as_str());
    }
    if !schema.references.is_empty() {
        body["references"] = Json::Array(
            schema
                .references
                .iter()
                .map(|r| json!({"name": r.name, "subject": r.subject, "version": r.version}))
                .collect(),
        );
    }
    body
}

fn schema_from_json(v: &Json) -> Result<Schema, RegistryError> {
    let text = v
        .get("schema")
        .and_then(Json::as_str)
        .ok_or_else(|| bad_answer("no \"schema\" in the answer"))?;
    let schema_type = match v.get("schemaType").and_then(Json::as_str) {
        Some("JSON") => SchemaType::Json,
        Some("PROTOBUF") => SchemaType::Protobuf,
        _ => SchemaType::Avro,
    };
    let references = v
        .get("references")
        .and_then(Json::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| {
                    Some(SchemaReference {
                        name: r.get("name")?.as_str()?.to_string(),
                        subject: r.get("subject")?.as_str()?.to_string(),
                        version: u32::try_from(r.get("version")?.as_u64()?).ok()?,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Schema {
        schema_type,
        text: text.to_string(),
        references,
    })
}

fn registered_from_json(v: &Json) -> Result<RegisteredSchema, RegistryError> {
    let num = |k: &str| {
        v.get(k)
            .and_then(Json::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| bad_answer(&format!("no \"{k}\" in the answer")))
    };
    Ok(RegisteredSchema {
        subject: v
            .get("subject")
            .and_then(Json::as_str)
            .ok_or_else(|| bad_answer("no \"subject\" in the answer"))?
            .to_string(),
        version: num("version")?,
        id: num("id")?,
        schema: schema_from_json(v)?,
    })
}

fn bad_answer(what: &str) -> RegistryError {
    RegistryError::Other {
        status: 200,
        code: 0,
        message: format!("unexpected answer from the registry: {what}"),
    }
}

/// `e` and its causes, `: `-separated (reqwest's own message names only the URL).
fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = c.source();
    }
    out
}

/// The rustls error under a request error, if the TLS handshake failed.
fn tls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cur: Option<&'a (dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(t) = c.downcast_ref::<rustls::Error>() {
            return Some(t);
        }
        // io::Error's source() skips the error it wraps.
        cur = match c
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => c.source(),
        };
    }
    None
}

/// Maps a non-success answer to a [`RegistryError`].
fn error_from(status: StatusCode, body: &str, subject: Option<&str>) -> RegistryError {
    let parsed: Option<Json> = serde_json::from_str(body).ok();
    let code = parsed
        .as_ref()
        .and_then(|j| j.get("error_code"))
        .and_then(Json::as_u64)
        .map(|c| c as u32)
        .unwrap_or(status.as_u16() as u32);
    let message = parsed
        .as_ref()
        .and_then(|j| j.get("message"))
        .and_then(Json::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| body.chars().take(500).collect());
    let subject = subject.unwrap_or("").to_string();
    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
        return RegistryError::Unauthorized {
            detail: format!("HTTP {status}: {message}"),
        };
    }
    if status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
    {
        return RegistryError::Unavailable {
            detail: format!("HTTP {status} (error code {code}): {message}"),
        };
    }
    match code {
        409 => RegistryError::Incompatible {
            subject,
            // The remote's level is not in the answer; the caller may ask for it.
            level: CompatibilityLevel::default(),
            messages: vec![message],
        },
        40401 => RegistryError::SubjectNotFound { subject },
        40402 => RegistryError::VersionNotFound {
            subject,
            version: message,
        },
        40403 => RegistryError::SchemaNotFound { id: 0 },
        42201 => RegistryError::InvalidSchema { reason: message },
        42202 => RegistryError::InvalidVersion { version: message },
        42203 => RegistryError::InvalidCompatibilityLevel { level: message },
        _ => RegistryError::Other {
            status: status.as_u16(),
            code,
            message,
        },
    }
}

impl RemoteRegistry {
    /// Builds the client (reads the CA file). No request is made.
    pub fn new(options: RemoteOptions) -> Result<RemoteRegistry, RegistryError> {
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(options.timeout)
            .connect_timeout(options.timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("cdc-registry/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &options.ca_file {
            let pem = std::fs::read(path).map_err(|e| RegistryError::Other {
                status: 0,
                code: 0,
                message: format!("cannot read registry CA file {}: {e}", path.display()),
            })?;
            let certs =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| RegistryError::Other {
                    status: 0,
                    code: 0,
                    message: format!("registry CA file {} is not PEM: {e}", path.display()),
                })?;
            for c in certs {
                builder = builder.add_root_certificate(c);
            }
        }
        let client = builder.build().map_err(|e| RegistryError::Other {
            status: 0,
            code: 0,
            message: format!("cannot build the registry HTTP client: {e}"),
        })?;
        let base = options.url.trim_end_matches('/').to_string();
        Ok(RemoteRegistry {
            client,
            base,
            options: Arc::new(options),
            cache: Arc::new(Mutex::new(Cache::default())),
        })
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One API call with retries. `Ok(body)` on 2xx.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Json>,
        subject: Option<&str>,
    ) -> Result<Json, RegistryError> {
        let url = format!("{}{}", self.base, path);
        let started = Instant::now();
        let mut backoff = self.options.initial_backoff;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let mut req = self
                .client
                .request(method.clone(), &url)
                .header("Accept", "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json; qs=0.9, application/json; qs=0.5");
            if let Some(t) = &self.options.bearer_token {
                req = req.bearer_auth(t);
            } else if let Some(u) = &self.options.username {
                req = req.basic_auth(u, self.options.password.as_deref());
            }
            if let Some(b) = body {
                req = req
                    .header("Content-Type", "application/vnd.schemaregistry.v1+json")
                    .body(b.to_string());
            }
            let err = match req.send().await {
                Ok(resp) => {
                    let status = resp.status();
                    let text = resp.text().await.unwrap_or_default();
                    if status.is_success() {
                        return serde_json::from_str(&text)
                            .map_err(|e| bad_answer(&format!("not JSON ({e}): {text:.200}")));
                    }
                    error_from(status, &text, subject)
                }
                Err(e) => match tls_error(&e) {
                    // A certificate or handshake the client refuses stays refused.
                    Some(tls) => RegistryError::Other {
                        status: 0,
                        code: 0,
                        message: format!("TLS with {url} failed: {tls}"),
                    },
                    None => RegistryError::Unavailable {
                        detail: format!("{method} {url}: {}", with_causes(&e)),
                    },
                },
            };
            if !err.is_transient()
                || attempt >= self.options.max_attempts
                || started.elapsed() + backoff > self.options.max_elapsed
            {
                if err.is_transient() {
                    tracing::warn!(%url, attempt, error = %err, "schema registry still unavailable; giving up for now");
                }
                return Err(err);
            }
            tracing::debug!(%url, attempt, error = %err, ?backoff, "schema registry call failed; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.options.max_backoff);
        }
    }

    /// Registers `schema` under `subject`; returns its id (cached per subject + schema).
    pub async fn register_id(&self, subject: &str, schema: &Schema) -> Result<u32, RegistryError> {
        let key = (subject.to_string(), schema.clone());
        if let Some(id) = self.cache().ids.get(&key) {
            return Ok(*id);
        }
        let v = self
            .call(
                Method::POST,
                &format!("/subjects/{}/versions", enc(subject)),
                Some(&schema_body(schema)),
                Some(subject),
            )
            .await?;
        let id = v
            .get("id")
            .and_then(Json::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| bad_answer("no \"id\" in the register answer"))?;
        let mut c = self.cache();
        c.ids.insert(key, id);
        c.by_id.entry(id).or_insert_with(|| schema.clone());
        Ok(id)
    }

    /// The versions of `subject`.
    pub async fn versions(&self, subject: &str) -> Result<Vec<u32>, RegistryError> {
        let v = self
            .call(
                Method::GET,
                &format!("/subjects/{}/versions", enc(subject)),
                None,
                Some(subject),
            )
            .await?;
        serde_json::from_value(v).map_err(|e| bad_answer(&e.to_string()))
    }

    /// All subjects.
    pub async fn subjects(&self) -> Result<Vec<String>, RegistryError> {
        let v = self.call(Method::GET, "/subjects", None, None).await?;
        serde_json::from_value(v).map_err(|e| bad_answer(&e.to_string()))
    }

    /// Whether `schema` would be accepted under `subject` (against `version`, or all the
    /// level looks at), with the registry's messages.
    pub async fn test_compatibility(
        &self,
        subject: &str,
        version: Option<VersionRef>,
        schema: &Schema,
    ) -> Result<(bool, Vec<String>), RegistryError> {
        let path = match version {
            Some(v) => format!(
                "/compatibility/subjects/{}/versions/{}?verbose=true",
                enc(subject),
                version_str(v)
            ),
            None => format!(
                "/compatibility/subjects/{}/versions?verbose=true",
                enc(subject)
            ),
        };
        let v = self
            .call(
                Method::POST,
                &path,
                Some(&schema_body(schema)),
                Some(subject),
            )
            .await?;
        let ok = v
            .get("is_compatible")
            .and_then(Json::as_bool)
            .ok_or_else(|| bad_answer("no \"is_compatible\""))?;
        let messages = v
            .get("messages")
            .and_then(Json::as_array)
            .map(|a| {
                a.iter()
                    .map(|m| {
                        m.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| m.to_string())
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok((ok, messages))
    }
}

impl SchemaRegistry for RemoteRegistry {
    fn register<'a>(&'a self, subject: &'a str, schema: &'a Schema) -> RegistryFuture<'a, u32> {
        Box::pin(async move {
            match self.register_id(subject, schema).await {
                Err(RegistryError::Incompatible {
                    subject: s,
                    messages,
                    ..
                }) => {
                    // Say under which level it was refused (best effort).
                    let level = self.compatibility(Some(subject)).await.unwrap_or_default();
                    Err(RegistryError::Incompatible {
                        subject: s,
                        level,
                        messages,
                    })
                }
                other => other,
            }
        })
    }

    fn lookup<'a>(
        &'a self,
        subject: &'a str,
        schema: &'a Schema,
    ) -> RegistryFuture<'a, Option<RegisteredSchema>> {
        Box::pin(async move {
            let key = (subject.to_string(), schema.clone());
            if let Some(r) = self.cache().registered.get(&key) {
                return Ok(Some(r.clone()));
            }
            let v = match self
                .call(
                    Method::POST,
                    &format!("/subjects/{}", enc(subject)),
                    Some(&schema_body(schema)),
                    Some(subject),
                )
                .await
            {
                Ok(v) => v,
                Err(
                    RegistryError::SubjectNotFound { .. } | RegistryError::SchemaNotFound { .. },
                ) => return Ok(None),
                Err(e) => return Err(e),
            };
            let r = registered_from_json(&v)?;
            let mut c = self.cache();
            c.registered.insert(key.clone(), r.clone());
            c.ids.insert(key, r.id);
            Ok(Some(r))
        })
    }

    fn schema_by_id(&self, id: u32) -> RegistryFuture<'_, Schema> {
        Box::pin(async move {
            if let Some(s) = self.cache().by_id.get(&id) {
                return Ok(s.clone());
            }
            let v = self
                .call(Method::GET, &format!("/schemas/ids/{id}"), None, None)
                .await
                .map_err(|e| match e {
                    RegistryError::SchemaNotFound { .. } => RegistryError::SchemaNotFound { id },
                    e => e,
                })?;
            let s = schema_from_json(&v)?;
            self.cache().by_id.insert(id, s.clone());
            Ok(s)
        })
    }

    fn version<'a>(
        &'a self,
        subject: &'a str,
        version: VersionRef,
    ) -> RegistryFuture<'a, RegisteredSchema> {
        Box::pin(async move {
            let v = self
                .call(
                    Method::GET,
                    &format!(
                        "/subjects/{}/versions/{}",
                        enc(subject),
                        version_str(version)
                    ),
                    None,
                    Some(subject),
                )
                .await
                .map_err(|e| match e {
                    RegistryError::VersionNotFound { subject, .. } => {
                        RegistryError::VersionNotFound {
                            subject,
                            version: version_str(version),
                        }
                    }
                    e => e,
                })?;
            registered_from_json(&v)
        })
    }

    fn compatibility<'a>(
        &'a self,
        subject: Option<&'a str>,
    ) -> RegistryFuture<'a, CompatibilityLevel> {
        Box::pin(async move {
            let path = match subject {
                Some(s) => format!("/config/{}?defaultToGlobal=true", enc(s)),
                None => "/config".to_string(),
            };
            let v = self.call(Method::GET, &path, None, subject).await?;
            let level = v
                .get("compatibilityLevel")
                .or_else(|| v.get("compatibility"))
                .and_then(Json::as_str)
                .ok_or_else(|| bad_answer("no \"compatibilityLevel\""))?;
            level
                .parse()
                .map_err(|_| RegistryError::InvalidCompatibilityLevel {
                    level: level.to_string(),
                })
        })
    }

    fn set_compatibility<'a>(
        &'a self,
        subject: Option<&'a str>,
        level: CompatibilityLevel,
    ) -> RegistryFuture<'a, ()> {
        Box::pin(async move {
            let path = match subject {
                Some(s) => format!("/config/{}", enc(s)),
                None => "/config".to_string(),
            };
            self.call(
                Method::PUT,
                &path,
                Some(&json!({"compatibility": level.as_str()})),
                subject,
            )
            .await?;
            Ok(())
        })
    }

    fn subject_compatibility<'a>(
        &'a self,
        subject: &'a str,
    ) -> RegistryFuture<'a, Option<CompatibilityLevel>> {
        Box::pin(async move {
            let path = format!("/config/{}", enc(subject));
            let v = match self.call(Method::GET, &path, None, Some(subject)).await {
                Ok(v) => v,
                // 40408 (no subject-level config); older registries answer 40401.
                Err(e) if no_subject_level(&e) => return Ok(None),
                Err(e) => return Err(e),
            };
            let level = v
                .get("compatibilityLevel")
                .or_else(|| v.get("compatibility"))
                .and_then(Json::as_str)
                .ok_or_else(|| bad_answer("no \"compatibilityLevel\""))?;
            level
                .parse()
                .map(Some)
                .map_err(|_| RegistryError::InvalidCompatibilityLevel {
                    level: level.to_string(),
                })
        })
    }

    fn delete_subject_compatibility<'a>(&'a self, subject: &'a str) -> RegistryFuture<'a, ()> {
        Box::pin(async move {
            let path = format!("/config/{}", enc(subject));
            match self.call(Method::DELETE, &path, None, Some(subject)).await {
                Ok(_) => Ok(()),
                Err(e) if no_subject_level(&e) => Ok(()),
                Err(e) => Err(e),
            }
        })
    }
}

/// The answer of a registry asked for a subject's own level when it has none.
fn no_subject_level(e: &RegistryError) -> bool {
    matches!(
        e,
        RegistryError::SubjectNotFound { .. } | RegistryError::Other { code: 40408, .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_mapping() {
        let e = error_from(
            StatusCode::NOT_FOUND,
            r#"{"error_code":40401,"message":"Subject 'x' not found."}"#,
            Some("x"),
        );
        assert!(matches!(e, RegistryError::SubjectNotFound { ref subject } if subject == "x"));
        assert!(matches!(
            error_from(StatusCode::UNAUTHORIZED, "nope", None),
            RegistryError::Unauthorized { .. }
        ));
        assert!(error_from(StatusCode::BAD_GATEWAY, "", None).is_transient());
        assert!(error_from(StatusCode::TOO_MANY_REQUESTS, "", None).is_transient());
        let e = error_from(
            StatusCode::CONFLICT,
            r#"{"error_code":409,"message":"incompatible"}"#,
            Some("s"),
        );
        assert!(matches!(e, RegistryError::Incompatible { .. }));
        assert!(!e.is_transient());
        assert_eq!(
            error_from(
                StatusCode::UNPROCESSABLE_ENTITY,
                r#"{"error_code":42201,"message":"m"}"#,
                None
            )
            .error_code(),
            42201
        );
        assert_eq!(enc("a b/c-d.e_f"), "a%20b%2Fc-d.e_f");
    }

    #[test]
    fn debug_redacts_secrets() {
        let mut o = RemoteOptions::new("http://x");
        o.password = Some("hunter2".into());
        o.bearer_token = Some("tok".into());
        let d = format!("{o:?}");
        assert!(!d.contains("hunter2") && !d.contains("tok\""), "{d}");
    }
}
