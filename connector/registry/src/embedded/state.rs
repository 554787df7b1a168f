//! The embedded registry's state and its rules, without I/O: subjects and their versions,
//! global ids, schema identities and compatibility levels; how a `_schemas` record changes
//! them ([`State::apply`], shared by replay and live writes); and which records a
//! registration or a delete takes, or why it is refused (the `plan_*` methods).
//!
//! Invariants:
//! - the state is what the `_schemas` records applied say, the newest per key winning;
//!   plans only read it, and it changes only by applying records already made durable
//!   (or, when a write fails, by burning the id that write would have taken);
//! - `next_id` is above every id ever handed out, also ids whose versions were
//!   permanently deleted (a permanent delete writes an `ID_WATERMARK` first);
//! - `by_key` maps a schema's identity (canonical form plus references) to its id, so the
//!   same schema has one id whatever the subject;
//! - a permanent delete needs a soft delete first, and a soft delete a live version.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use cdc_schemas::compat::{check_compatibility, CompatibilityLevel};
use cdc_schemas::registry::{
    RegisteredSchema, RegistryError, Schema, SchemaReference, SchemaType, VersionRef,
};

use super::{codes, other};
use crate::canon::{self, CanonKey};
use crate::store::{ConfigValue, DeleteSubjectValue, Key, RefValue, SchemaValue, WatermarkValue};

#[derive(Clone, Debug)]
pub(super) struct VersionEntry {
    pub(super) id: u32,
    pub(super) deleted: bool,
    pub(super) schema: Arc<Schema>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) subjects: BTreeMap<String, BTreeMap<u32, VersionEntry>>,
    pub(super) ids: HashMap<u32, Arc<Schema>>,
    pub(super) by_key: HashMap<CanonKey, u32>,
    pub(super) next_id: u32,
    pub(super) configs: BTreeMap<String, CompatibilityLevel>,
    pub(super) global: Option<CompatibilityLevel>,
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
pub(super) type Write = (Key, Option<Vec<u8>>);

impl State {
    /// The state of an empty `_schemas` topic.
    pub(super) fn new() -> State {
        State {
            next_id: 1,
            ..State::default()
        }
    }

    /// Applies one `_schemas` record (replay and live writes share this).
    pub(super) fn apply(&mut self, key: &Key, value: Option<&[u8]>) -> Result<(), String> {
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

    /// Indexes every stored schema by identity once a replay is done (lowest id wins
    /// should two ids ever hold the same schema).
    pub(super) fn index_identities(&mut self) {
        let mut ids: Vec<u32> = self.ids.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let schema = self.ids[&id].clone();
            match self.parse(&schema) {
                Ok(p) => {
                    self.by_key.entry(p.key).or_insert(id);
                }
                Err(e) => {
                    tracing::warn!(id, error = %e, "stored schema does not parse; it can be read by id but not matched")
                }
            }
        }
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

    pub(super) fn parse(&self, schema: &Schema) -> Result<canon::Parsed, RegistryError> {
        let refs = self.resolve_refs(&schema.references)?;
        canon::parse(schema, &refs)
    }

    pub(super) fn level(
        &self,
        subject: Option<&str>,
        default: CompatibilityLevel,
    ) -> CompatibilityLevel {
        subject
            .and_then(|s| self.configs.get(s).copied())
            .or(self.global)
            .unwrap_or(default)
    }

    pub(super) fn live_versions(&self, subject: &str) -> Vec<(u32, &VersionEntry)> {
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

    /// `subject`'s versions; 40401 if it does not exist (or is soft-deleted and
    /// `include_deleted` is false).
    pub(super) fn subject_versions(
        &self,
        subject: &str,
        include_deleted: bool,
    ) -> Result<&BTreeMap<u32, VersionEntry>, RegistryError> {
        self.subjects
            .get(subject)
            .filter(|vs| include_deleted || vs.values().any(|e| !e.deleted))
            .ok_or_else(|| RegistryError::SubjectNotFound {
                subject: subject.to_string(),
            })
    }

    pub(super) fn find_version(
        &self,
        subject: &str,
        version: VersionRef,
        include_deleted: bool,
    ) -> Result<(u32, &VersionEntry), RegistryError> {
        let vs = self.subject_versions(subject, include_deleted)?;
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

pub(super) fn schema_value(
    subject: &str,
    version: u32,
    id: u32,
    schema: &Schema,
    deleted: bool,
) -> Vec<u8> {
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

pub(super) fn registered(subject: &str, version: u32, e: &VersionEntry) -> RegisteredSchema {
    RegisteredSchema {
        subject: subject.to_string(),
        version,
        id: e.id,
        schema: (*e.schema).clone(),
    }
}

/// Compatibility problems of `new` against `previous` (oldest first) under `level`.
pub(super) fn compat_problems(
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

/// What registering a schema under a subject comes to.
pub(super) enum Registration {
    /// The schema is already a live version of the subject.
    Exists(RegisteredSchema),
    /// A new version: the records to write, its id and version number, and the schema's
    /// identity when the id is a new one.
    New {
        writes: Vec<Write>,
        id: u32,
        version: u32,
        new_key: Option<(CanonKey, u32)>,
    },
}

impl State {
    /// Registering `schema` under `subject`: the existing version, or the records of a new
    /// one if the subject's compatibility level allows it.
    pub(super) fn plan_register(
        &self,
        subject: &str,
        schema: &Schema,
        default_level: CompatibilityLevel,
    ) -> Result<Registration, RegistryError> {
        let parsed = self.parse(schema)?;
        // Already a live version of this subject?
        for (v, e) in self.live_versions(subject) {
            if self.by_key.get(&parsed.key) == Some(&e.id) {
                return Ok(Registration::Exists(registered(subject, v, e)));
            }
        }
        let level = self.level(Some(subject), default_level);
        let live: Vec<&VersionEntry> = self
            .live_versions(subject)
            .into_iter()
            .map(|(_, e)| e)
            .collect();
        let problems = compat_problems(self, level, schema, &parsed, &live)?;
        if !problems.is_empty() {
            return Err(RegistryError::Incompatible {
                subject: subject.to_string(),
                level,
                messages: problems,
            });
        }
        let id = self
            .by_key
            .get(&parsed.key)
            .copied()
            .unwrap_or(self.next_id);
        let version = self
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
        let new_key = (!self.by_key.contains_key(&parsed.key)).then_some((parsed.key, id));
        Ok(Registration::New {
            writes,
            id,
            version,
            new_key,
        })
    }

    /// The `ID_WATERMARK` record a permanent delete starts with, so the ids it frees stay
    /// handed out once compaction has dropped their versions.
    fn watermark(&self) -> Write {
        (
            Key::IdWatermark,
            Some(
                serde_json::to_vec(&WatermarkValue {
                    next_id: self.next_id,
                })
                .expect("json"),
            ),
        )
    }

    /// Deleting every version of `subject`, soft or permanent: the records to write and
    /// the version numbers deleted.
    pub(super) fn plan_delete_subject(
        &self,
        subject: &str,
        permanent: bool,
    ) -> Result<(Vec<Write>, Vec<u32>), RegistryError> {
        let Some(vs) = self.subjects.get(subject) else {
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
            let mut writes: Vec<Write> = vec![self.watermark()];
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
            if self.configs.contains_key(subject) {
                writes.push((
                    Key::Config {
                        subject: Some(subject.to_string()),
                    },
                    None,
                ));
            }
            Ok((writes, all))
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
            Ok((writes, live))
        }
    }

    /// Deleting one version of `subject`, soft or permanent: the records to write and the
    /// version number deleted.
    pub(super) fn plan_delete_version(
        &self,
        subject: &str,
        version: VersionRef,
        permanent: bool,
    ) -> Result<(Vec<Write>, u32), RegistryError> {
        // Soft delete needs a live version; permanent delete a soft-deleted one.
        // A numbered version is found even when soft-deleted (to say so: 40406);
        // "latest" means the latest live one, or for a permanent delete the latest.
        let include_deleted = permanent || matches!(version, VersionRef::Number(_));
        let (v, e) = self.find_version(subject, version, include_deleted)?;
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
            Ok((vec![self.watermark(), (key, None)], v))
        } else {
            if e.deleted {
                return Err(other(
                    404,
                    codes::VERSION_SOFT_DELETED,
                    format!("Subject '{subject}' Version {v} was soft deleted. Set permanent=true to delete permanently"),
                ));
            }
            Ok((
                vec![(key, Some(schema_value(subject, v, e.id, &e.schema, true)))],
                v,
            ))
        }
    }
}
