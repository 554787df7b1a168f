//! The transaction metadata topic (`format.provide_transaction_metadata = true`, Debezium's
//! `provide.transaction.metadata`): a BEGIN record before the first change record of each
//! streamed transaction and an END record after its last, on `<name>.transaction` (one
//! partition, never compacted: BEGIN and END share their key), in the configured record
//! format. Record layout: `cdc_schemas::encode::txmeta`.
//!
//! # What a transaction is, and what END counts
//!
//! The events that carry a `transaction` block (`ChangeEvent::tx`, filled by the sources),
//! from the batch holding the first of them to the batch that ends with a `commit`: one
//! batch, or the chunks of a large transaction (`ChangeBatch`: only the last chunk has a
//! `commit`), which get one BEGIN before the first chunk's first record and one END after
//! the last chunk's last. Events without the block open nothing and are not counted:
//! snapshot rows, Postgres non-transactional logical messages (and MySQL truncates, which
//! Debezium writes outside any transaction too). A transaction whose changes were all
//! filtered out has no records, so no BEGIN/END either (as Debezium).
//!
//! - `id`: the `transaction.id` of the transaction's change records (the source's
//!   `TransactionInfo::id`: Postgres `txid:commit LSN`, MySQL / MariaDB the GTID or
//!   `file=…,pos=…`), so a consumer can match them;
//! - `event_count`: one per change event, two for an update that changes the key (the
//!   delete and create the encoder writes for it, as `total_order` counts them);
//!   tombstones are not events. `data_collections`: the same per table (`schema.table` /
//!   `db.table`; Postgres logical messages as [`MESSAGE_DATA_COLLECTION`]), in the order
//!   of their first change in the transaction;
//! - `ts_ms`: the `source.ts_ms` of the transaction's first change (BEGIN) and of its last
//!   (END): the commit time.
//!
//! # Ordering and durability (what sinks rely on)
//!
//! **BEGIN is appended before the first change record of its transaction, and END in the
//! same durable flush as the last change record of its transaction (never before it).**
//! So a reader that can read an END can read every change record that END counts, and a
//! reader that sees a change record with a `transaction` block has seen its BEGIN.
//!
//! Why it holds: the records are appended by `complete_front`, in the order batches
//! arrived: BEGIN with the first job of the batch that opens the transaction (after that
//! job's `flush_before` and budget flushes, which must not cover it), END right after the
//! last job of the batch that carries the commit, before the commit becomes pending. The
//! pipeline never flushes while a transaction is partly appended (`partial`, see the
//! pipeline's docs), and BEGIN and END are parts of their transaction; so BEGIN, the
//! changes and END become durable in one flush, with the commit's checkpoint. A crash or
//! a failed attempt before it discards all of them, and the source sends the transaction
//! again to a fresh pipeline, which writes a fresh BEGIN: none is ever durable twice.
//!
//! # Cost
//!
//! With the setting off the pipeline holds no [`TxMeta`] and does nothing per event. With
//! it on, one pass over each batch's events (runs of one table cost one pointer compare
//! per event; no allocation per event) and two small records per transaction.

use std::collections::HashMap;
use std::sync::Arc;

use cdc_log::{CleanupPolicy, NewRecord, SealedBatch, TopicConfig};

use super::out::OutTopic;
use cdc_schemas::encode::txmeta::{data_collection, MESSAGE_DATA_COLLECTION};
use cdc_schemas::encode::{RecordFormat, SchemaIds, TransactionMetadataEncoder};
use cdc_schemas::{ChangeEvent, TableId, TableSchema};

use super::{schemas::subject, Pipeline, PipelineError};

/// The topic's name for connector `prefix` (Debezium: `<topic.prefix>.transaction`).
pub fn transaction_topic(prefix: &str) -> String {
    format!("{prefix}.transaction")
}

/// One BEGIN or END record, sealed for its topic.
pub(super) struct TxRecord {
    pub topic: OutTopic,
    /// For Kafka (which seals its own batches): the record itself.
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub ts: i64,
    pub batch: SealedBatch,
}

/// The pipeline's transaction metadata state.
pub(super) struct TxMeta {
    format: RecordFormat,
    /// Registered and with its topic, from the first transaction on.
    ready: Option<(TransactionMetadataEncoder, OutTopic)>,
    /// The transaction whose BEGIN is (or will be) appended and whose END is not.
    open: Option<OpenTx>,
    /// Said once: a batch held changes of two transactions (against the source contract).
    warned_mixed: bool,
}

/// Counts of the open transaction.
struct OpenTx {
    id: Arc<str>,
    last_ts_ms: i64,
    events: u64,
    /// Per data collection, in the order of first appearance.
    collections: Vec<(String, u64)>,
    by_table: HashMap<TableId, usize>,
    /// The previous event's table schema and its entry: runs of one table skip the map.
    last: Option<(Arc<TableSchema>, usize)>,
    messages: Option<usize>,
}

/// What one batch adds: BEGIN (id, ts_ms) before its first record, END after its last.
#[derive(Default)]
pub(super) struct Marks {
    begin: Option<(Arc<str>, i64)>,
    end: Option<OpenTx>,
}

impl Marks {
    pub fn is_empty(&self) -> bool {
        self.begin.is_none() && self.end.is_none()
    }
}

impl OpenTx {
    fn new(id: Arc<str>, ts_ms: i64) -> Self {
        OpenTx {
            id,
            last_ts_ms: ts_ms,
            events: 0,
            collections: Vec::new(),
            by_table: HashMap::new(),
            last: None,
            messages: None,
        }
    }

    fn count(&mut self, ev: &ChangeEvent) {
        // The encoder writes a key change as a delete and a create: two events.
        let n = 1 + u64::from(ev.changes_key());
        self.events += n;
        self.last_ts_ms = ev.source_ts_ms;
        let i = match ev.table.as_ref() {
            Some(t) => match &self.last {
                Some((s, i)) if Arc::ptr_eq(s, t) => *i,
                _ => {
                    let i = match self.by_table.get(&t.id) {
                        Some(i) => *i,
                        None => {
                            self.collections.push((data_collection(&t.id), 0));
                            let i = self.collections.len() - 1;
                            self.by_table.insert(t.id.clone(), i);
                            i
                        }
                    };
                    self.last = Some((t.clone(), i));
                    i
                }
            },
            None => *self.messages.get_or_insert_with(|| {
                self.collections
                    .push((MESSAGE_DATA_COLLECTION.to_string(), 0));
                self.collections.len() - 1
            }),
        };
        self.collections[i].1 += n;
    }
}

impl TxMeta {
    pub fn new(format: RecordFormat) -> Self {
        TxMeta {
            format,
            ready: None,
            open: None,
            warned_mixed: false,
        }
    }

    /// Takes one batch's events (after re-keying: the key decides what a key change is)
    /// into the counts; `commit`: the batch ends its transaction.
    pub fn scan(&mut self, events: &[ChangeEvent], commit: bool) -> Marks {
        let mut marks = Marks::default();
        for ev in events {
            let Some(tx) = ev.tx.as_ref() else { continue };
            let open = match &mut self.open {
                Some(o) => {
                    if !Arc::ptr_eq(&o.id, &tx.id) && *o.id != *tx.id && !self.warned_mixed {
                        // A batch is one transaction (or a chunk of one): counted under
                        // the open one rather than cut in the middle of a batch.
                        self.warned_mixed = true;
                        tracing::warn!(open = %o.id, event = %tx.id, "a batch holds changes of two transactions; the transaction topic counts them under the first (report this as a bug of the source)");
                    }
                    o
                }
                None => {
                    marks.begin = Some((tx.id.clone(), ev.source_ts_ms));
                    self.open
                        .insert(OpenTx::new(tx.id.clone(), ev.source_ts_ms))
                }
            };
            open.count(ev);
        }
        if commit {
            marks.end = self.open.take();
        }
        marks
    }
}

impl Pipeline {
    /// The transaction topic's records for one batch's `marks`, encoded and sealed (the
    /// encoder is registered and the topic created on first use). `ts`: the records'
    /// log timestamp, as the batch's change records get.
    pub(super) async fn tx_records(
        &mut self,
        marks: Marks,
        ts: i64,
    ) -> Result<(Option<TxRecord>, Option<TxRecord>), PipelineError> {
        if marks.is_empty() {
            return Ok((None, None));
        }
        self.prepare_tx_topic().await?;
        let Some((enc, topic)) = self.txmeta.as_ref().and_then(|t| t.ready.as_ref()) else {
            return Ok((None, None));
        };
        let (mut key, mut value) = (Vec::new(), Vec::new());
        let begin = match marks.begin {
            Some((id, ts_ms)) => {
                enc.encode_begin(&id, ts_ms, &mut key, &mut value)?;
                Some(seal(topic, &key, &value, ts)?)
            }
            None => None,
        };
        let end = match marks.end {
            Some(o) => {
                key.clear();
                value.clear();
                enc.encode_end(
                    &o.id,
                    o.events,
                    &o.collections,
                    o.last_ts_ms,
                    &mut key,
                    &mut value,
                )?;
                Some(seal(topic, &key, &value, ts)?)
            }
            None => None,
        };
        Ok((begin, end))
    }

    /// Registers the transaction metadata schemas (under `<topic>-key` / `<topic>-value`,
    /// whatever the format, as every topic's) and creates the topic, once.
    async fn prepare_tx_topic(&mut self) -> Result<(), PipelineError> {
        let Some(t) = self.txmeta.as_ref() else {
            return Ok(());
        };
        if t.ready.is_some() {
            return Ok(());
        }
        let mut enc = TransactionMetadataEncoder::new(t.format)?;
        let name = transaction_topic(self.cfg.router.prefix());
        let label = "<transaction metadata>";
        let k = enc.avro_key_schema();
        let key = self
            .register_one(&subject(&name, false, "key", k), k, label, None, true)
            .await?;
        let v = enc.avro_value_schema();
        let value = self
            .register_one(&subject(&name, false, "value", v), v, label, None, false)
            .await?;
        enc.set_schema_ids(SchemaIds {
            key: Some(key),
            value,
        });
        tracing::info!(
            topic = name,
            key_id = key,
            value_id = value,
            "transaction metadata schemas registered"
        );
        let config = TopicConfig {
            partitions: 1,
            cleanup_policy: CleanupPolicy::DELETE,
            ..self.cfg.topic_config.clone()
        };
        let topic = self.topic_with(&name, config).await?;
        if let Some(t) = self.txmeta.as_mut() {
            t.ready = Some((enc, topic));
        }
        Ok(())
    }
}

/// One record, sealed with `topic`'s codec for the embedded log.
fn seal(topic: &OutTopic, key: &[u8], value: &[u8], ts: i64) -> Result<TxRecord, PipelineError> {
    let mut batch = SealedBatch::new();
    if let OutTopic::Log(t) = topic {
        let mut scratch = Vec::new();
        batch.seal(
            &[NewRecord::new(Some(key), Some(value), ts)],
            t.config().compression,
            &mut scratch,
        )?;
    }
    Ok(TxRecord {
        topic: topic.clone(),
        key: key.to_vec(),
        value: value.to_vec(),
        ts,
        batch,
    })
}
