//! The embedded schema registry: subjects, versions, global ids and compatibility levels,
//! stored in the embedded log's compacted `_schemas` topic (format: [`crate::store`]) and
//! held in memory.
//!
//! - Open: replays `_schemas` from the start and rebuilds the state (the newest record per
//!   key wins, exactly as after compaction).
//! - Writes (register, deletes, config) are serialized by one mutex; each appends its
//!   records and calls `Log::flush(None)` — which fsyncs and keeps the pipeline's source
//!   checkpoint as it was — *before* the in-memory state changes and an id is returned. So
//!   an id handed out survives a crash, and a crash before the flush returns hands out
//!   nothing (the id is not reused either way: a failed write burns its id).
//! - Reads take a read lock and never touch the disk.
//! - Ids are global and start at 1; the same schema (Avro Parsing Canonical Form, or
//!   normalised JSON, plus references) has one id whatever the subject. A new version of a
//!   subject is max(version, including soft-deleted ones) + 1.
//! - Compatibility: the subject's level, else the global one (`PUT /config`), else the
//!   default given at open (BACKWARD unless configured). Checked with
//!   [`cdc_schemas::compat::check_compatibility`] against the subject's non-deleted
//!   versions (the latest only, or all for `*_TRANSITIVE`). JSON schemas are stored and
//!   deduplicated but not compatibility-checked (no JSON Schema checker yet): a warning is
//!   logged. PROTOBUF is refused as an invalid schema.
//!
//! Errors with Confluent codes that [`RegistryError`] has no variant for (40404–40408) are
//! `RegistryError::Other` with that code; see [`codes`].
//!
//! This file is the public API: locking, and each call as a plan from the state followed
//! by a commit. `state` holds the in-memory state and its rules (what a record changes,
//! what a write takes or why it is refused) and does no I/O; `persist` owns the
//! `_schemas` topic (replay at open, durable commits).

mod persist;
mod state;

use std::sync::{Arc, Mutex, RwLock};

use cdc_log::{Log, Topic};
use cdc_schemas::compat::CompatibilityLevel;
use cdc_schemas::registry::{
    RegisteredSchema, RegistryError, RegistryFuture, Schema, SchemaRegistry, VersionRef,
};

use crate::store::{ConfigValue, Key};
use state::{compat_problems, registered, Registration, State, VersionEntry};

/// Confluent error codes without their own [`RegistryError`] variant.
pub mod codes {
    pub const SUBJECT_SOFT_DELETED: u32 = 40404;
    pub const SUBJECT_NOT_SOFT_DELETED: u32 = 40405;
    pub const VERSION_SOFT_DELETED: u32 = 40406;
    pub const VERSION_NOT_SOFT_DELETED: u32 = 40407;
    pub const SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED: u32 = 40408;
    pub const STORE_ERROR: u32 = 50001;
}

fn other(status: u16, code: u32, message: String) -> RegistryError {
    RegistryError::Other {
        status,
        code,
        message,
    }
}

/// Options of [`EmbeddedRegistry::open_with`].
#[derive(Clone, Debug, Default)]
pub struct EmbeddedOptions {
    /// The level used when neither the subject nor the global config sets one.
    pub default_compatibility: CompatibilityLevel,
}

struct Inner {
    log: Log,
    topic: Topic,
    state: RwLock<State>,
    writer: Mutex<()>,
    default_level: CompatibilityLevel,
}

/// The embedded registry. Cheap to clone (a shared handle); `Send + Sync`.
#[derive(Clone)]
pub struct EmbeddedRegistry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EmbeddedRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.read();
        f.debug_struct("EmbeddedRegistry")
            .field("subjects", &s.subjects.len())
            .field("ids", &s.ids.len())
            .field("next_id", &s.next_id)
            .finish()
    }
}

impl EmbeddedRegistry {
    /// Opens (creating if needed) the registry stored in `log`, default level BACKWARD.
    pub fn open(log: Log) -> Result<EmbeddedRegistry, RegistryError> {
        Self::open_with(log, EmbeddedOptions::default())
    }

    /// Opens the registry stored in `log`: creates the compacted `_schemas` topic if
    /// missing, then replays it. Blocking (disk reads); call it before serving.
    pub fn open_with(
        log: Log,
        options: EmbeddedOptions,
    ) -> Result<EmbeddedRegistry, RegistryError> {
        let (topic, state) = persist::load(&log)?;
        Ok(EmbeddedRegistry {
            inner: Arc::new(Inner {
                log,
                topic,
                state: RwLock::new(state),
                writer: Mutex::new(()),
                default_level: options.default_compatibility,
            }),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.inner.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn writer(&self) -> std::sync::MutexGuard<'_, ()> {
        self.inner.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `schema` under `subject` (blocking: may fsync). See [`SchemaRegistry::register`].
    pub fn register_sync(
        &self,
        subject: &str,
        schema: &Schema,
    ) -> Result<RegisteredSchema, RegistryError> {
        if subject.is_empty() || subject.chars().any(|c| c.is_control()) {
            return Err(RegistryError::InvalidSchema {
                reason: format!("invalid subject name {subject:?}"),
            });
        }
        let _w = self.writer();
        let plan = self
            .read()
            .plan_register(subject, schema, self.inner.default_level)?;
        let (writes, id, version, new_key) = match plan {
            Registration::Exists(r) => return Ok(r),
            Registration::New {
                writes,
                id,
                version,
                new_key,
            } => (writes, id, version, new_key),
        };
        let is_new = new_key.is_some();
        self.commit(&writes, new_key)?;
        tracing::info!(
            subject,
            version,
            id,
            new_id = is_new,
            "registered a schema version"
        );
        let state = self.read();
        let e = &state.subjects[subject][&version];
        Ok(registered(subject, version, e))
    }

    /// Finds `schema` among `subject`'s versions: 40401 if the subject does not exist
    /// (or is soft-deleted and `include_deleted` is false), 40403 if the schema is not
    /// one of its versions.
    pub fn lookup_sync(
        &self,
        subject: &str,
        schema: &Schema,
        include_deleted: bool,
    ) -> Result<RegisteredSchema, RegistryError> {
        let state = self.read();
        let vs = state.subject_versions(subject, include_deleted)?;
        let parsed = state.parse(schema)?;
        let id = state.by_key.get(&parsed.key).copied();
        // Newest matching version first (a schema can be re-registered after a delete).
        vs.iter()
            .rev()
            .find(|(_, e)| Some(e.id) == id && (include_deleted || !e.deleted))
            .map(|(v, e)| registered(subject, *v, e))
            .ok_or(RegistryError::SchemaNotFound { id: 0 })
    }

    /// The schema with global id `id` (also when only soft-deleted versions hold it).
    pub fn schema_by_id_sync(&self, id: u32) -> Result<Schema, RegistryError> {
        self.read()
            .ids
            .get(&id)
            .map(|s| (**s).clone())
            .ok_or(RegistryError::SchemaNotFound { id })
    }

    /// The (subject, version) pairs holding id `id`.
    pub fn subject_versions_for_id(
        &self,
        id: u32,
        include_deleted: bool,
    ) -> Result<Vec<(String, u32)>, RegistryError> {
        let state = self.read();
        if !state.ids.contains_key(&id) {
            return Err(RegistryError::SchemaNotFound { id });
        }
        Ok(state
            .subjects
            .iter()
            .flat_map(|(s, vs)| {
                vs.iter()
                    .filter(|(_, e)| e.id == id && (include_deleted || !e.deleted))
                    .map(move |(v, _)| (s.clone(), *v))
            })
            .collect())
    }

    /// Every subject with a live version (and soft-deleted ones with `include_deleted`).
    pub fn subjects(&self, include_deleted: bool) -> Vec<String> {
        self.read()
            .subjects
            .iter()
            .filter(|(_, vs)| include_deleted || vs.values().any(|e| !e.deleted))
            .map(|(s, _)| s.clone())
            .collect()
    }

    /// The version numbers of `subject`.
    pub fn versions(
        &self,
        subject: &str,
        include_deleted: bool,
    ) -> Result<Vec<u32>, RegistryError> {
        let state = self.read();
        let vs: Vec<u32> = state
            .subjects
            .get(subject)
            .map(|vs| {
                vs.iter()
                    .filter(|(_, e)| include_deleted || !e.deleted)
                    .map(|(v, _)| *v)
                    .collect()
            })
            .unwrap_or_default();
        if vs.is_empty() {
            return Err(RegistryError::SubjectNotFound {
                subject: subject.to_string(),
            });
        }
        Ok(vs)
    }

    /// One version of `subject`.
    pub fn version_sync(
        &self,
        subject: &str,
        version: VersionRef,
        include_deleted: bool,
    ) -> Result<RegisteredSchema, RegistryError> {
        let state = self.read();
        let (v, e) = state.find_version(subject, version, include_deleted)?;
        Ok(registered(subject, v, e))
    }

    /// Problems `schema` would have against version `version` of `subject` under the
    /// subject's level (`None`: against the versions the level looks at, as registering
    /// would). Empty: compatible.
    pub fn test_compatibility(
        &self,
        subject: &str,
        version: Option<VersionRef>,
        schema: &Schema,
    ) -> Result<Vec<String>, RegistryError> {
        let state = self.read();
        let parsed = state.parse(schema)?;
        let level = state.level(Some(subject), self.inner.default_level);
        let previous: Vec<&VersionEntry> = match version {
            Some(v) => vec![state.find_version(subject, v, false)?.1],
            None => state
                .live_versions(subject)
                .into_iter()
                .map(|(_, e)| e)
                .collect(),
        };
        compat_problems(&state, level, schema, &parsed, &previous)
    }

    /// The level set on `subject` itself, if any.
    pub fn subject_compatibility(&self, subject: &str) -> Option<CompatibilityLevel> {
        self.read().configs.get(subject).copied()
    }

    /// The global level (set, or the default).
    pub fn global_compatibility(&self) -> CompatibilityLevel {
        self.read().level(None, self.inner.default_level)
    }

    /// The level in force for `subject` (its own, else the global one).
    pub fn effective_compatibility(&self, subject: Option<&str>) -> CompatibilityLevel {
        self.read().level(subject, self.inner.default_level)
    }

    /// Sets the level of `subject`, or the global one (blocking: fsync).
    pub fn set_compatibility_sync(
        &self,
        subject: Option<&str>,
        level: CompatibilityLevel,
    ) -> Result<(), RegistryError> {
        let _w = self.writer();
        let value = serde_json::to_vec(&ConfigValue {
            compatibility_level: level.as_str().to_string(),
        })
        .expect("json");
        self.commit(
            &[(
                Key::Config {
                    subject: subject.map(str::to_string),
                },
                Some(value),
            )],
            None,
        )
    }

    /// Removes the subject's own level (it falls back to the global one); returns the
    /// level it had. 40408-style error when it had none.
    pub fn delete_compatibility(&self, subject: &str) -> Result<CompatibilityLevel, RegistryError> {
        let _w = self.writer();
        let Some(old) = self.subject_compatibility(subject) else {
            return Err(other(
                404,
                codes::SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED,
                format!("Subject '{subject}' does not have subject-level compatibility configured"),
            ));
        };
        self.commit(
            &[(
                Key::Config {
                    subject: Some(subject.to_string()),
                },
                None,
            )],
            None,
        )?;
        Ok(old)
    }

    /// Removes the global level (back to the default given at open); returns the level
    /// that was in force.
    pub fn delete_global_compatibility(&self) -> Result<CompatibilityLevel, RegistryError> {
        let _w = self.writer();
        let old = self.global_compatibility();
        if self.read().global.is_some() {
            self.commit(&[(Key::Config { subject: None }, None)], None)?;
        }
        Ok(old)
    }

    /// Deletes every version of `subject`: soft (marks them deleted; they stay readable
    /// with `deleted=true` and keep their ids) or, after a soft delete, permanent (removes
    /// them). Returns the version numbers deleted.
    pub fn delete_subject(
        &self,
        subject: &str,
        permanent: bool,
    ) -> Result<Vec<u32>, RegistryError> {
        let _w = self.writer();
        let (writes, versions) = self.read().plan_delete_subject(subject, permanent)?;
        self.commit(&writes, None)?;
        tracing::info!(subject, permanent, ?versions, "deleted subject");
        Ok(versions)
    }

    /// Deletes one version of `subject` (soft, or permanent after a soft delete). Returns
    /// the version number deleted.
    pub fn delete_version(
        &self,
        subject: &str,
        version: VersionRef,
        permanent: bool,
    ) -> Result<u32, RegistryError> {
        let _w = self.writer();
        let (writes, v) = self
            .read()
            .plan_delete_version(subject, version, permanent)?;
        self.commit(&writes, None)?;
        tracing::info!(subject, version = v, permanent, "deleted version");
        Ok(v)
    }

    /// The log the registry is stored in.
    pub fn log(&self) -> &Log {
        &self.inner.log
    }
}

/// Runs a blocking registry call off the async worker threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, RegistryError> + Send + 'static,
) -> Result<T, RegistryError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RegistryError::Storage {
            detail: format!("registry task failed: {e}"),
            transient: false,
        })?
}

impl SchemaRegistry for EmbeddedRegistry {
    fn register<'a>(&'a self, subject: &'a str, schema: &'a Schema) -> RegistryFuture<'a, u32> {
        let this = self.clone();
        let subject = subject.to_string();
        let schema = schema.clone();
        Box::pin(async move {
            blocking(move || this.register_sync(&subject, &schema).map(|r| r.id)).await
        })
    }

    fn lookup<'a>(
        &'a self,
        subject: &'a str,
        schema: &'a Schema,
    ) -> RegistryFuture<'a, Option<RegisteredSchema>> {
        Box::pin(async move {
            match self.lookup_sync(subject, schema, false) {
                Ok(r) => Ok(Some(r)),
                Err(
                    RegistryError::SubjectNotFound { .. } | RegistryError::SchemaNotFound { .. },
                ) => Ok(None),
                Err(e) => Err(e),
            }
        })
    }

    fn schema_by_id(&self, id: u32) -> RegistryFuture<'_, Schema> {
        Box::pin(async move { self.schema_by_id_sync(id) })
    }

    fn version<'a>(
        &'a self,
        subject: &'a str,
        version: VersionRef,
    ) -> RegistryFuture<'a, RegisteredSchema> {
        Box::pin(async move { self.version_sync(subject, version, false) })
    }

    fn compatibility<'a>(
        &'a self,
        subject: Option<&'a str>,
    ) -> RegistryFuture<'a, CompatibilityLevel> {
        Box::pin(async move { Ok(self.effective_compatibility(subject)) })
    }

    fn set_compatibility<'a>(
        &'a self,
        subject: Option<&'a str>,
        level: CompatibilityLevel,
    ) -> RegistryFuture<'a, ()> {
        let this = self.clone();
        let subject = subject.map(str::to_string);
        Box::pin(async move {
            blocking(move || this.set_compatibility_sync(subject.as_deref(), level)).await
        })
    }

    fn subject_compatibility<'a>(
        &'a self,
        subject: &'a str,
    ) -> RegistryFuture<'a, Option<CompatibilityLevel>> {
        Box::pin(async move { Ok(EmbeddedRegistry::subject_compatibility(self, subject)) })
    }

    fn delete_subject_compatibility<'a>(&'a self, subject: &'a str) -> RegistryFuture<'a, ()> {
        let this = self.clone();
        let subject = subject.to_string();
        Box::pin(async move {
            blocking(move || match this.delete_compatibility(&subject) {
                Ok(_) => Ok(()),
                Err(RegistryError::Other { code, .. })
                    if code == codes::SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED =>
                {
                    Ok(())
                }
                Err(e) => Err(e),
            })
            .await
        })
    }
}
