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
//!
//! # Memory
//!
//! Bounded by configuration, not by the workload: the queue from the source holds at most
//! `source.max_queued_bytes` of decoded events ([`queue`]); a batch (at most
//! `source.max_batch_events` events) is encoded into reused buffers
//! ([`cdc_schemas::encode::RecordBuf`], no allocation per record) and appended in pieces
//! of about `APPEND_CHUNK_BYTES` (1 MiB).

pub mod progress;
pub mod queue;
pub mod run;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_log::{HeaderRef, Log, NewRecord, Topic, TopicConfig};
use cdc_schemas::compat::CompatibilityLevel;
use cdc_schemas::encode::{Encoder, EncoderConfig, RecordBuf, SchemaIds, TopicRouter};
use cdc_schemas::registry::{RegistryError, Schema, SchemaRegistry};
use cdc_schemas::{ChangeEvent, Op, SourcePosition, TableId, TableSchema};
use cdc_sources::ChangeBatch;
use tokio::sync::watch;

use queue::{BatchReceiver, TryRecvError};

/// Encoded bytes per log append: a source batch is appended in pieces of about this size,
/// so the encode buffer and the log's batch buffer stay small whatever the batch size.
const APPEND_CHUNK_BYTES: usize = 1 << 20;

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
    topic: Topic,
}

pub struct Pipeline {
    log: Log,
    registry: Arc<dyn SchemaRegistry>,
    cfg: PipelineConfig,
    tables: HashMap<TableId, TableState>,
    messages: Option<(Encoder, Topic)>,
    topics: HashMap<String, Topic>,
    durable: watch::Sender<Option<SourcePosition>>,
    pending: Option<(SourcePosition, Instant)>,
    bytes_since_flush: u64,
    stats: PipelineStats,
    /// Encoded records waiting to be appended (reused: no allocation per record).
    encoded: RecordBuf,
    /// Records of a transaction whose commit is not appended yet are in the log.
    partial: bool,
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
            encoded: RecordBuf::new(),
            partial: false,
        }
    }

    /// Runs until the channel closes (the source ended) or a definite error. On return,
    /// every complete transaction received is durable and published.
    pub async fn run(
        mut self,
        mut rx: BatchReceiver,
    ) -> (PipelineStats, Result<(), PipelineError>) {
        let r = self.run_inner(&mut rx).await;
        // Whatever happened, make complete transactions durable — unless part of a
        // transaction is appended (a batch failed half way, or the source stopped inside
        // a large transaction): a flush would make that part durable under the previous
        // checkpoint and a restart would append it again. The complete transactions are
        // then not acknowledged either, and the source sends them again.
        let r2 = if self.partial {
            if self.pending.is_some() {
                tracing::warn!("part of a transaction is appended: not flushing; the unacknowledged transactions are read again on restart");
            }
            Ok(())
        } else {
            self.flush_pending().await
        };
        (self.stats, r.and(r2))
    }

    async fn run_inner(&mut self, rx: &mut BatchReceiver) -> Result<(), PipelineError> {
        loop {
            let queued = match rx.try_recv() {
                Ok(b) => b,
                Err(TryRecvError::Empty) => {
                    // Nothing queued (nor on its way): the group ends here.
                    if !rx.more_coming() {
                        self.flush_pending().await?;
                    }
                    match rx.recv().await {
                        Some(b) => b,
                        None => return Ok(()),
                    }
                }
                Err(TryRecvError::Disconnected) => return Ok(()),
            };
            // `queued` holds the batch's share of the queue's memory budget until the
            // batch is appended and dropped.
            let mut queued = queued;
            self.process(&mut queued.batch).await?;
            drop(queued);
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

    async fn process(&mut self, batch: &mut ChangeBatch) -> Result<(), PipelineError> {
        if batch.commit.is_none() && !batch.events.is_empty() {
            // A chunk of a transaction: never flush once part of it is appended.
            self.flush_pending().await?;
        }
        let now_ns = now_ns();
        let ts = now_ns / 1_000_000;
        // A batch may hold two versions of a table's schema (a Relation in the middle of a
        // transaction): it is taken in segments within which each table has one version,
        // each segment's schemas prepared (registered) before any of its records is
        // appended. An incompatible change therefore appends nothing from there on.
        let events = &batch.events;
        let mut start = 0;
        while start < events.len() {
            let mut end = start;
            let mut versions: HashMap<&TableId, &Arc<TableSchema>> = HashMap::new();
            let mut last: Option<&Arc<TableSchema>> = None;
            while end < events.len() {
                if let Some(t) = events[end].table.as_ref() {
                    // Runs of events sharing one schema (the same Arc) need one check.
                    if !last.is_some_and(|l| Arc::ptr_eq(l, t)) {
                        match versions.get(&t.id) {
                            Some(v) if !Arc::ptr_eq(v, t) && ***v != **t => break,
                            Some(_) => {}
                            None => {
                                versions.insert(&t.id, t);
                            }
                        }
                        self.prepare(&events[end]).await?;
                        last = Some(t);
                    }
                } else if events[end].op == Op::Message {
                    self.prepare(&events[end]).await?;
                }
                end += 1;
            }
            // From the first append of a batch until its commit is appended, the log holds
            // part of a transaction: no flush may cover it.
            self.partial = true;
            // Encode into one reused buffer; append per run of events of one topic (order
            // within a topic is preserved), in pieces of about APPEND_CHUNK_BYTES.
            let mut buf = std::mem::take(&mut self.encoded);
            buf.clear();
            let r = self.encode_and_append(&events[start..end], now_ns, ts, &mut buf);
            buf.clear();
            if buf.bytes.capacity() > 4 * APPEND_CHUNK_BYTES {
                // One huge record grew it: give the memory back.
                buf.bytes.shrink_to(APPEND_CHUNK_BYTES);
            }
            self.encoded = buf;
            r?;
            start = end;
        }
        if batch.commit.is_some() || events.is_empty() {
            self.partial = false;
        }
        self.stats.events += batch.events.len() as u64;
        if let Some(pos) = batch.commit.take() {
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

    /// Encodes `events` into `buf` and appends it whenever the topic changes or a piece is
    /// full, and at the end.
    fn encode_and_append(
        &mut self,
        events: &[ChangeEvent],
        now_ns: i64,
        ts: i64,
        buf: &mut RecordBuf,
    ) -> Result<(), PipelineError> {
        let mut current: Option<&Topic> = None;
        // The table state of the previous event, by its schema's Arc: no lookup per event.
        let mut cached: Option<(&Arc<TableSchema>, &TableState)> = None;
        for ev in events {
            let (enc, topic) = if ev.op == Op::Message {
                let (e, t) = self.messages.as_ref().expect("prepared");
                (e, t)
            } else {
                let schema = ev.table.as_ref().expect("table event");
                let st = match cached {
                    Some((s, st)) if Arc::ptr_eq(s, schema) => st,
                    _ => {
                        let st = self.tables.get(&schema.id).expect("prepared");
                        cached = Some((schema, st));
                        st
                    }
                };
                (&st.encoder, &st.topic)
            };
            if let Some(cur) = current {
                if cur.name() != topic.name() || buf.bytes.len() >= APPEND_CHUNK_BYTES {
                    let (records, bytes) = append_encoded(cur, buf, ts)?;
                    self.stats.records += records;
                    self.bytes_since_flush += bytes;
                    buf.clear();
                }
            }
            current = Some(topic);
            enc.records_into(ev, now_ns, buf)?;
        }
        if let Some(cur) = current {
            let (records, bytes) = append_encoded(cur, buf, ts)?;
            self.stats.records += records;
            self.bytes_since_flush += bytes;
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
            let topic = self.topic(&topic)?;
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
        let topic = self.topic(&topic)?;
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

/// Appends the records in `buf` to `topic` (key-partitioned); returns (records, bytes).
fn append_encoded(topic: &Topic, buf: &RecordBuf, ts: i64) -> Result<(u64, u64), PipelineError> {
    if buf.is_empty() {
        return Ok((0, 0));
    }
    // Headers are rare (key changes): one slot per record that has one.
    let headers: Vec<HeaderRef<'_>> = (0..buf.len())
        .filter_map(|i| buf.header(i))
        .map(|(key, value)| HeaderRef {
            key,
            value: Some(value),
        })
        .collect();
    let mut next_header = 0;
    let records: Vec<NewRecord<'_>> = (0..buf.len())
        .map(|i| {
            let h: &[HeaderRef<'_>] = if buf.spans[i].header.is_some() {
                next_header += 1;
                &headers[next_header - 1..next_header]
            } else {
                &[]
            };
            NewRecord {
                key: buf.key(i),
                value: buf.value(i),
                headers: h,
                timestamp: ts,
            }
        })
        .collect();
    // Appends write without fsync: cheap enough inline, outside the async scheduling.
    tokio::task::block_in_place(|| topic.append_keyed(&records))?;
    Ok((records.len() as u64, buf.bytes.len() as u64))
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
