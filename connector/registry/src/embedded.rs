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

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use cdc_log::{CleanupPolicy, Log, LogError, NewRecord, StartAt, Topic, TopicConfig};
use cdc_schemas::compat::{check_compatibility, CompatibilityLevel};
use cdc_schemas::registry::{
    RegisteredSchema, RegistryError, RegistryFuture, Schema, SchemaReference, SchemaRegistry,
    SchemaType, VersionRef,
};

use crate::canon::{self, CanonKey};
use crate::store::{
    ConfigValue, DeleteSubjectValue, Key, RefValue, SchemaValue, WatermarkValue, TOPIC,
};

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

#[derive(Clone, Debug)]
struct VersionEntry {
    id: u32,
    deleted: bool,
    schema: Arc<Schema>,
}

#[derive(Default)]
struct State {
    subjects: BTreeMap<String, BTreeMap<u32, VersionEntry>>,
    ids: HashMap<u32, Arc<Schema>>,
    by_key: HashMap<CanonKey, u32>,
    next_id: u32,
    configs: BTreeMap<String, CompatibilityLevel>,
    global: Option<CompatibilityLevel>,
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

fn storage(e: LogError) -> RegistryError {
    RegistryError::Storage {
        transient: e.is_transient(),
        detail: e.to_string(),
    }
}

fn parse_level(s: &str) -> Option<CompatibilityLevel> {
    s.parse().ok()
}

fn schema_type_from_str(s: &str) -> SchemaType {
    match s {
        "JSON" => SchemaType::Json,
        "PROTOBUF" => SchemaType::Protobuf,
        _ => SchemaType::Avro,
    }
}

/// One record to write: key and value (`None` = tombstone).
type Write = (Key, Option<Vec<u8>>);

impl State {
    /// Applies one `_schemas` record (replay and live writes share this).
    fn apply(&mut self, key: &Key, value: Option<&[u8]>) -> Result<(), String> {
        match key {
            Key::Schema { subject, version } => match value {
                None => {
                    let mut gone = None;
                    if let Some(vs) = self.subjects.get_mut(subject) {
                        gone = vs.remove(version).map(|e| e.id);
                        if vs.is_empty() {
                            self.subjects.remove(subject);
                        }
                    }
                    if let Some(id) = gone {
                        let used = self
                            .subjects
                            .values()
                            .any(|vs| vs.values().any(|e| e.id == id));
                        if !used {
                            self.ids.remove(&id);
                            self.by_key.retain(|_, v| *v != id);
                        }
                    }
                }
                Some(bytes) => {
                    let v: SchemaValue = serde_json::from_slice(bytes)
                        .map_err(|e| format!("bad SCHEMA value: {e}"))?;
                    let schema = Arc::new(Schema {
                        schema_type: schema_type_from_str(&v.schema_type),
                        text: v.schema,
                        references: v
                            .references
                            .into_iter()
                            .map(|r| SchemaReference {
                                name: r.name,
                                subject: r.subject,
                                version: r.version,
                            })
                            .collect(),
                    });
                    let schema = self.ids.entry(v.id).or_insert(schema).clone();
                    self.next_id = self.next_id.max(v.id.saturating_add(1));
                    self.subjects.entry(subject.clone()).or_default().insert(
                        *version,
                        VersionEntry {
                            id: v.id,
                            deleted: v.deleted,
                            schema,
                        },
                    );
                }
            },
            Key::Config { subject } => {
                let level = match value {
                    None => None,
                    Some(bytes) => {
                        let v: ConfigValue = serde_json::from_slice(bytes)
                            .map_err(|e| format!("bad CONFIG value: {e}"))?;
                        Some(parse_level(&v.compatibility_level).ok_or_else(|| {
                            format!("bad compatibility level {:?}", v.compatibility_level)
                        })?)
                    }
                };
                match (subject, level) {
                    (None, l) => self.global = l,
                    (Some(s), Some(l)) => {
                        self.configs.insert(s.clone(), l);
                    }
                    (Some(s), None) => {
                        self.configs.remove(s);
                    }
                }
            }
            Key::DeleteSubject { subject } => {
                if let Some(bytes) = value {
                    let v: DeleteSubjectValue = serde_json::from_slice(bytes)
                        .map_err(|e| format!("bad DELETE_SUBJECT value: {e}"))?;
                    if let Some(vs) = self.subjects.get_mut(subject) {
                        for (_, e) in vs.range_mut(..=v.version) {
                            e.deleted = true;
                        }
                    }
                }
            }
            Key::IdWatermark => {
                if let Some(bytes) = value {
                    let v: WatermarkValue = serde_json::from_slice(bytes)
                        .map_err(|e| format!("bad ID_WATERMARK value: {e}"))?;
                    self.next_id = self.next_id.max(v.next_id);
                }
            }
            Key::Unknown => {}
        }
        Ok(())
    }

    /// Texts of the schemas `refs` name, in order.
    fn resolve_refs(&self, refs: &[SchemaReference]) -> Result<Vec<String>, RegistryError> {
        refs.iter()
            .map(|r| {
                self.subjects
                    .get(&r.subject)
                    .and_then(|vs| vs.get(&r.version))
                    .map(|e| e.schema.text.clone())
                    .ok_or_else(|| RegistryError::InvalidSchema {
                        reason: format!(
                            "reference {:?} names subject {} version {}, which does not exist",
                            r.name, r.subject, r.version
                        ),
                    })
            })
            .collect()
    }

    fn parse(&self, schema: &Schema) -> Result<canon::Parsed, RegistryError> {
        let refs = self.resolve_refs(&schema.references)?;
        canon::parse(schema, &refs)
    }

    fn level(&self, subject: Option<&str>, default: CompatibilityLevel) -> CompatibilityLevel {
        subject
            .and_then(|s| self.configs.get(s).copied())
            .or(self.global)
            .unwrap_or(default)
    }

    fn live_versions(&self, subject: &str) -> Vec<(u32, &VersionEntry)> {
        self.subjects
            .get(subject)
            .map(|vs| {
                vs.iter()
                    .filter(|(_, e)| !e.deleted)
                    .map(|(v, e)| (*v, e))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn find_version(
        &self,
        subject: &str,
        version: VersionRef,
        include_deleted: bool,
    ) -> Result<(u32, &VersionEntry), RegistryError> {
        let vs = self
            .subjects
            .get(subject)
            .filter(|vs| include_deleted || vs.values().any(|e| !e.deleted))
            .ok_or_else(|| RegistryError::SubjectNotFound {
                subject: subject.to_string(),
            })?;
        let found = match version {
            VersionRef::Latest => vs
                .iter()
                .rev()
                .find(|(_, e)| include_deleted || !e.deleted)
                .map(|(v, e)| (*v, e)),
            VersionRef::Number(n) => vs
                .get(&n)
                .filter(|e| include_deleted || !e.deleted)
                .map(|e| (n, e)),
        };
        found.ok_or_else(|| RegistryError::VersionNotFound {
            subject: subject.to_string(),
            version: match version {
                VersionRef::Latest => "latest".to_string(),
                VersionRef::Number(n) => n.to_string(),
            },
        })
    }
}

fn schema_value(subject: &str, version: u32, id: u32, schema: &Schema, deleted: bool) -> Vec<u8> {
    serde_json::to_vec(&SchemaValue {
        subject: subject.to_string(),
        version,
        id,
        schema: schema.text.clone(),
        schema_type: schema.schema_type.as_str().to_string(),
        references: schema
            .references
            .iter()
            .map(|r| RefValue {
                name: r.name.clone(),
                subject: r.subject.clone(),
                version: r.version,
            })
            .collect(),
        deleted,
    })
    .expect("json")
}

fn registered(subject: &str, version: u32, e: &VersionEntry) -> RegisteredSchema {
    RegisteredSchema {
        subject: subject.to_string(),
        version,
        id: e.id,
        schema: (*e.schema).clone(),
    }
}

/// Compatibility problems of `new` against `previous` (oldest first) under `level`.
fn compat_problems(
    state: &State,
    level: CompatibilityLevel,
    new: &Schema,
    new_parsed: &canon::Parsed,
    previous: &[&VersionEntry],
) -> Result<Vec<String>, RegistryError> {
    if level == CompatibilityLevel::None || previous.is_empty() {
        return Ok(Vec::new());
    }
    // Confluent refuses a change of schema type under any level but NONE.
    if let Some(p) = previous
        .iter()
        .find(|p| p.schema.schema_type != new.schema_type)
    {
        return Ok(vec![format!(
            "incompatible schema type: the subject holds {} schemas, the new one is {}",
            p.schema.schema_type.as_str(),
            new.schema_type.as_str()
        )]);
    }
    let Some(new_avro) = &new_parsed.avro else {
        tracing::warn!(
            schema_type = new.schema_type.as_str(),
            "no compatibility checker for this schema type; accepting the new version unchecked"
        );
        return Ok(Vec::new());
    };
    let mut olds = Vec::with_capacity(previous.len());
    for p in previous {
        let parsed = state.parse(&p.schema)?;
        olds.push(parsed.avro.expect("avro parses to avro"));
    }
    Ok(match check_compatibility(level, new_avro, &olds) {
        Ok(()) => Vec::new(),
        Err(e) => e.problems,
    })
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
        let config = TopicConfig {
            partitions: 1,
            retention_ms: None,
            retention_bytes: None,
            segment_ms: None,
            segment_bytes: 16 << 20,
            cleanup_policy: CleanupPolicy::COMPACT,
            ..TopicConfig::default()
        };
        let topic = log.topic_or_create(TOPIC, config).map_err(storage)?;
        let mut state = State {
            next_id: 1,
            ..State::default()
        };
        let mut reader = log.reader(TOPIC, 0, StartAt::Earliest).map_err(storage)?;
        let mut records = 0u64;
        loop {
            let batch = reader.poll(1 << 20).map_err(storage)?;
            if batch.is_empty() {
                break;
            }
            for r in batch {
                records += 1;
                let Some(kb) = r.key.as_deref() else { continue };
                let key = Key::decode(kb).map_err(|e| RegistryError::Storage {
                    detail: format!("{TOPIC} offset {}: {e}", r.offset),
                    transient: false,
                })?;
                state
                    .apply(&key, r.value.as_deref())
                    .map_err(|e| RegistryError::Storage {
                        detail: format!("{TOPIC} offset {}: {e}", r.offset),
                        transient: false,
                    })?;
            }
        }
        // Index every stored schema by identity (lowest id wins should two ids ever hold
        // the same schema).
        let mut ids: Vec<u32> = state.ids.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let schema = state.ids[&id].clone();
            match state.parse(&schema) {
                Ok(p) => {
                    state.by_key.entry(p.key).or_insert(id);
                }
                Err(e) => {
                    tracing::warn!(id, error = %e, "stored schema does not parse; it can be read by id but not matched")
                }
            }
        }
        tracing::info!(
            records,
            subjects = state.subjects.len(),
            schemas = state.ids.len(),
            next_id = state.next_id,
            "schema registry loaded from {TOPIC}"
        );
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

    /// Appends `writes`, flushes (keeping the log's checkpoint), then applies them to the
    /// in-memory state. Caller holds the writer lock.
    fn commit(
        &self,
        writes: &[Write],
        new_key: Option<(CanonKey, u32)>,
    ) -> Result<(), RegistryError> {
        let now = cdc_log::now_ms();
        let keys: Vec<Vec<u8>> = writes.iter().map(|(k, _)| k.encode()).collect();
        let records: Vec<NewRecord<'_>> = writes
            .iter()
            .zip(&keys)
            .map(|((_, v), k)| NewRecord::new(Some(k), v.as_deref(), now))
            .collect();
        let result = self
            .inner
            .topic
            .append(0, &records)
            .and_then(|_| self.inner.log.flush(None));
        let mut state = self.inner.state.write().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = result {
            // The records may still become durable with a later flush: never hand their
            // id to another schema.
            if let Some((_, id)) = &new_key {
                state.next_id = state.next_id.max(id.saturating_add(1));
            }
            tracing::error!(error = %e, "schema registry write failed");
            return Err(storage(e));
        }
        for (k, v) in writes {
            state
                .apply(k, v.as_deref())
                .map_err(|e| RegistryError::Storage {
                    detail: e,
                    transient: false,
                })?;
        }
        if let Some((key, id)) = new_key {
            state.by_key.entry(key).or_insert(id);
        }
        Ok(())
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
        let (writes, id, version, new_key) = {
            let state = self.read();
            let parsed = state.parse(schema)?;
            // Already a live version of this subject?
            for (v, e) in state.live_versions(subject) {
                if state.by_key.get(&parsed.key) == Some(&e.id) {
                    return Ok(registered(subject, v, e));
                }
            }
            let level = state.level(Some(subject), self.inner.default_level);
            let live: Vec<&VersionEntry> = state
                .live_versions(subject)
                .into_iter()
                .map(|(_, e)| e)
                .collect();
            let problems = compat_problems(&state, level, schema, &parsed, &live)?;
            if !problems.is_empty() {
                return Err(RegistryError::Incompatible {
                    subject: subject.to_string(),
                    level,
                    messages: problems,
                });
            }
            let id = state
                .by_key
                .get(&parsed.key)
                .copied()
                .unwrap_or(state.next_id);
            let version = state
                .subjects
                .get(subject)
                .and_then(|vs| vs.keys().next_back().copied())
                .unwrap_or(0)
                + 1;
            let key = Key::Schema {
                subject: subject.to_string(),
                version,
            };
            let writes = vec![(key, Some(schema_value(subject, version, id, schema, false)))];
            let new_key = (!state.by_key.contains_key(&parsed.key)).then_some((parsed.key, id));
            (writes, id, version, new_key)
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
        let vs = state
            .subjects
            .get(subject)
            .filter(|vs| include_deleted || vs.values().any(|e| !e.deleted))
            .ok_or_else(|| RegistryError::SubjectNotFound {
                subject: subject.to_string(),
            })?;
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
        let (writes, versions) = {
            let state = self.read();
            let Some(vs) = state.subjects.get(subject) else {
                return Err(RegistryError::SubjectNotFound {
                    subject: subject.to_string(),
                });
            };
            let live: Vec<u32> = vs
                .iter()
                .filter(|(_, e)| !e.deleted)
                .map(|(v, _)| *v)
                .collect();
            if permanent {
                if !live.is_empty() {
                    return Err(other(
                        404,
                        codes::SUBJECT_NOT_SOFT_DELETED,
                        format!("Subject '{subject}' was not deleted first before being permanently deleted"),
                    ));
                }
                let mut writes: Vec<Write> = vec![(
                    Key::IdWatermark,
                    Some(
                        serde_json::to_vec(&WatermarkValue {
                            next_id: state.next_id,
                        })
                        .expect("json"),
                    ),
                )];
                let all: Vec<u32> = vs.keys().copied().collect();
                for v in &all {
                    writes.push((
                        Key::Schema {
                            subject: subject.to_string(),
                            version: *v,
                        },
                        None,
                    ));
                }
                writes.push((
                    Key::DeleteSubject {
                        subject: subject.to_string(),
                    },
                    None,
                ));
                if state.configs.contains_key(subject) {
                    writes.push((
                        Key::Config {
                            subject: Some(subject.to_string()),
                        },
                        None,
                    ));
                }
                (writes, all)
            } else {
                if live.is_empty() {
                    return Err(other(
                        404,
                        codes::SUBJECT_SOFT_DELETED,
                        format!("Subject '{subject}' was soft deleted. Set permanent=true to delete permanently"),
                    ));
                }
                let mut writes: Vec<Write> = Vec::new();
                for v in &live {
                    let e = &vs[v];
                    writes.push((
                        Key::Schema {
                            subject: subject.to_string(),
                            version: *v,
                        },
                        Some(schema_value(subject, *v, e.id, &e.schema, true)),
                    ));
                }
                let max = *live.last().expect("non-empty");
                writes.push((
                    Key::DeleteSubject {
                        subject: subject.to_string(),
                    },
                    Some(
                        serde_json::to_vec(&DeleteSubjectValue {
                            subject: subject.to_string(),
                            version: max,
                        })
                        .expect("json"),
                    ),
                ));
                (writes, live)
            }
        };
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
        let writes = {
            let state = self.read();
            // Soft delete needs a live version; permanent delete a soft-deleted one.
            // A numbered version is found even when soft-deleted (to say so: 40406);
            // "latest" means the latest live one, or for a permanent delete the latest.
            let include_deleted = permanent || matches!(version, VersionRef::Number(_));
            let (v, e) = state.find_version(subject, version, include_deleted)?;
            let key = Key::Schema {
                subject: subject.to_string(),
                version: v,
            };
            if permanent {
                if !e.deleted {
                    return Err(other(
                        404,
                        codes::VERSION_NOT_SOFT_DELETED,
                        format!("Subject '{subject}' Version {v} was not deleted first before being permanently deleted"),
                    ));
                }
                let watermark = (
                    Key::IdWatermark,
                    Some(
                        serde_json::to_vec(&WatermarkValue {
                            next_id: state.next_id,
                        })
                        .expect("json"),
                    ),
                );
                (vec![watermark, (key, None)], v)
            } else {
                if e.deleted {
                    return Err(other(
                        404,
                        codes::VERSION_SOFT_DELETED,
                        format!("Subject '{subject}' Version {v} was soft deleted. Set permanent=true to delete permanently"),
                    ));
                }
                (
                    vec![(key, Some(schema_value(subject, v, e.id, &e.schema, true)))],
                    v,
                )
            }
        };
        let (writes, v) = writes;
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
