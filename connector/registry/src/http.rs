//! Confluent Schema Registry's REST API over an [`EmbeddedRegistry`].
//!
//! Endpoints (paths relative to where the router is mounted):
//!
//! | method | path | answer |
//! |---|---|---|
//! | GET | `/` | `{}` |
//! | GET | `/subjects` (`?deleted=true`, `?subjectPrefix=`) | `["s", …]` |
//! | GET | `/subjects/{s}/versions` (`?deleted=true`) | `[1, 2]` |
//! | GET | `/subjects/{s}/versions/{v\|latest}` (`?deleted=true`) | `{"subject","version","id","schema"[,"schemaType","references"]}` |
//! | GET | `/subjects/{s}/versions/{v\|latest}/schema` | the schema text itself |
//! | POST | `/subjects/{s}/versions` | register: `{"id": N}` |
//! | POST | `/subjects/{s}` (`?deleted=true`) | lookup: `{"subject","version","id","schema"}`; 40401 / 40403 |
//! | DELETE | `/subjects/{s}` (`?permanent=true`) | `[versions deleted]`; 40404 / 40405 |
//! | DELETE | `/subjects/{s}/versions/{v\|latest}` (`?permanent=true`) | `N`; 40406 / 40407 |
//! | GET | `/schemas/ids/{id}` | `{"schema"[,"schemaType","references"]}` |
//! | GET | `/schemas/ids/{id}/schema` | the schema text |
//! | GET | `/schemas/ids/{id}/subjects` | `["s", …]` |
//! | GET | `/schemas/ids/{id}/versions` | `[{"subject","version"}]` |
//! | GET | `/schemas/types` | `["AVRO","JSON"]` |
//! | POST | `/compatibility/subjects/{s}/versions[/{v\|latest}]` (`?verbose=true`) | `{"is_compatible": b[,"messages"]}` |
//! | GET/PUT/DELETE | `/config` | GET `{"compatibilityLevel"}`, PUT `{"compatibility"}` → same |
//! | GET/PUT/DELETE | `/config/{s}` (GET `?defaultToGlobal=true`) | as above; 40408 when the subject has no level |
//! | GET | `/mode`, `/mode/{s}` | `{"mode":"READWRITE"}` |
//! | GET | `/associations/...` | 404 `{"error_code":404,…}` (feature absent; clients fall back) |
//!
//! Answers are `application/vnd.schemaregistry.v1+json`; request bodies are read as JSON
//! whatever their content type (`application/vnd.schemaregistry.v1+json`,
//! `application/vnd.schemaregistry+json`, `application/json`). Errors are Confluent's
//! `{"error_code": N, "message": "…"}` with the HTTP status its code implies (40401 → 404,
//! 42201 → 422, 409 → 409, 50001 → 500).

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use cdc_schemas::compat::CompatibilityLevel;
use cdc_schemas::registry::{
    RegisteredSchema, RegistryError, Schema, SchemaReference, SchemaType, VersionRef,
};
use serde::Deserialize;
use serde_json::{json, Value as Json};

use crate::embedded::EmbeddedRegistry;

/// The content type of every answer.
pub const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// The API over `registry` with a Confluent-style 404 fallback: serve it at `/`
/// (Confluent clients expect the API at the root of their URL).
pub fn router(registry: EmbeddedRegistry) -> Router {
    routes(registry).fallback(not_found)
}

/// The API's routes without a fallback, to merge or nest into a bigger router (the
/// connector's admin server mounts them at `/` and under `/registry`).
pub fn routes(registry: EmbeddedRegistry) -> Router {
    Router::new()
        .route("/", get(root))
        .merge(api_routes(registry))
}

/// [`routes`] without `GET /` (`{}`), for a server that answers its root itself.
pub fn api_routes(registry: EmbeddedRegistry) -> Router {
    Router::new()
        .route("/subjects", get(list_subjects))
        .route("/subjects/{subject}", post(lookup).delete(delete_subject))
        .route(
            "/subjects/{subject}/versions",
            get(list_versions).post(register),
        )
        .route(
            "/subjects/{subject}/versions/{version}",
            get(get_version).delete(delete_version),
        )
        .route(
            "/subjects/{subject}/versions/{version}/schema",
            get(get_version_schema),
        )
        .route("/schemas/types", get(schema_types))
        .route("/schemas/ids/{id}", get(get_by_id))
        .route("/schemas/ids/{id}/schema", get(get_by_id_raw))
        .route("/schemas/ids/{id}/subjects", get(id_subjects))
        .route("/schemas/ids/{id}/versions", get(id_versions))
        .route(
            "/compatibility/subjects/{subject}/versions",
            post(compat_all),
        )
        .route(
            "/compatibility/subjects/{subject}/versions/{version}",
            post(compat_version),
        )
        .route(
            "/config",
            get(get_global_config)
                .put(put_global_config)
                .delete(delete_global_config),
        )
        .route(
            "/config/{subject}",
            get(get_subject_config)
                .put(put_subject_config)
                .delete(delete_subject_config),
        )
        .route("/mode", get(mode))
        .route("/mode/{subject}", get(mode))
        .route("/associations", get(no_associations))
        .route("/associations/{*rest}", get(no_associations))
        .with_state(registry)
}

/// An answer in the registry's content type.
pub struct ApiJson(pub StatusCode, pub Json);

impl IntoResponse for ApiJson {
    fn into_response(self) -> Response {
        let mut r = (self.0, self.1.to_string()).into_response();
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
        r
    }
}

fn ok(v: Json) -> ApiJson {
    ApiJson(StatusCode::OK, v)
}

/// A Confluent error body.
pub struct ApiError {
    pub status: StatusCode,
    pub code: u32,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, code: u32, message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            code,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        ApiJson(
            self.status,
            json!({"error_code": self.code, "message": self.message}),
        )
        .into_response()
    }
}

/// The HTTP status Confluent uses for an error code.
pub fn status_for_code(code: u32) -> u16 {
    match code {
        c if c >= 10000 => (c / 100) as u16,
        c => c as u16,
    }
}

impl From<RegistryError> for ApiError {
    fn from(e: RegistryError) -> ApiError {
        let code = e.error_code();
        let message = match &e {
            RegistryError::SubjectNotFound { subject } => format!("Subject '{subject}' not found."),
            RegistryError::VersionNotFound { version, .. } => {
                format!("Version {version} not found.")
            }
            RegistryError::SchemaNotFound { id: 0 } => "Schema not found".to_string(),
            RegistryError::SchemaNotFound { id } => format!("Schema {id} not found"),
            RegistryError::Incompatible {
                subject, messages, ..
            } => format!(
                "Schema being registered is incompatible with an earlier schema for subject \"{subject}\", details: [{}]",
                messages.join(", ")
            ),
            RegistryError::InvalidSchema { reason } => format!("Invalid schema: {reason}"),
            RegistryError::InvalidVersion { version } => format!(
                "The specified version '{version}' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\""
            ),
            RegistryError::InvalidCompatibilityLevel { .. } => "Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, forward_transitive, and full_transitive".to_string(),
            RegistryError::Other { message, .. } => message.clone(),
            other => other.to_string(),
        };
        let status = match &e {
            RegistryError::Other { status, .. } => *status,
            _ => status_for_code(code),
        };
        ApiError::new(status, code, message)
    }
}

type ApiResult = Result<ApiJson, ApiError>;

#[derive(Deserialize, Default)]
struct Flags {
    #[serde(default)]
    deleted: Option<String>,
    #[serde(default)]
    permanent: Option<String>,
    #[serde(default)]
    verbose: Option<String>,
    #[serde(default, rename = "defaultToGlobal")]
    default_to_global: Option<String>,
    #[serde(default, rename = "subjectPrefix")]
    subject_prefix: Option<String>,
}

fn truthy(v: &Option<String>) -> bool {
    v.as_deref().is_some_and(|s| s.eq_ignore_ascii_case("true"))
}

impl Flags {
    fn deleted(&self) -> bool {
        truthy(&self.deleted)
    }
    fn permanent(&self) -> bool {
        truthy(&self.permanent)
    }
}

/// `latest`, `-1` or a number in 1..=2^31-1.
pub fn parse_version(s: &str) -> Result<VersionRef, RegistryError> {
    if s == "latest" || s == "-1" {
        return Ok(VersionRef::Latest);
    }
    match s.parse::<u32>() {
        Ok(n) if n >= 1 && n <= i32::MAX as u32 => Ok(VersionRef::Number(n)),
        _ => Err(RegistryError::InvalidVersion {
            version: s.to_string(),
        }),
    }
}

fn parse_id(s: &str) -> Result<u32, ApiError> {
    s.parse::<u32>()
        .map_err(|_| ApiError::new(404, 40403, format!("Schema {s} not found")))
}

#[derive(Deserialize)]
struct RefBody {
    name: String,
    subject: String,
    version: i64,
}

#[derive(Deserialize)]
struct SchemaBody {
    schema: Option<String>,
    #[serde(rename = "schemaType")]
    schema_type: Option<String>,
    #[serde(default)]
    references: Option<Vec<RefBody>>,
}

/// Parses a request body carrying a schema (register, lookup, compatibility).
fn schema_from_body(body: &[u8]) -> Result<Schema, ApiError> {
    let b: SchemaBody = serde_json::from_slice(body)
        .map_err(|e| ApiError::new(422, 42201, format!("Invalid schema: request body: {e}")))?;
    let text = b
        .schema
        .ok_or_else(|| ApiError::new(422, 42201, "Invalid schema: the body has no \"schema\""))?;
    let schema_type = match b
        .schema_type
        .as_deref()
        .map(str::to_ascii_uppercase)
        .as_deref()
    {
        None | Some("AVRO") | Some("") => SchemaType::Avro,
        Some("JSON") => SchemaType::Json,
        Some("PROTOBUF") => SchemaType::Protobuf,
        Some(other) => {
            return Err(ApiError::new(
                422,
                42201,
                format!("Invalid schema: unknown schemaType {other:?}"),
            ))
        }
    };
    let references = b
        .references
        .unwrap_or_default()
        .into_iter()
        .map(|r| {
            let version = u32::try_from(r.version).map_err(|_| {
                ApiError::new(
                    422,
                    42202,
                    format!("Invalid version {} in reference {:?}", r.version, r.name),
                )
            })?;
            Ok(SchemaReference {
                name: r.name,
                subject: r.subject,
                version,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(Schema {
        schema_type,
        text,
        references,
    })
}

fn schema_fields(obj: &mut serde_json::Map<String, Json>, s: &Schema) {
    if s.schema_type != SchemaType::Avro {
        obj.insert("schemaType".into(), json!(s.schema_type.as_str()));
    }
    if !s.references.is_empty() {
        obj.insert(
            "references".into(),
            Json::Array(
                s.references
                    .iter()
                    .map(|r| json!({"name": r.name, "subject": r.subject, "version": r.version}))
                    .collect(),
            ),
        );
    }
}

fn registered_json(r: &RegisteredSchema) -> Json {
    let mut obj = serde_json::Map::new();
    obj.insert("subject".into(), json!(r.subject));
    obj.insert("version".into(), json!(r.version));
    obj.insert("id".into(), json!(r.id));
    schema_fields(&mut obj, &r.schema);
    obj.insert("schema".into(), json!(r.schema.text));
    Json::Object(obj)
}

/// Runs a blocking (fsyncing) registry write off the async workers.
async fn write<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, RegistryError> + Send + 'static,
) -> Result<T, ApiError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(ApiError::from),
        Err(e) => Err(ApiError::new(
            500,
            50001,
            format!("registry task failed: {e}"),
        )),
    }
}

async fn root() -> ApiJson {
    ok(json!({}))
}

/// Confluent's answer to an unknown path.
pub async fn not_found() -> ApiError {
    ApiError::new(404, 404, "HTTP 404 Not Found")
}

async fn no_associations() -> ApiError {
    // What Confluent's registry answers for a resource it does not serve: clients that
    // probe associations first treat a 404 as "feature absent" and use the topic-name
    // subject strategy.
    ApiError::new(404, 404, "HTTP 404 Not Found")
}

async fn mode() -> ApiJson {
    ok(json!({"mode": "READWRITE"}))
}

async fn schema_types() -> ApiJson {
    ok(json!(["JSON", "AVRO"]))
}

async fn list_subjects(State(r): State<EmbeddedRegistry>, Query(f): Query<Flags>) -> ApiJson {
    let mut subjects = r.subjects(f.deleted());
    if let Some(p) = f
        .subject_prefix
        .as_deref()
        .filter(|p| !p.is_empty() && *p != ":*:")
    {
        subjects.retain(|s| s.starts_with(p));
    }
    ok(json!(subjects))
}

async fn list_versions(
    State(r): State<EmbeddedRegistry>,
    Path(subject): Path<String>,
    Query(f): Query<Flags>,
) -> ApiResult {
    Ok(ok(json!(r.versions(&subject, f.deleted())?)))
}

async fn get_version(
    State(r): State<EmbeddedRegistry>,
    Path((subject, version)): Path<(String, String)>,
    Query(f): Query<Flags>,
) -> ApiResult {
    let v = parse_version(&version)?;
    Ok(ok(registered_json(&r.version_sync(
        &subject,
        v,
        f.deleted(),
    )?)))
}

async fn get_version_schema(
    State(r): State<EmbeddedRegistry>,
    Path((subject, version)): Path<(String, String)>,
    Query(f): Query<Flags>,
) -> Result<Response, ApiError> {
    let v = parse_version(&version)?;
    let s = r.version_sync(&subject, v, f.deleted())?;
    Ok(raw(s.schema.text))
}

fn raw(text: String) -> Response {
    let mut resp = text.into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    resp
}

async fn register(
    State(r): State<EmbeddedRegistry>,
    Path(subject): Path<String>,
    body: Bytes,
) -> ApiResult {
    let schema = schema_from_body(&body)?;
    let reg = write(move || r.register_sync(&subject, &schema)).await?;
    Ok(ok(json!({"id": reg.id})))
}

async fn lookup(
    State(r): State<EmbeddedRegistry>,
    Path(subject): Path<String>,
    Query(f): Query<Flags>,
    body: Bytes,
) -> ApiResult {
    let schema = schema_from_body(&body)?;
    Ok(ok(registered_json(&r.lookup_sync(
        &subject,
        &schema,
        f.deleted(),
    )?)))
}

async fn delete_subject(
    State(r): State<EmbeddedRegistry>,
    Path(subject): Path<String>,
    Query(f): Query<Flags>,
) -> ApiResult {
    let permanent = f.permanent();
    let versions = write(move || r.delete_subject(&subject, permanent)).await?;
    Ok(ok(json!(versions)))
}

async fn delete_version(
    State(r): State<EmbeddedRegistry>,
    Path((subject, version)): Path<(String, String)>,
    Query(f): Query<Flags>,
) -> ApiResult {
    let v = parse_version(&version)?;
    let permanent = f.permanent();
    let deleted = write(move || r.delete_version(&subject, v, permanent)).await?;
    Ok(ok(json!(deleted)))
}

fn id_schema_json(s: &Schema) -> Json {
    let mut obj = serde_json::Map::new();
    obj.insert("schema".into(), json!(s.text));
    schema_fields(&mut obj, s);
    Json::Object(obj)
}

async fn get_by_id(State(r): State<EmbeddedRegistry>, Path(id): Path<String>) -> ApiResult {
    let id = parse_id(&id)?;
    Ok(ok(id_schema_json(&r.schema_by_id_sync(id)?)))
}

async fn get_by_id_raw(
    State(r): State<EmbeddedRegistry>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    Ok(raw(r.schema_by_id_sync(id)?.text))
}

async fn id_subjects(
    State(r): State<EmbeddedRegistry>,
    Path(id): Path<String>,
    Query(f): Query<Flags>,
) -> ApiResult {
    let id = parse_id(&id)?;
    let mut subjects: Vec<String> = r
        .subject_versions_for_id(id, f.deleted())?
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    subjects.dedup();
    Ok(ok(json!(subjects)))
}

async fn id_versions(
    State(r): State<EmbeddedRegistry>,
    Path(id): Path<String>,
    Query(f): Query<Flags>,
) -> ApiResult {
    let id = parse_id(&id)?;
    let pairs: Vec<Json> = r
        .subject_versions_for_id(id, f.deleted())?
        .into_iter()
        .map(|(s, v)| json!({"subject": s, "version": v}))
        .collect();
    Ok(ok(Json::Array(pairs)))
}

fn compat_answer(problems: Vec<String>, verbose: bool) -> ApiJson {
    if verbose {
        ok(json!({"is_compatible": problems.is_empty(), "messages": problems}))
    } else {
        ok(json!({"is_compatible": problems.is_empty()}))
    }
}

async fn compat_version(
    State(r): State<EmbeddedRegistry>,
    Path((subject, version)): Path<(String, String)>,
    Query(f): Query<Flags>,
    body: Bytes,
) -> ApiResult {
    let v = parse_version(&version)?;
    let schema = schema_from_body(&body)?;
    let problems = r.test_compatibility(&subject, Some(v), &schema)?;
    Ok(compat_answer(problems, truthy(&f.verbose)))
}

async fn compat_all(
    State(r): State<EmbeddedRegistry>,
    Path(subject): Path<String>,
    Query(f): Query<Flags>,
    body: Bytes,
) -> ApiResult {
    let schema = schema_from_body(&body)?;
    let problems = r.test_compatibility(&subject, None, &schema)?;
    Ok(compat_answer(problems, truthy(&f.verbose)))
}

fn level_from_body(body: &[u8]) -> Result<CompatibilityLevel, ApiError> {
    let v: Json = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            422,
            42203,
            format!("Invalid compatibility level: request body: {e}"),
        )
    })?;
    let s = v
        .get("compatibility")
        .or_else(|| v.get("compatibilityLevel"))
        .and_then(Json::as_str)
        .unwrap_or("");
    s.parse().map_err(|_| {
        ApiError::from(RegistryError::InvalidCompatibilityLevel {
            level: s.to_string(),
        })
    })
}

async fn get_global_config(State(r): State<EmbeddedRegistry>) -> ApiJson {
    ok(json!({"compatibilityLevel": r.global_compatibility().as_str()}))
}

async fn put_global_config(State(r): State<EmbeddedRegistry>, body: Bytes) -> ApiResult {
    let level = level_from_body(&body)?;
    write(move || r.set_compatibility_sync(None, level)).await?;
    Ok(ok(json!({"compatibility": level.as_str()})))
}

async fn delete_global_config(State(r): State<EmbeddedRegistry>) -> ApiResult {
    let old = write(move || r.delete_global_compatibility()).await?;
    Ok(ok(json!({"compatibilityLevel": old.as_str()})))
}

async fn get_subject_config(
    State(r): State<EmbeddedRegistry>,
    Path(subject): Path<String>,
    Query(f): Query<Flags>,
) -> ApiResult {
    match r.subject_compatibility(&subject) {
        Some(l) => Ok(ok(json!({"compatibilityLevel": l.as_str()}))),
        None if truthy(&f.default_to_global) => Ok(ok(
            json!({"compatibilityLevel": r.global_compatibility().as_str()}),
        )),
        None => Err(ApiError::new(
            404,
            crate::embedded::codes::SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED,
            format!("Subject '{subject}' does not have subject-level compatibility configured"),
        )),
    }
}

async fn put_subject_config(
    State(r): State<EmbeddedRegistry>,
    Path(subject): Path<String>,
    body: Bytes,
) -> ApiResult {
    let level = level_from_body(&body)?;
    write(move || r.set_compatibility_sync(Some(&subject), level)).await?;
    Ok(ok(json!({"compatibility": level.as_str()})))
}

async fn delete_subject_config(
    State(r): State<EmbeddedRegistry>,
    Path(subject): Path<String>,
) -> ApiResult {
    let old = write(move || r.delete_compatibility(&subject)).await?;
    Ok(ok(json!({"compatibilityLevel": old.as_str()})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_statuses() {
        assert_eq!(parse_version("latest").unwrap(), VersionRef::Latest);
        assert_eq!(parse_version("-1").unwrap(), VersionRef::Latest);
        assert_eq!(parse_version("3").unwrap(), VersionRef::Number(3));
        assert!(parse_version("0").is_err());
        assert!(parse_version("x").is_err());
        assert!(parse_version("2147483648").is_err());
        assert_eq!(status_for_code(40401), 404);
        assert_eq!(status_for_code(42201), 422);
        assert_eq!(status_for_code(409), 409);
        assert_eq!(status_for_code(50001), 500);
    }
}
