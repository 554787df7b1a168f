//! The schema registry contract: subjects, versions and ids, as Confluent's Schema Registry
//! defines them, behind one trait with two implementations (embedded, stored in the log;
//! remote, any Confluent-compatible registry over HTTP).
//!
//! The pipeline's use: before the first record of a new table schema version is appended,
//! it calls [`SchemaRegistry::register`] for `<topic>-key` and `<topic>-value`. An
//! [`RegistryError::Incompatible`] stops that table: nothing is appended or acknowledged
//! past it. [`RegistryError::is_transient`] errors are retried with backoff.
//!
//! Invariants every implementation keeps: ids are global, stable and never reused; the same
//! schema (by canonical form) registered again under a subject returns its existing id and
//! version; a subject's versions count up from 1.

use std::future::Future;
use std::pin::Pin;

use crate::compat::CompatibilityLevel;

/// A boxed future, so the trait can be used as `dyn SchemaRegistry`.
pub type RegistryFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, RegistryError>> + Send + 'a>>;

/// The kind of a schema (Confluent's `schemaType`; absent means AVRO).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum SchemaType {
    #[default]
    Avro,
    Json,
    Protobuf,
}

impl SchemaType {
    pub fn as_str(self) -> &'static str {
        match self {
            SchemaType::Avro => "AVRO",
            SchemaType::Json => "JSON",
            SchemaType::Protobuf => "PROTOBUF",
        }
    }
}

/// A reference from one schema to another registered one (Confluent's `references`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SchemaReference {
    pub name: String,
    pub subject: String,
    pub version: u32,
}

/// A schema as registered: its type, its text, its references.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Schema {
    pub schema_type: SchemaType,
    pub text: String,
    pub references: Vec<SchemaReference>,
}

impl Schema {
    pub fn avro(text: impl Into<String>) -> Self {
        Schema {
            schema_type: SchemaType::Avro,
            text: text.into(),
            references: Vec::new(),
        }
    }
}

/// One version of a subject.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisteredSchema {
    pub subject: String,
    pub version: u32,
    pub id: u32,
    pub schema: Schema,
}

/// Which version of a subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionRef {
    Latest,
    Number(u32),
}

/// What went wrong, with Confluent's error codes where they exist.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// 409: the new schema breaks the subject's compatibility rule.
    #[error(
        "schema for subject {subject} is incompatible under {level}: {}. Ways out: make the change compatible (e.g. give new fields a default), change the subject's compatibility (PUT /config/{subject}), or route the table to a new topic",
        messages.join("; ")
    )]
    Incompatible {
        subject: String,
        level: CompatibilityLevel,
        messages: Vec<String>,
    },
    /// 40401
    #[error("subject {subject} not found")]
    SubjectNotFound { subject: String },
    /// 40402
    #[error("version {version} of subject {subject} not found")]
    VersionNotFound { subject: String, version: String },
    /// 40403
    #[error("schema id {id} not found")]
    SchemaNotFound { id: u32 },
    /// 42201
    #[error("invalid schema: {reason}")]
    InvalidSchema { reason: String },
    /// 42202
    #[error("invalid version {version}: use a positive number or \"latest\"")]
    InvalidVersion { version: String },
    /// 42203
    #[error("invalid compatibility level {level:?}: use NONE, BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL or FULL_TRANSITIVE")]
    InvalidCompatibilityLevel { level: String },
    /// 401/403 from a remote registry: definite.
    #[error("the schema registry refused our credentials: {detail}. Fix: check the registry's basic-auth user/password or bearer token")]
    Unauthorized { detail: String },
    /// Network failure, 5xx, timeout: transient.
    #[error("the schema registry is unavailable (will retry): {detail}")]
    Unavailable { detail: String },
    /// The registry's storage failed (embedded: the log).
    #[error("the schema registry's storage failed: {detail}")]
    Storage { detail: String, transient: bool },
    /// Anything else a remote registry answered.
    #[error("the schema registry answered {status} (error code {code}): {message}")]
    Other {
        status: u16,
        code: u32,
        message: String,
    },
}

impl RegistryError {
    /// True when retrying may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            RegistryError::Unavailable { .. } => true,
            RegistryError::Storage { transient, .. } => *transient,
            _ => false,
        }
    }

    /// Confluent's `error_code` for this error.
    pub fn error_code(&self) -> u32 {
        match self {
            RegistryError::Incompatible { .. } => 409,
            RegistryError::SubjectNotFound { .. } => 40401,
            RegistryError::VersionNotFound { .. } => 40402,
            RegistryError::SchemaNotFound { .. } => 40403,
            RegistryError::InvalidSchema { .. } => 42201,
            RegistryError::InvalidVersion { .. } => 42202,
            RegistryError::InvalidCompatibilityLevel { .. } => 42203,
            RegistryError::Unauthorized { .. } => 40101,
            RegistryError::Unavailable { .. } | RegistryError::Storage { .. } => 50001,
            RegistryError::Other { code, .. } => *code,
        }
    }
}

/// A schema registry.
pub trait SchemaRegistry: Send + Sync {
    /// Registers `schema` under `subject` after checking the subject's compatibility rule;
    /// returns the schema's global id (the existing one if it was registered before).
    fn register<'a>(&'a self, subject: &'a str, schema: &'a Schema) -> RegistryFuture<'a, u32>;

    /// The version of `subject` holding `schema`, if any (Confluent's `POST /subjects/{s}`).
    fn lookup<'a>(
        &'a self,
        subject: &'a str,
        schema: &'a Schema,
    ) -> RegistryFuture<'a, Option<RegisteredSchema>>;

    /// The schema with global id `id`.
    fn schema_by_id(&self, id: u32) -> RegistryFuture<'_, Schema>;

    /// One version of a subject.
    fn version<'a>(
        &'a self,
        subject: &'a str,
        version: VersionRef,
    ) -> RegistryFuture<'a, RegisteredSchema>;

    /// The compatibility level in force for `subject` (its own, else the global one).
    fn compatibility<'a>(
        &'a self,
        subject: Option<&'a str>,
    ) -> RegistryFuture<'a, CompatibilityLevel>;

    /// Sets the compatibility level of `subject`, or the global one.
    fn set_compatibility<'a>(
        &'a self,
        subject: Option<&'a str>,
        level: CompatibilityLevel,
    ) -> RegistryFuture<'a, ()>;

    /// The level set on `subject` itself; `None` when it has none and follows the global
    /// level (Confluent's `GET /config/{subject}` without `defaultToGlobal`).
    fn subject_compatibility<'a>(
        &'a self,
        subject: &'a str,
    ) -> RegistryFuture<'a, Option<CompatibilityLevel>>;

    /// Removes `subject`'s own level, so that it follows the global one again; not an
    /// error when it had none (Confluent's `DELETE /config/{subject}`).
    fn delete_subject_compatibility<'a>(&'a self, subject: &'a str) -> RegistryFuture<'a, ()>;
}
