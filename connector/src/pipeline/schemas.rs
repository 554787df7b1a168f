//! Schemas in the pipeline: the encoder of each table schema version, its key columns
//! (`source.message_key_columns`), its topic (`[[routing]]`), and the registration of its
//! key and value schemas before its first record — with the subject naming, the error an
//! incompatible change stops with, and `format.schema_change = "force"` (which restores the
//! subject's level afterwards).
//!
//! Invariant: no record of a table schema version is appended before both its schemas are
//! registered; an incompatible change appends nothing of its batch.

use super::*;

impl Pipeline {
    /// Makes sure the encoder for `ev`'s table schema exists and its schemas are registered.
    pub(super) async fn prepare(&mut self, ev: &ChangeEvent) -> Result<(), PipelineError> {
        if ev.op == Op::Message {
            if self.encoders.messages.is_some() {
                return Ok(());
            }
            let mut enc = Encoder::for_messages(&self.cfg.encoder)?;
            let default = self.cfg.router.default_message_topic();
            let (topic, routed) = match self.cfg.router.routed(&default) {
                Some(t) => (t, true),
                None => (default, false),
            };
            let ids = self
                .register(&topic, routed, &enc, "<logical decoding messages>", None)
                .await?;
            enc.set_schema_ids(ids);
            let topic = self.topic(&topic).await?;
            Arc::make_mut(&mut self.encoders).messages = Some(Arc::new((enc, topic)));
            return Ok(());
        }
        let Some(schema) = ev.table.as_ref() else {
            return Ok(());
        };
        let previous = match self.encoders.tables.get(&schema.id) {
            Some(st) if Arc::ptr_eq(&st.schema, schema) || *st.schema == **schema => return Ok(()),
            Some(st) => Some(st.schema.clone()),
            None => None,
        };
        let mut enc = Encoder::new(&self.cfg.encoder, schema)?;
        let default = self.cfg.router.default_topic(&schema.id);
        let (topic, routed) = match self.cfg.router.routed(&default) {
            Some(t) => (t, true),
            None => (default, false),
        };
        if routed {
            self.note_routed(&topic, &schema.id);
        }
        let ids = self
            .register(
                &topic,
                routed,
                &enc,
                &schema.id.to_string(),
                Some((previous.as_deref(), schema)),
            )
            .await?;
        enc.set_schema_ids(ids);
        tracing::info!(table = %schema.id, topic, key_id = ?ids.key, value_id = ids.value, "schema registered");
        let topic = self.topic(&topic).await?;
        Arc::make_mut(&mut self.encoders).tables.insert(
            schema.id.clone(),
            Arc::new(TableState {
                schema: schema.clone(),
                encoder: enc,
                topic,
            }),
        );
        Ok(())
    }

    /// Registers `enc`'s schemas under the subjects of `topic` ([`subject`]).
    async fn register(
        &self,
        topic: &str,
        routed: bool,
        enc: &Encoder,
        table: &str,
        change: Option<(Option<&TableSchema>, &TableSchema)>,
    ) -> Result<SchemaIds, PipelineError> {
        let key = match enc.avro_key_schema() {
            Some(k) => Some(
                self.register_one(&subject(topic, routed, "key", k), k, table, change, true)
                    .await?,
            ),
            None => None,
        };
        let v = enc.avro_value_schema();
        let value = self
            .register_one(&subject(topic, routed, "value", v), v, table, change, false)
            .await?;
        Ok(SchemaIds { key, value })
    }

    /// Replaces each event's table schema by its re-keyed version
    /// (`source.message_key_columns`); an entry naming a column the table lacks is a
    /// definite error, before anything of the batch is appended.
    pub(super) fn rekey(&mut self, events: &mut [ChangeEvent]) -> Result<(), PipelineError> {
        let mut last: Option<(Arc<TableSchema>, Arc<TableSchema>)> = None;
        for ev in events.iter_mut() {
            let Some(t) = ev.table.as_mut() else {
                continue;
            };
            let out = match &last {
                Some((src, out)) if Arc::ptr_eq(src, t) => out.clone(),
                _ => {
                    let out = self.rekeyer.rekey(t)?;
                    last = Some((t.clone(), out.clone()));
                    out
                }
            };
            *t = out;
        }
        Ok(())
    }

    /// A second table on a routed topic: their keys are not made unique across tables,
    /// which compaction must know about. Said once per topic.
    fn note_routed(&mut self, topic: &str, table: &TableId) {
        match self.routed_tables.get(topic) {
            None => {
                self.routed_tables.insert(topic.to_string(), table.clone());
            }
            Some(first) if first != table => {
                if self.cfg.topic_config.cleanup_policy.compact {
                    tracing::warn!(topic, first = %first, second = %table, "[[routing]] sends two tables to one compacted topic: records of both with equal keys are one key to compaction, which keeps only the newest; give the tables disjoint keys or use log.cleanup_policy = \"delete\"");
                }
                // Warned (or nothing to warn about): remember this pair as seen.
                self.routed_tables.insert(topic.to_string(), table.clone());
            }
            Some(_) => {}
        }
    }

    pub(super) async fn register_one(
        &self,
        subject: &str,
        text: &str,
        table: &str,
        change: Option<(Option<&TableSchema>, &TableSchema)>,
        is_key: bool,
    ) -> Result<u32, PipelineError> {
        let schema = Schema::avro(text);
        match with_retries(subject, || self.registry.register(subject, &schema)).await {
            Ok(id) => Ok(id),
            Err(e @ RegistryError::Incompatible { .. }) => {
                let columns = change
                    .map(|(old, new)| changed_columns(old, new))
                    .unwrap_or_else(|| "?".into());
                if !self.cfg.force_schema_change {
                    return Err(PipelineError::Incompatible {
                        table: table.to_string(),
                        columns,
                        error: Box::new(e),
                        key_hint: if is_key {
                            key_hint(change)
                        } else {
                            String::new()
                        },
                    });
                }
                self.force_register(subject, &schema, table, &columns, &e)
                    .await
            }
            Err(e) => Err(PipelineError::Registry(e)),
        }
    }

    /// `format.schema_change = "force"`: sets `subject` to NONE, registers, and puts the
    /// subject's level back as it was — its own level, or none (following the global one
    /// again) — so that later changes are checked as before.
    async fn force_register(
        &self,
        subject: &str,
        schema: &Schema,
        table: &str,
        columns: &str,
        error: &RegistryError,
    ) -> Result<u32, PipelineError> {
        let registry = &*self.registry;
        let previous = with_retries(subject, || registry.subject_compatibility(subject))
            .await
            .map_err(PipelineError::Registry)?;
        let previous_name = level_name(previous);
        tracing::warn!(table, subject, columns, %error, previous_level = previous_name, "FORCED incompatible schema change (format.schema_change = \"force\"): registering under compatibility NONE, then restoring the subject's level; consumers of this topic may fail to read the new records");
        with_retries(subject, || {
            registry.set_compatibility(Some(subject), CompatibilityLevel::None)
        })
        .await
        .map_err(PipelineError::Registry)?;
        let registered = with_retries(subject, || registry.register(subject, schema)).await;
        // Restored whether or not the registration went through.
        let restored = match previous {
            Some(level) => {
                with_retries(subject, || registry.set_compatibility(Some(subject), level)).await
            }
            None => with_retries(subject, || registry.delete_subject_compatibility(subject)).await,
        };
        if let Err(e) = restored {
            return Err(PipelineError::RestoreCompatibility {
                subject: subject.to_string(),
                level: previous,
                error: e,
            });
        }
        let id = registered.map_err(PipelineError::Registry)?;
        tracing::info!(
            subject,
            id,
            level = previous_name,
            "forced schema registered; the subject's compatibility is restored"
        );
        Ok(id)
    }
}

/// A subject's own level for messages; `None`: it has none.
pub(super) fn level_name(level: Option<CompatibilityLevel>) -> &'static str {
    level.map_or("(none: the global level)", |l| l.as_str())
}

/// The request that gives `subject` its own `level` back (or removes its own level).
pub(super) fn restore_request(subject: &str, level: Option<CompatibilityLevel>) -> String {
    match level {
        Some(l) => format!(
            "PUT /config/{subject} with {{\"compatibility\": \"{}\"}}",
            l.as_str()
        ),
        None => format!("DELETE /config/{subject}"),
    }
}

/// Retries a registry call on transient errors (8 times, backoff 200 ms doubling to 6.4 s)
/// on top of the client's own retries; then returns the error for the supervisor.
async fn with_retries<'a, T>(
    subject: &str,
    mut call: impl FnMut() -> cdc_schemas::registry::RegistryFuture<'a, T>,
) -> Result<T, RegistryError> {
    let mut attempt = 0u32;
    loop {
        match call().await {
            Err(e) if e.is_transient() && attempt < 8 => {
                attempt += 1;
                tracing::warn!(subject, error = %e, attempt, "schema registry unavailable; retrying");
                tokio::time::sleep(Duration::from_millis(100 << attempt.min(6))).await;
            }
            r => return r,
        }
    }
}

/// The registry subject of a topic's key or value schema (`schema`: its Avro text):
/// `<topic>-key` / `<topic>-value` (TopicNameStrategy), or on a routed topic
/// `<topic>-<the record's full name>` (TopicRecordNameStrategy).
pub fn subject(topic: &str, routed: bool, suffix: &str, schema: &str) -> String {
    match avro_full_name(schema).filter(|_| routed) {
        Some(name) => format!("{topic}-{name}"),
        None => format!("{topic}-{suffix}"),
    }
}

/// The full name (`namespace.name`) of an Avro named schema's JSON.
fn avro_full_name(schema: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(schema).ok()?;
    let name = v.get("name")?.as_str()?;
    match v.get("namespace").and_then(|n| n.as_str()) {
        Some(ns) if !ns.is_empty() && !name.contains('.') => Some(format!("{ns}.{name}")),
        _ => Some(name.to_string()),
    }
}

/// For an incompatible key schema: the key before and after, and the setting that keeps
/// the old one.
fn key_hint(change: Option<(Option<&TableSchema>, &TableSchema)>) -> String {
    let Some((old, new)) = change else {
        return String::new();
    };
    let cols = |t: &TableSchema| {
        t.key_columns()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(",")
    };
    match old {
        Some(old) if old.key != new.key && old.has_key() => format!(
            " The record key changed from ({}) to ({}); to keep the old key, set {} = [\"{}:{}\"].",
            cols(old),
            cols(new),
            cdc_sources::keys::KEY,
            new.id,
            cols(old)
        ),
        _ => format!(
            " The record key is ({}); to key the table by other columns, set {} = [\"{}:<column>,<column>\"].",
            cols(new),
            cdc_sources::keys::KEY,
            new.id
        ),
    }
}

/// Columns added, removed or changed between two versions of a table, for messages.
pub fn changed_columns(old: Option<&TableSchema>, new: &TableSchema) -> String {
    let Some(old) = old else {
        return "(first version seen by this run)".into();
    };
    let mut out = Vec::new();
    for c in &new.columns {
        match old.columns.iter().find(|o| o.name == c.name) {
            None => out.push(format!("+{} {}", c.name, c.source_type)),
            Some(o) if o.ty != c.ty || o.nullable != c.nullable => out.push(format!(
                "~{} {} -> {}",
                c.name, o.source_type, c.source_type
            )),
            _ => {}
        }
    }
    for o in &old.columns {
        if !new.columns.iter().any(|c| c.name == o.name) {
            out.push(format!("-{}", o.name));
        }
    }
    if out.is_empty() {
        "key or options".into()
    } else {
        out.join(", ")
    }
}
