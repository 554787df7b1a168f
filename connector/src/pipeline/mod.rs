//! The pipeline: [`ChangeBatch`]es from a source → schema check → encode → append to the
//! embedded log → flush with the source position → publish the durable position.
//!
//! The log is the embedded one or Kafka ([`out`]): with Kafka an append is a produce in
//! the open Kafka transaction and a flush is that transaction's commit with the position
//! in `<name>.offsets`; everything below holds for both, except waiting for disk (the
//! embedded log's). Re-snapshot reconciliation reads back the log it writes, either one.
//!
//! Per event (the schema part lives in `schemas.rs`): a table's key is replaced by `source.message_key_columns` where an entry
//! names it ([`cdc_sources::keys`], applied here so that every source has it); the topic
//! comes from the [`TopicRouter`] (`<name>.<schema>.<table>`, logical messages
//! `<name>.message`, rewritten by the `[[routing]]` rules); the [`Encoder`] is cached per
//! table and rebuilt when the table's schema changes (a new Relation). Before the first
//! record of a new schema version is appended, the encoder's Avro key and value schemas are
//! registered — whatever the output format, so compatibility is always checked — and the
//! ids set on the encoder. Subjects are `<topic>-key` / `<topic>-value` (Confluent's
//! TopicNameStrategy); on a topic a routing rule produced, which may hold several tables,
//! `<topic>-<record name>` (TopicRecordNameStrategy), so each table keeps its own history. An incompatible change stops the pipeline with a
//! definite error naming the table, the subject, its rule and the ways out; nothing of that
//! batch is appended and nothing past it is acknowledged (`format.schema_change = "force"`
//! instead sets the subject's compatibility to NONE, registers, logs a warning and restores
//! the subject's level as it was: its own level, or none).
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
//! # Transaction metadata
//!
//! With `format.provide_transaction_metadata` ([`txmeta`]), each streamed transaction also
//! gets a BEGIN record on `<name>.transaction`, appended before its first change record,
//! and an END record (its event counts), appended after its last one and before its commit
//! becomes pending — both parts of the transaction under the rule above, so the END is
//! durable in the same flush as every change record it counts.
//!
//! # Re-snapshot: deletes for what the snapshot no longer finds
//!
//! A source frames every snapshot with [`SnapshotMark`]s. At `Begin` the pipeline flushes
//! (with the `SnapshotIncomplete` the batch carries over an existing log) and notes where
//! the snapshot's records start in each topic of its tables. At `End`, when those topics
//! held records before, it flushes the snapshot's rows under `SnapshotIncomplete` — the one
//! flush of records without their position, safe because a restart from that checkpoint
//! snapshots again — and [`reconcile`] appends a delete and a tombstone for every key live
//! before and not read by the snapshot. `End`'s position is then pending like any commit:
//! the flush that makes it durable covers the deletes. A crash before it leaves
//! `SnapshotIncomplete`; the next snapshot's prefix then holds this one's rows, and the
//! deletes are computed again against it.
//!
//! # Waiting for disk
//!
//! An append or flush the log refuses for lack of disk (budget exhausted, ENOSPC) is
//! retried after a wait instead of failing the pipeline ([`diskwait`]): each retried call
//! is one that changed nothing when it failed (appends go one partition at a time for
//! that), so nothing is lost or appended twice. Before it waits on the budget with no
//! partial transaction appended, the pipeline flushes its pending commit: consumers can
//! then read (and release) those records, and the source confirms them. And before a
//! transaction starts when the budget has little room left, it flushes them too: a
//! refusal inside the transaction could not flush them (the rule above), and a wait
//! with complete transactions held unflushed behind a partial one would never end.
//!
//! # Encoding in parallel
//!
//! The pipeline task registers schemas and appends; encoding runs beside it ([`encode`]):
//! each batch is cut into jobs of about 1 MiB of decoded events, encoded on the blocking
//! pool (up to one job per core in flight) and sealed there into the log's record batches
//! (compressed with the topic's codec, one per partition), and appended strictly in the
//! order the batches arrived: the append only copies a batch and writes its base offset. Flushes, the `partial` rule above and group commit are applied as jobs are
//! appended, so they see exactly the records appended so far.
//!
//! # Memory
//!
//! Bounded by configuration, not by the workload: the queue from the source holds at most
//! `source.max_queued_bytes` of decoded events ([`queue`]), and a batch keeps its share of
//! that budget until its last job has encoded it; the jobs in flight hold their sealed
//! batches (about 1 MiB of events each, encoded into reused
//! [`cdc_schemas::encode::RecordBuf`]s and sealed into reused [`cdc_log::SealedBatch`]es: no
//! allocation per record) until they are appended in pieces of about
//! `APPEND_CHUNK_BYTES` (1 MiB before compression).

pub mod diskwait;
mod encode;
pub mod hidden;
pub mod out;
pub mod progress;
pub mod queue;
mod reconcile;
pub mod registry;
pub mod run;
mod schemas;
pub mod telemetry;
pub mod txmeta;

pub use diskwait::DiskWait;
pub use schemas::{changed_columns, subject};
use schemas::{level_name, restore_request};

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_log::{SealedBatch, TopicConfig};
use cdc_schemas::compat::CompatibilityLevel;
use cdc_schemas::encode::{Encoder, EncoderConfig, SchemaIds, TopicRouter};
use cdc_schemas::registry::{RegistryError, Schema, SchemaRegistry};
use cdc_schemas::{ChangeEvent, Checkpoint, Op, TableId, TableSchema};
use cdc_sources::keys::{MessageKeyColumns, Rekeyer, UnknownKeyColumn};
use cdc_sources::{DurablePublisher, SnapshotMark};

use encode::{BufPool, Encoders, Job, Piece, Segment, TableState};
use out::{KafkaTopic, Out, OutTopic};
use queue::{BatchReceiver, Queued, TryRecvError};

/// Encoded bytes per log append: a source batch is appended in pieces of about this size,
/// so the encode buffer and the log's batch buffer stay small whatever the batch size.
const APPEND_CHUNK_BYTES: usize = 1 << 20;
/// Room the disk budget must keep beyond a starting transaction's bytes for the pipeline
/// not to flush before it (`Pipeline::budget_tight`).
const BUDGET_SLACK: u64 = 64 << 10;

/// What the pipeline needs besides the log and the registry.
pub struct PipelineConfig {
    pub encoder: EncoderConfig,
    pub router: TopicRouter,
    pub topic_config: TopicConfig,
    /// `format.schema_change = "force"`.
    pub force_schema_change: bool,
    pub group_commit_bytes: u64,
    pub group_commit: Duration,
    /// `source.message_key_columns`.
    pub key_columns: MessageKeyColumns,
    /// Counts and warns about values carried in headers (shared across attempts).
    pub hidden: hidden::HiddenValues,
    /// `format.provide_transaction_metadata`: BEGIN/END records on `<name>.transaction`
    /// ([`txmeta`]).
    pub transaction_metadata: bool,
}

/// Why the pipeline stopped.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("table {table}: incompatible schema change (columns {columns}): {error}. Nothing of this table was appended or acknowledged past it.{key_hint} Ways out: make the change compatible (e.g. give new columns a default / keep types), relax the subject's compatibility (PUT /config/<subject> on the schema registry: the admin address for the embedded one), route the table to a new topic with a [[routing]] rule (regex, replacement), or set format.schema_change = \"force\" and restart")]
    Incompatible {
        table: String,
        columns: String,
        /// Boxed: the error stays small on the paths that do not fail.
        error: Box<RegistryError>,
        /// For a key subject: what the key was and how to keep it.
        key_hint: String,
    },
    #[error("{0}")]
    KeyColumns(#[from] UnknownKeyColumn),
    #[error("schema registry: {0}")]
    Registry(RegistryError),
    /// Definite: a restart would find the schema registered and not restore the level.
    #[error("schema registry: the forced schema change of {subject} went through, but its compatibility could not be set back to {}: {error}. Nothing past it was appended or acknowledged. Restore it by hand ({} on the registry), then start again", level_name(*level), restore_request(subject, *level))]
    RestoreCompatibility {
        subject: String,
        /// The subject's own level before; `None`: it had none.
        level: Option<CompatibilityLevel>,
        error: RegistryError,
    },
    #[error("encoding a record: {0}")]
    Encode(#[from] cdc_schemas::encode::EncodeError),
    #[error("an encoding task failed: {0}. Nothing of its batch was appended or acknowledged; report this as a bug")]
    EncodeTask(String),
    #[error("the embedded log: {0}")]
    Log(#[from] cdc_log::LogError),
    #[error("{0}")]
    Kafka(#[from] cdc_kafka::KafkaLogError),
    #[error("the log's flush task failed ({0}): nothing past the last durable checkpoint was acknowledged; the next start recovers the log from its ledger. Report this as a bug")]
    FlushTask(String),
    /// Told to stop (shutdown, or the source ended) while waiting for disk;
    /// [`Pipeline::run`] reports it as a clean stop.
    #[error("stopped while waiting for disk: nothing past the last durable checkpoint was acknowledged; the next start reads it again")]
    StoppedWhileWaitingForDisk,
}

impl PipelineError {
    pub fn is_transient(&self) -> bool {
        match self {
            PipelineError::Registry(e) => e.is_transient(),
            PipelineError::Log(e) => e.is_transient(),
            PipelineError::Kafka(e) => e.is_transient(),
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
    pub last_durable: Option<Checkpoint>,
    /// Keys deleted after a re-snapshot because the snapshot did not find them again.
    pub reconciled_deletes: u64,
}

/// Where a job is.
enum Work {
    Running(tokio::task::JoinHandle<Result<Vec<Piece>, PipelineError>>),
    Done(Result<Vec<Piece>, PipelineError>),
}

/// A job handed to the encoding stage, and what the pipeline does when it is appended.
struct InFlight {
    work: Work,
    /// The first job of a chunk of a transaction (a batch without a commit): the pending
    /// commit is flushed before any of it is appended.
    flush_before: bool,
    /// On the first job of the batch that opens a transaction: its BEGIN record, appended
    /// before the job's records (after the flushes above).
    tx_begin: Option<txmeta::TxRecord>,
    /// On the last job of a batch.
    end: Option<BatchEnd>,
}

struct BatchEnd {
    events: usize,
    commit: Option<Checkpoint>,
    mark: Option<SnapshotMark>,
    /// The END record of the transaction this batch ends, appended after its records.
    tx_end: Option<txmeta::TxRecord>,
}

/// A job of at most this many events is encoded inline when nothing is in flight: a
/// small transaction is not worth a trip to another thread.
const INLINE_EVENTS: usize = 64;

pub struct Pipeline {
    out: Out,
    registry: Arc<dyn SchemaRegistry>,
    cfg: PipelineConfig,
    /// Every registered encoder; copy-on-write, shared with the jobs in flight.
    encoders: Arc<Encoders>,
    topics: HashMap<String, OutTopic>,
    durable: DurablePublisher,
    pending: Option<(Checkpoint, Instant)>,
    bytes_since_flush: u64,
    stats: PipelineStats,
    /// Jobs in the order their records must be appended.
    inflight: VecDeque<InFlight>,
    /// Jobs allowed in flight before the pipeline waits for the oldest.
    max_inflight: usize,
    pool: BufPool,
    /// Records of a transaction whose commit is not appended yet are in the log.
    partial: bool,
    /// `source.message_key_columns`, applied to each table schema version.
    rekeyer: Rekeyer,
    /// The first table seen on each routed topic (to warn about shared keys once).
    routed_tables: HashMap<String, TableId>,
    /// Between a snapshot's `Begin` and `End`: where its records start.
    snapshot_start: Option<reconcile::Start>,
    /// Keys per pass of a reconciliation.
    reconcile_keys_per_pass: u64,
    /// Waiting for disk (budget, ENOSPC): its state, figures and shutdown signal.
    disk: DiskWait,
    /// `format.provide_transaction_metadata`; `None` when off (nothing done per event).
    txmeta: Option<txmeta::TxMeta>,
    /// Figures for `/metrics` and `/status`.
    telemetry: telemetry::Recorder,
}

impl InFlight {
    fn is_finished(&self) -> bool {
        match &self.work {
            Work::Running(h) => h.is_finished(),
            Work::Done(_) => true,
        }
    }
}

impl Pipeline {
    pub fn new(
        out: impl Into<Out>,
        registry: Arc<dyn SchemaRegistry>,
        cfg: PipelineConfig,
        durable: DurablePublisher,
    ) -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let rekeyer = Rekeyer::new(cfg.key_columns.clone());
        let txmeta = cfg
            .transaction_metadata
            .then(|| txmeta::TxMeta::new(cfg.encoder.format));
        Pipeline {
            out: out.into(),
            registry,
            cfg,
            encoders: Arc::new(Encoders::default()),
            topics: HashMap::new(),
            durable,
            pending: None,
            bytes_since_flush: 0,
            stats: PipelineStats::default(),
            inflight: VecDeque::new(),
            max_inflight: cores.clamp(2, 8),
            pool: BufPool::default(),
            partial: false,
            rekeyer,
            routed_tables: HashMap::new(),
            snapshot_start: None,
            reconcile_keys_per_pass: reconcile::KEYS_PER_PASS,
            disk: DiskWait::default(),
            txmeta,
            telemetry: telemetry::Telemetry::new(
                &cdc_schemas::metrics::Metrics::default(),
                &crate::admin::Status::default(),
            )
            .recorder(),
        }
    }

    /// Reports to `t` (the process's `/metrics` and `/status`) instead of private figures.
    pub fn with_telemetry(mut self, t: &telemetry::Telemetry) -> Self {
        self.telemetry = t.recorder();
        self
    }

    /// Waits for disk with `disk` (its shutdown signal and the figures it registered)
    /// instead of a private, signal-less one.
    pub fn with_disk_wait(mut self, disk: DiskWait) -> Self {
        self.disk = disk;
        self
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
        // then not acknowledged either, and the source sends them again. (Jobs still in
        // flight after an error were never appended: their batches are not acknowledged.)
        let r2 = if self.partial {
            if self.pending.is_some() {
                tracing::warn!("part of a transaction is appended: not flushing; the unacknowledged transactions are read again on restart");
            }
            if let Out::Kafka(k) = &self.out {
                let k = k.clone();
                // What the open Kafka transaction holds is resent from the position.
                tokio::task::block_in_place(|| k.abort());
            }
            Ok(())
        } else {
            self.flush_pending().await
        };
        let stopped = |r: Result<(), PipelineError>| match r {
            Err(PipelineError::StoppedWhileWaitingForDisk) => Ok(()),
            r => r,
        };
        if matches!(r, Err(PipelineError::StoppedWhileWaitingForDisk))
            || matches!(r2, Err(PipelineError::StoppedWhileWaitingForDisk))
        {
            tracing::info!(
                durable = ?self.stats.last_durable.as_ref().map(|p| p.to_string()),
                "stopped while waiting for disk (shutdown, or the source ended); what is not durable is read again on the next start"
            );
        }
        (self.stats, stopped(r).and(stopped(r2)))
    }

    async fn run_inner(&mut self, rx: &mut BatchReceiver) -> Result<(), PipelineError> {
        loop {
            // Append whatever is encoded already, in order.
            while self.inflight.front().is_some_and(InFlight::is_finished) {
                self.complete_front().await?;
            }
            let queued = match rx.try_recv() {
                Ok(b) => b,
                Err(TryRecvError::Empty) if !self.inflight.is_empty() => {
                    self.complete_front().await?;
                    continue;
                }
                Err(TryRecvError::Empty) => {
                    // Nothing queued (nor on its way) and nothing in flight: the group
                    // ends here.
                    if !rx.more_coming() {
                        self.flush_pending().await?;
                    }
                    match rx.recv().await {
                        Some(b) => b,
                        None => return self.drain().await,
                    }
                }
                Err(TryRecvError::Disconnected) => return self.drain().await,
            };
            self.submit(queued).await?;
            while self.inflight.len() > self.max_inflight {
                self.complete_front().await?;
            }
        }
    }

    /// Appends every job in flight.
    async fn drain(&mut self) -> Result<(), PipelineError> {
        while !self.inflight.is_empty() {
            self.complete_front().await?;
        }
        Ok(())
    }

    /// Flushes the pending commit, waiting for disk (and retrying) while the file system
    /// is full: a failed flush wrote no ledger and keeps its partitions dirty.
    async fn flush_pending(&mut self) -> Result<(), PipelineError> {
        loop {
            match self.try_flush_pending().await {
                Err(PipelineError::Log(e)) if diskwait::is_disk_wait(&e) => {
                    self.disk.pause(self.out.log(), &e, self.partial).await?;
                }
                r => return r,
            }
        }
    }

    /// One flush of the pending commit; on a log error the commit stays pending.
    async fn try_flush_pending(&mut self) -> Result<(), PipelineError> {
        let Some((pos, since)) = self.pending.take() else {
            return Ok(());
        };
        let out = self.out.clone();
        let cp = pos.to_bytes();
        match tokio::task::spawn_blocking(move || out.flush(&cp)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                self.pending = Some((pos, since));
                return Err(e);
            }
            // The flush may or may not have reached the disk: nothing is published, and
            // the supervisor stops rather than guess (a restart recovers from the ledger).
            Err(e) => return Err(PipelineError::FlushTask(e.to_string())),
        };
        self.disk.resumed();
        self.bytes_since_flush = 0;
        self.stats.flushes += 1;
        self.telemetry.durable(&pos);
        self.stats.last_durable = Some(pos.clone());
        tracing::debug!(position = %pos, "durable");
        self.durable.publish(pos);
        Ok(())
    }

    /// Prepares (registers) the schemas of a batch and hands its events to the encoding
    /// stage as jobs; nothing is appended here.
    async fn submit(&mut self, mut queued: Queued) -> Result<(), PipelineError> {
        let commit = queued.batch.commit.take();
        let mark = queued.batch.snapshot.take();
        if !self.rekeyer.is_empty() {
            self.rekey(&mut queued.batch.events)?;
        }
        let n = queued.batch.events.len();
        let now_ns = now_ns();
        self.telemetry.count_changes(&queued.batch.events);
        self.telemetry
            .received(&queued.batch.events, &commit, now_ns);
        let (tx_begin, tx_end) = match self.txmeta.as_mut() {
            Some(t) => {
                let marks = t.scan(&queued.batch.events, commit.is_some());
                self.tx_records(marks, now_ns / 1_000_000).await?
            }
            None => (None, None),
        };
        // A batch may hold two versions of a table's schema (a Relation in the middle of a
        // transaction): it is taken in segments within which each table has one version.
        // Every segment's schemas are registered before any record of the batch is
        // appended, so an incompatible change appends nothing of the batch, and each
        // segment keeps the encoders of its own versions.
        let mut segments: Vec<Segment> = Vec::new();
        {
            let events = &queued.batch.events;
            let mut start = 0;
            while start < n {
                let mut end = start;
                let mut versions: HashMap<&TableId, &Arc<TableSchema>> = HashMap::new();
                let mut last: Option<&Arc<TableSchema>> = None;
                while end < n {
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
                segments.push(Segment {
                    range: start..end,
                    encoders: self.encoders.clone(),
                });
                start = end;
            }
        }
        // Jobs of about JOB_BYTES of decoded events (the queue measured the batch).
        let per_job = if n == 0 {
            1
        } else {
            ((n as u64 * encode::JOB_BYTES) / queued.bytes().max(1)).max(1) as usize
        };
        let batch = Arc::new(queued);
        let mut jobs: Vec<Job> = Vec::new();
        for seg in segments {
            for range in encode::split(seg.range, per_job) {
                jobs.push(Job {
                    batch: batch.clone(),
                    part: Segment {
                        range,
                        encoders: seg.encoders.clone(),
                    },
                    now_ns,
                    hidden: self.cfg.hidden.clone(),
                });
            }
        }
        drop(batch);
        let chunk_of_tx = commit.is_none() && n > 0;
        let end = BatchEnd {
            events: n,
            commit,
            mark,
            tx_end,
        };
        if jobs.is_empty() {
            // No events: no change record, so no BEGIN (only the END of a transaction
            // whose last chunk is empty).
            self.inflight.push_back(InFlight {
                work: Work::Done(Ok(Vec::new())),
                flush_before: false,
                tx_begin: None,
                end: Some(end),
            });
            return Ok(());
        }
        let mut tx_begin = tx_begin;
        let count = jobs.len();
        let mut end = Some(end);
        for (i, job) in jobs.into_iter().enumerate() {
            let small = job.part.range.len() <= INLINE_EVENTS;
            let work = if self.inflight.is_empty() && count == 1 && small {
                Work::Done(job.run(&self.pool))
            } else {
                let pool = self.pool.clone();
                Work::Running(tokio::task::spawn_blocking(move || job.run(&pool)))
            };
            self.inflight.push_back(InFlight {
                work,
                flush_before: i == 0 && chunk_of_tx,
                tx_begin: tx_begin.take(),
                end: if i + 1 == count { end.take() } else { None },
            });
        }
        Ok(())
    }

    /// Appends the oldest job's records (waiting for its encoding) and applies its batch's
    /// end: the commit becomes pending, group commit may flush.
    async fn complete_front(&mut self) -> Result<(), PipelineError> {
        let Some(job) = self.inflight.pop_front() else {
            return Ok(());
        };
        let encoded = match job.work {
            Work::Done(r) => r,
            Work::Running(h) => h
                .await
                .map_err(|e| PipelineError::EncodeTask(e.to_string()))?,
        };
        if job.flush_before {
            // A chunk of a transaction: never flush once part of it is appended.
            self.flush_pending().await?;
        }
        let pieces = encoded?;
        if !self.partial && self.pending.is_some() && self.budget_tight(&pieces, job.end.is_none())
        {
            // A transaction starts and may not fit in what the budget has left. Once part
            // of it is appended no flush may cover it, so a refusal inside it would leave
            // the complete transactions before it unflushed too: neither retention nor a
            // consumer could release them, and the wait would never end.
            self.flush_pending().await?;
        }
        if let Some(r) = &job.tx_begin {
            // Before the transaction's first record, after the flushes above: no flush
            // may cover it before the transaction's END is appended (`txmeta`).
            self.append_tx_record(r).await?;
        }
        let mut result = Ok(());
        for p in pieces {
            if result.is_ok() {
                match self.append_piece(&p).await {
                    Ok(()) => {
                        self.stats.records += p.records;
                        self.bytes_since_flush += p.bytes;
                        self.telemetry.appended(p.topic.name(), p.records, p.bytes);
                    }
                    Err(e) => result = Err(e),
                }
            }
            self.pool.give_piece(p);
        }
        result?;
        let Some(end) = job.end else {
            return Ok(());
        };
        if let Some(r) = &end.tx_end {
            // After the transaction's last record and before its commit is pending: the
            // flush that makes the commit durable covers it (`txmeta`).
            self.append_tx_record(r).await?;
        }
        if matches!(end.mark, Some(SnapshotMark::End)) {
            // Before the snapshot's position can become pending: its deletes go under it.
            self.reconcile_snapshot().await?;
        }
        if end.commit.is_some() || end.events == 0 {
            self.partial = false;
        }
        self.stats.events += end.events as u64;
        if let Some(SnapshotMark::Begin { tables }) = &end.mark {
            // Durable first (everything before it, then its `SnapshotIncomplete`), so the
            // start offsets are where the snapshot's records begin.
            self.flush_pending().await?;
            if let Some(pos) = end.commit.clone() {
                self.stats.transactions += 1;
                self.telemetry.committed();
                self.pending = Some((pos, Instant::now()));
                self.flush_pending().await?;
            }
            let topics: Vec<String> = tables
                .iter()
                .map(|t| self.cfg.router.topic_for(t))
                .collect();
            self.snapshot_start = match &self.out {
                Out::Log(log) => {
                    let log = log.clone();
                    Some(tokio::task::block_in_place(|| {
                        reconcile::Start::at(&log, topics)
                    })?)
                }
                Out::Kafka(k) => {
                    let k = k.clone();
                    Some(tokio::task::block_in_place(|| {
                        let reader = cdc_kafka::KafkaReader::connect(k.settings())?;
                        reconcile::Start::at_kafka(&reader, topics)
                    })?)
                }
            };
            return Ok(());
        }
        if let Some(pos) = end.commit {
            self.stats.transactions += 1;
            self.telemetry.committed();
            let since = self
                .pending
                .as_ref()
                .map(|p| p.1)
                .unwrap_or_else(Instant::now);
            self.pending = Some((pos, since));
        }
        if let Some((_, since)) = &self.pending {
            if self.bytes_since_flush >= self.cfg.group_commit_bytes
                || since.elapsed() >= self.cfg.group_commit
            {
                self.flush_pending().await?;
            }
        }
        Ok(())
    }

    /// Whether the transaction starting with `pieces` may exhaust the disk budget before
    /// it is whole: a budget is set and what it has left is less than twice their bytes
    /// before compression plus [`BUDGET_SLACK`] (segment and index files grow in steps),
    /// or the transaction goes on in further jobs (`more`, its size unknown here).
    fn budget_tight(&self, pieces: &[Piece], more: bool) -> bool {
        let Some(room) = self.out.budget_room() else {
            return false;
        };
        let need: u64 = pieces.iter().map(|p| p.bytes).sum();
        more || room < need.saturating_mul(2).saturating_add(BUDGET_SLACK)
    }

    /// Appends a piece's sealed batches, each to its partition (the encode worker split
    /// the records by Kafka's partitioner). One partition at a time, so that an append the
    /// log refuses for lack of disk is retried alone, after the wait, without appending
    /// the others again.
    async fn append_piece(&mut self, piece: &Piece) -> Result<(), PipelineError> {
        let topic = match &piece.topic {
            OutTopic::Log(t) => t,
            OutTopic::Kafka(t) => {
                let (Out::Kafka(k), Some(u)) = (&self.out, &piece.unsealed) else {
                    unreachable!("a Kafka topic's pieces are unsealed, for the Kafka log");
                };
                // librdkafka copies each record into its queue: cheap enough inline.
                tokio::task::block_in_place(|| send_unsealed(k, t, u))?;
                self.partial = true;
                return Ok(());
            }
        };
        for (partition, batch) in &piece.batches {
            self.append_retrying(topic, *partition, batch).await?;
        }
        Ok(())
    }

    /// A transaction topic record (one partition).
    async fn append_tx_record(&mut self, r: &txmeta::TxRecord) -> Result<(), PipelineError> {
        match (&r.topic, &self.out) {
            (OutTopic::Log(t), _) => {
                let t = t.clone();
                self.append_retrying(&t, 0, &r.batch).await?;
            }
            (OutTopic::Kafka(t), Out::Kafka(k)) => {
                let rec = cdc_kafka::OutRecord {
                    key: Some(&r.key),
                    value: Some(&r.value),
                    headers: &[],
                    timestamp_ms: r.ts,
                };
                tokio::task::block_in_place(|| k.send(&t.name, 0, &rec))?;
                self.partial = true;
            }
            (OutTopic::Kafka(_), Out::Log(_)) => {
                unreachable!("topics come from the pipeline's log")
            }
        }
        self.stats.records += 1;
        Ok(())
    }

    /// One batch to one partition, waiting for disk and retrying while the log refuses it
    /// for lack of room (a refused append changed nothing: `diskwait`).
    async fn append_retrying(
        &mut self,
        topic: &cdc_log::Topic,
        partition: u32,
        batch: &SealedBatch,
    ) -> Result<(), PipelineError> {
        loop {
            // Appends write without fsync and copy the batch once: cheap enough inline,
            // outside the async scheduling.
            match tokio::task::block_in_place(|| topic.append_sealed(partition, batch)) {
                Ok(_) => {
                    // From the first append of a batch until its commit is appended, the
                    // log holds part of a transaction: no flush may cover it.
                    self.partial = true;
                    self.disk.resumed();
                    return Ok(());
                }
                Err(e) if diskwait::is_disk_wait(&e) => {
                    if !self.partial && self.pending.is_some() {
                        // Nothing of this transaction is in the log yet: make the complete
                        // ones durable first, so consumers can read (and release) them and
                        // the source can confirm them while we wait.
                        match self.try_flush_pending().await {
                            Ok(()) => continue,
                            Err(PipelineError::Log(f)) if diskwait::is_disk_wait(&f) => {}
                            Err(f) => return Err(f),
                        }
                    }
                    self.disk.pause(self.out.log(), &e, self.partial).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The topic `name`, created if new; a creation refused for lack of disk is retried
    /// after a wait (an interrupted creation leaves no topic: `topic.conf` is written last).
    async fn topic(&mut self, name: &str) -> Result<OutTopic, PipelineError> {
        if let Some(t) = self.topics.get(name) {
            return Ok(t.clone());
        }
        self.topic_with(name, self.cfg.topic_config.clone()).await
    }

    /// [`Pipeline::topic`] with `config` for a new topic.
    async fn topic_with(
        &mut self,
        name: &str,
        config: TopicConfig,
    ) -> Result<OutTopic, PipelineError> {
        if let Some(t) = self.topics.get(name) {
            return Ok(t.clone());
        }
        let log = match &self.out {
            Out::Log(log) => log.clone(),
            Out::Kafka(k) => {
                let k = k.clone();
                let spec = out::kafka_topic_spec(&config);
                let partitions = tokio::task::block_in_place(|| k.ensure_topic(name, &spec))?;
                let t = OutTopic::Kafka(Arc::new(KafkaTopic::new(name, partitions)));
                self.topics.insert(name.to_string(), t.clone());
                return Ok(t);
            }
        };
        let t = loop {
            match log.topic_or_create(name, config.clone()) {
                Ok(t) => break OutTopic::Log(t),
                Err(e) if diskwait::is_disk_wait(&e) => {
                    self.disk.pause(self.out.log(), &e, self.partial).await?;
                }
                Err(e) => return Err(e.into()),
            }
        };
        self.disk.resumed();
        self.topics.insert(name.to_string(), t.clone());
        Ok(t)
    }
}

/// Produces a Kafka piece's records, each to its partition, with the headers the embedded
/// log would store (a truncate copy says how many partitions got one).
fn send_unsealed(
    k: &cdc_kafka::KafkaLog,
    t: &KafkaTopic,
    u: &encode::Unsealed,
) -> Result<(), PipelineError> {
    let parts_text = t.partitions.to_string();
    let mut headers: Vec<cdc_log::HeaderRef<'_>> = Vec::new();
    let mut pairs: Vec<(&str, Option<&[u8]>)> = Vec::new();
    for &(p, i) in &u.order {
        let i = i as usize;
        headers.clear();
        encode::push_headers(&u.buf, i, &mut headers);
        pairs.clear();
        pairs.extend(headers.iter().map(|h| (h.key, h.value)));
        if t.partitions > 1
            && u.buf.spans[i].kind == cdc_schemas::encode::RecordKind::Change(Op::Truncate)
        {
            pairs.push((
                cdc_schemas::encode::HEADER_TRUNCATE_PARTITIONS,
                Some(parts_text.as_bytes()),
            ));
        }
        k.send(
            &t.name,
            p,
            &cdc_kafka::OutRecord {
                key: u.buf.key(i),
                value: u.buf.value(i),
                headers: &pairs,
                timestamp_ms: u.ts,
            },
        )?;
    }
    Ok(())
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod diskwait_tests;
#[cfg(test)]
mod tests;
