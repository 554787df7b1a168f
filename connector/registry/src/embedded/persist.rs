//! The embedded registry's persistence: the compacted `_schemas` topic of the embedded log
//! (record format: [`crate::store`]).
//!
//! - [`load`] creates the topic if missing and replays it from the start into a [`State`]
//!   (the newest record per key wins, exactly as after compaction).
//! - [`EmbeddedRegistry::commit`] appends a write's records and calls `Log::flush(None)`,
//!   which fsyncs and keeps the pipeline's source checkpoint as it was, and only then
//!   applies them to the in-memory state.
//!
//! Invariants: the in-memory state never holds what is not durable, so an id handed out
//! survives a crash; an id whose write failed is never handed out again (the records may
//! still become durable with a later flush).

use cdc_log::{CleanupPolicy, Log, LogError, NewRecord, StartAt, Topic, TopicConfig};
use cdc_schemas::registry::RegistryError;

use super::state::{State, Write};
use super::EmbeddedRegistry;
use crate::canon::CanonKey;
use crate::store::{Key, TOPIC};

pub(super) fn storage(e: LogError) -> RegistryError {
    RegistryError::Storage {
        transient: e.is_transient(),
        detail: e.to_string(),
    }
}

/// Opens (creating it if missing) the `_schemas` topic of `log` and replays it. Blocking:
/// reads the whole topic.
pub(super) fn load(log: &Log) -> Result<(Topic, State), RegistryError> {
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
    let mut state = State::new();
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
    state.index_identities();
    tracing::info!(
        records,
        subjects = state.subjects.len(),
        schemas = state.ids.len(),
        next_id = state.next_id,
        "schema registry loaded from {TOPIC}"
    );
    Ok((topic, state))
}

impl EmbeddedRegistry {
    /// Appends `writes`, flushes (keeping the log's checkpoint), then applies them to the
    /// in-memory state. Caller holds the writer lock.
    pub(super) fn commit(
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
}
