//! The pipeline: [`ChangeBatch`]es from a source → schema check → encode → append to the
//! embedded log → flush with the source position → publish the durable position.
//!
//! Per event: the topic comes from the [`TopicRouter`] (`<name>.<schema>.<table>`, logical
//! messages `<name>.message`); the [`Encoder`] is cached per table and rebuilt when the
//! table's schema changes (a new Relation). Before the first record of a new schema version
//! is appended, the encoder's Avro key and value schemas are registered under
//! `<topic>-key` / `<topic>-value` — whatever the output format, so compatibility is always
//! checked — and the ids set on the encoder. An incompatible change stops the pipeline with a
//! definite error naming the table, the subject, its rule and the ways out; nothing of that
//! batch is appended and nothing past it is acknowledged (`format.schema_change = "force"`
//! instead sets the subject's compatibility to NONE, registers, and logs a warning).
//!
//! # Durability (the safety argument)
//!
//! Records are appended key-partitioned (murmur2, as Kafka). A batch with `commit: Some(p)`
//! ends a transaction: `log.flush(Some(p))` makes its records and the checkpoint `p` durable
//! in one step, then `p` is published on the watch channel the source reads (and confirms to
//! the database). Group commit: while more batches are queued, several transactions are
//! appended and flushed once — when the channel is empty, or `group_commit_bytes` were
//! appended, or the oldest unflushed commit waited `group_commit_ms`.
//!
//! The log is never flushed while a transaction is partly appended: a flush covers every
//! record appended so far, so a partial transaction made durable under the previous
//! checkpoint would be appended again after a crash. So a batch without a commit (a chunk
//! of a large transaction, snapshot rows) first flushes the pending commit, and when the
//! pipeline stops mid-transaction the partial records are left unflushed (the supervisor
//! drops the log, which discards them like a crash would).

pub mod run;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_log::{HeaderRef, Log, NewRecord, Topic, TopicConfig};
use cdc_schemas::compat::CompatibilityLevel;
use cdc_schemas::encode::{Encoder, EncoderConfig, SchemaIds, TopicRouter};
use cdc_schemas::registry::{RegistryError, Schema, SchemaRegistry};
use cdc_schemas::{ChangeEvent, Op, SourcePosition, TableId, TableSchema};
use cdc_sources::ChangeBatch;
use tokio::sync::{mpsc, watch};

/// What the pipeline needs besides the log and the registry.
pub struct PipelineConfig {
    pub encoder: EncoderConfig,
    pub router: TopicRouter,
    pub topic_config: TopicConfig,
    /// `format.schema_change = "force"`.
    pub force_schema_change: bool,
    pub group_commit_bytes: u64,
    pub group_commit: Duration,
}

/// Why the pipeline stopped.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("table {table}: incompatible schema change (columns {columns}): {error}. Nothing of this table was appended or acknowledged past it. Ways out: make the change compatible (e.g. give new columns a default / keep types), relax the subject's compatibility (PUT /config/<subject> on the admin API), route the table to a new topic, or set format.schema_change = \"force\" and restart")]
    Incompatible {
        table: String,
        columns: String,
        error: RegistryError,
    },
    #[error("schema registry: {0}")]
    Registry(RegistryError),
    #[error("encoding a record: {0}")]
    Encode(#[from] cdc_schemas::encode::EncodeError),
    #[error("the embedded log: {0}")]
    Log(#[from] cdc_log::LogError),
}

impl PipelineError {
    pub fn is_transient(&self) -> bool {
        match self {
            PipelineError::Registry(e) => e.is_transient(),
            PipelineError::Log(e) => e.is_transient(),
            _ => false,
        }
    }
}

/// Counters of one pipeline run.
#[derive(Clone, Debug, Default)]
pub struct PipelineStats {
    pub events: u64,
    pub records: u64,
    pub transactions: u64,
    pub flushes: u64,
    pub last_durable: Option<SourcePosition>,
}

struct TableState {
    schema: Arc<TableSchema>,
    encoder: Encoder,
    topic: String,
}

pub struct Pipeline {
    log: Log,
    registry: Arc<dyn SchemaRegistry>,
    cfg: PipelineConfig,
    tables: HashMap<TableId, TableState>,
    messages: Option<(Encoder, String)>,
    topics: HashMap<String, Topic>,
    durable: watch::Sender<Option<SourcePosition>>,
    pending: Option<(SourcePosition, Instant)>,
    bytes_since_flush: u64,
    stats: PipelineStats,
}

impl Pipeline {
    pub fn new(
        log: Log,
        registry: Arc<dyn SchemaRegistry>,
        cfg: PipelineConfig,
        durable: watch::Sender<Option<SourcePosition>>,
    ) -> Self {
        Pipeline {
            log,
            registry,
            cfg,
            tables: HashMap::new(),
            messages: None,
            topics: HashMap::new(),
            durable,
            pending: None,
            bytes_since_flush: 0,
            stats: PipelineStats::default(),
        }
    }

    /// Runs until the channel closes (the source ended) or a definite error. On return,
    /// every complete transaction received is durable and published.
    pub async fn run(
        mut self,
        mut rx: mpsc::Receiver<ChangeBatch>,
    ) -> (PipelineStats, Result<(), PipelineError>) {
        let r = self.run_inner(&mut rx).await;
        // Whatever happened, make complete transactions durable (never a partial one:
        // `pending` is only set right after a commit was appended).
        let r2 = self.flush_pending().await;
        (self.stats, r.and(r2))
    }

    async fn run_inner(
        &mut self,
        rx: &mut mpsc::Receiver<ChangeBatch>,
    ) -> Result<(), PipelineError> {
        loop {
            let batch = match rx.try_recv() {
                Ok(b) => b,
                Err(mpsc::error::TryRecvError::Empty) => {
                    // Nothing queued: the group ends here.
                    self.flush_pending().await?;
                    match rx.recv().await {
                        Some(b) => b,
                        None => return Ok(()),
                    }
                }
                Err(mpsc::error::TryRecvError::Disconnected) => return Ok(()),
            };
            self.process(batch).await?;
            if let Some((_, since)) = &self.pending {
                if self.bytes_since_flush >= self.cfg.group_commit_bytes
                    || since.elapsed() >= self.cfg.group_commit
                {
                    self.flush_pending().await?;
                }
            }
        }
    }

    async fn flush_pending(&mut self) -> Result<(), PipelineError> {
        let Some((pos, _)) = self.pending.take() else {
            return Ok(());
        };
        let log = self.log.clone();
        let cp = pos.to_checkpoint();
        let r = tokio::task::spawn_blocking(move || log.flush(Some(&cp)))
            .await
            .unwrap_or_else(|e| {
                Err(cdc_log::LogError::InvalidArgument(format!(
                    "flush task: {e}"
                )))
            });
        r?;
        self.bytes_since_flush = 0;
        self.stats.flushes += 1;
        self.stats.last_durable = Some(pos.clone());
        tracing::debug!(position = %pos, "durable");
        self.durable.send_replace(Some(pos));
        Ok(())
    }

    async fn process(&mut self, batch: ChangeBatch) -> Result<(), PipelineError> {
        if batch.commit.is_none() && !batch.events.is_empty() {
            // A chunk of a transaction: never flush once part of it is appended.
            self.flush_pending().await?;
        }
        // Schemas first: an incompatible change appends nothing of this batch.
        for ev in &batch.events {
            self.prepare(ev).await?;
        }
        let now_ns = now_ns();
        let ts = now_ns / 1_000_000;
        // Encode, grouped by topic (order within a topic is preserved).
        let mut by_topic: Vec<(String, Vec<cdc_schemas::encode::Record>)> = Vec::new();
        for ev in &batch.events {
            let (enc, topic) = if ev.op == Op::Message {
                let (e, t) = self.messages.as_ref().expect("prepared");
                (e, t)
            } else {
                let id = &ev.table.as_ref().expect("table event").id;
                let st = self.tables.get(id).expect("prepared");
                (&st.encoder, &st.topic)
            };
            let recs = enc.records(ev, now_ns)?;
            match by_topic.last_mut() {
                Some((t, v)) if t == topic => v.extend(recs),
                _ => by_topic.push((topic.clone(), recs)),
            }
        }
        self.stats.events += batch.events.len() as u64;
        for (topic, recs) in by_topic {
            let t = self.topic(&topic)?;
            let headers: Vec<Vec<HeaderRef<'_>>> = recs
                .iter()
                .map(|r| {
                    r.headers
                        .iter()
                        .map(|(k, v)| HeaderRef {
                            key: k,
                            value: Some(v.as_slice()),
                        })
                        .collect()
                })
                .collect();
            let new: Vec<NewRecord<'_>> = recs
                .iter()
                .zip(&headers)
                .map(|(r, h)| NewRecord {
                    key: r.key.as_deref(),
                    value: r.value.as_deref(),
                    headers: h,
                    timestamp: ts,
                })
                .collect();
            let bytes: usize = recs
                .iter()
                .map(|r| {
                    r.key.as_ref().map_or(0, |k| k.len()) + r.value.as_ref().map_or(0, |v| v.len())
                })
                .sum();
            let log_topic = t.clone();
            // Appends write to the page cache (no fsync): cheap enough inline.
            tokio::task::block_in_place(|| log_topic.append_keyed(&new))?;
            self.bytes_since_flush += bytes as u64;
            self.stats.records += recs.len() as u64;
        }
        if let Some(pos) = batch.commit {
            self.stats.transactions += 1;
            let since = self
                .pending
                .as_ref()
                .map(|p| p.1)
                .unwrap_or_else(Instant::now);
            self.pending = Some((pos, since));
        }
        Ok(())
    }

    fn topic(&mut self, name: &str) -> Result<Topic, PipelineError> {
        if let Some(t) = self.topics.get(name) {
            return Ok(t.clone());
        }
        let t = self
            .log
            .topic_or_create(name, self.cfg.topic_config.clone())?;
        self.topics.insert(name.to_string(), t.clone());
        Ok(t)
    }

    /// Makes sure the encoder for `ev`'s table schema exists and its schemas are registered.
    async fn prepare(&mut self, ev: &ChangeEvent) -> Result<(), PipelineError> {
        if ev.op == Op::Message {
            if self.messages.is_some() {
                return Ok(());
            }
            let mut enc = Encoder::for_messages(&self.cfg.encoder)?;
            let topic = self
                .cfg
                .router
                .route(&format!("{}.message", self.cfg.encoder.source.topic_prefix));
            let ids = self
                .register(&topic, &enc, "<logical decoding messages>", None)
                .await?;
            enc.set_schema_ids(ids);
            self.messages = Some((enc, topic));
            return Ok(());
        }
        let Some(schema) = ev.table.as_ref() else {
            return Ok(());
        };
        let previous = match self.tables.get(&schema.id) {
            Some(st) if Arc::ptr_eq(&st.schema, schema) || *st.schema == **schema => return Ok(()),
            Some(st) => Some(st.schema.clone()),
            None => None,
        };
        let mut enc = Encoder::new(&self.cfg.encoder, schema)?;
        let topic = self.cfg.router.topic_for(&schema.id);
        let ids = self
            .register(
                &topic,
                &enc,
                &schema.id.to_string(),
                Some((previous.as_deref(), schema)),
            )
            .await?;
        enc.set_schema_ids(ids);
        tracing::info!(table = %schema.id, topic, key_id = ?ids.key, value_id = ids.value, "schema registered");
        self.tables.insert(
            schema.id.clone(),
            TableState {
                schema: schema.clone(),
                encoder: enc,
                topic,
            },
        );
        Ok(())
    }

    async fn register(
        &self,
        topic: &str,
        enc: &Encoder,
        table: &str,
        change: Option<(Option<&TableSchema>, &TableSchema)>,
    ) -> Result<SchemaIds, PipelineError> {
        let key = match enc.avro_key_schema() {
            Some(k) => Some(
                self.register_one(&format!("{topic}-key"), k, table, change)
                    .await?,
            ),
            None => None,
        };
        let value = self
            .register_one(
                &format!("{topic}-value"),
                enc.avro_value_schema(),
                table,
                change,
            )
            .await?;
        Ok(SchemaIds { key, value })
    }

    async fn register_one(
        &self,
        subject: &str,
        text: &str,
        table: &str,
        change: Option<(Option<&TableSchema>, &TableSchema)>,
    ) -> Result<u32, PipelineError> {
        let schema = Schema::avro(text);
        let mut attempt = 0u32;
        loop {
            match self.registry.register(subject, &schema).await {
                Ok(id) => return Ok(id),
                Err(e @ RegistryError::Incompatible { .. }) => {
                    let columns = change
                        .map(|(old, new)| changed_columns(old, new))
                        .unwrap_or_else(|| "?".into());
                    if !self.cfg.force_schema_change {
                        return Err(PipelineError::Incompatible {
                            table: table.to_string(),
                            columns,
                            error: e,
                        });
                    }
                    tracing::warn!(table, subject, columns, error = %e, "FORCED incompatible schema change (format.schema_change = \"force\"): the subject's compatibility is set to NONE; consumers of this topic may fail to read the new records");
                    self.registry
                        .set_compatibility(Some(subject), CompatibilityLevel::None)
                        .await
                        .map_err(PipelineError::Registry)?;
                    return self
                        .registry
                        .register(subject, &schema)
                        .await
                        .map_err(PipelineError::Registry);
                }
                Err(e) if e.is_transient() && attempt < 8 => {
                    attempt += 1;
                    tracing::warn!(subject, error = %e, attempt, "schema registry unavailable; retrying");
                    tokio::time::sleep(Duration::from_millis(100 << attempt.min(6))).await;
                }
                Err(e) => return Err(PipelineError::Registry(e)),
            }
        }
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

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
