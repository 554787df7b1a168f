//! The replication stream of a Postgres source: pgoutput messages into transactions,
//! handed to the pipeline in commit order with their positions.
//!
//! # Positions and resume
//!
//! A transaction's batch carries `PgPosition { commit_lsn, lsn: end_lsn, tx_id }`: the
//! commit record's start and end; `lsn` is what the stream task confirms once the
//! pipeline has made the batch durable. On resume the server may resend transactions from
//! the slot's `confirmed_flush_lsn`, which can lag behind our durable checkpoint. A
//! transaction whose commit LSN is below the stored `lsn` (the end of the last durable
//! commit, or the consistent point) committed at or before the stored one and is skipped.
//! Non-transactional messages use `lsn = message LSN`: pgoutput's message LSN is the end
//! of the message's WAL record, so a transaction committing right after it has exactly
//! that commit LSN and is not skipped; a resent message (LSN <= the stored one) is.
//!
//! # Large transactions
//!
//! With `streaming` on (the default; protocol 2+, Postgres 14+), the server sends a
//! transaction that outgrows its `logical_decoding_work_mem` while it is still open, in
//! blocks interleaved with other transactions. Each block goes as received to that
//! transaction's file in the [`spill`](super::spill) directory; at Stream Commit the file is
//! decoded in order (its Relation and Type messages applied as they come, data of aborted
//! subtransactions skipped) and handed to the pipeline; Stream Abort deletes it. So the
//! server's WAL sender does not have to spill and re-decode it, and our memory holds one
//! write buffer per open streamed transaction plus one chunk in flight.
//!
//! Every transaction, streamed or not, reaches the pipeline in chunks of `max_batch_events`
//! with the commit position on the last one; the pipeline appends the chunks but flushes
//! only at the commit, so memory is bounded whatever the transaction's size.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cdc_schemas::{
    ChangeEvent, Checkpoint, LogicalMessage as EvMessage, Lsn, PgPosition, SourcePosition, TableId,
    TransactionInfo,
};
use tokio::sync::{mpsc, watch};

use super::config::PgSourceConfig;
use super::metrics::{monitor, PgMetrics};
use super::pgoutput::{PgOutputDecoder, PgOutputMessage};
use super::relation::{load_table_catalog, load_types, RelationCache, StaticTypeResolver};
use super::replication::{quote_ident, ReplicationConnection, ReplicationError, StreamOptions};
use super::setup::slot_row;
use super::snapshot::now_ms;
use super::source::{definite, send, sql_err, HEARTBEAT_PREFIX, PG_EPOCH_MS};
use super::spill::{SpillError, SpillReader, SpillStore};
use super::stream_task::durable_lsn;
use crate::filter::TableFilter;
use crate::{ChangeBatch, SourceContext, SourceError};

/// SQLSTATE `object_not_in_prerequisite_state`: what START_REPLICATION (and a running
/// walsender) answers for a slot whose WAL is gone, among other prerequisites.
pub(super) const OBJECT_NOT_IN_PREREQUISITE_STATE: &str = "55000";

/// Classifies a failure of the replication stream. An invalidated slot is recognised by
/// its SQLSTATE and then confirmed by the slot's own `wal_status`, never by the text of
/// a message (which is translated with `lc_messages` and changes between versions).
pub(super) async fn replication_failure(
    client: &tokio_postgres::Client,
    slot: &str,
    e: ReplicationError,
) -> SourceError {
    if e.sqlstate() == Some(OBJECT_NOT_IN_PREREQUISITE_STATE) {
        if let Ok(Some(row)) = slot_row(client, slot).await {
            if row.wal_status.as_deref() == Some("lost") {
                return definite(
                    format!("replication slot {slot:?}"),
                    format!("the slot was invalidated (wal_status = lost): the server removed WAL it still needed ({e})"),
                    "set snapshot.mode = \"when_needed\" and restart to take a new snapshot, or start over with an empty log dir; raise max_slot_wal_keep_size and watch the retained-WAL alarm to prevent it",
                );
            }
        }
    }
    e.into()
}

pub(super) struct OpenTx {
    xid: u32,
    final_lsn: Lsn,
    ts_ms: i64,
    skip: bool,
    events: Vec<ChangeEvent>,
    /// [`ChangeEvent::approx_size`] of `events`.
    events_bytes: u64,
    total: u64,
    per_table: HashMap<TableId, u64>,
    /// `xid:final_lsn`, Debezium's transaction id; shared by the transaction's events.
    tx_id: Option<Arc<str>>,
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn stream(
    cfg: PgSourceConfig,
    client: tokio_postgres::Client,
    repl: ReplicationConnection,
    start: Lsn,
    skip_before: Lsn,
    ctx: SourceContext,
) -> Result<(), SourceError> {
    let metrics = PgMetrics::register(&ctx.metrics);
    let opts = StreamOptions {
        streaming: cfg.streaming,
        messages: true,
        status_interval: cfg.status_interval,
        ..StreamOptions::default()
    };
    let stream = repl
        .start(
            &cfg.slot,
            start,
            &[cfg.publication.as_str()],
            &opts,
            ctx.durable.clone(),
        )
        .await;
    let mut stream = match stream {
        Ok(s) => s,
        Err(e) => return Err(replication_failure(&client, &cfg.slot, e).await),
    };
    let (alarm_tx, mut alarm_rx) = mpsc::channel::<SourceError>(1);
    let monitor = tokio::spawn(monitor(
        cfg.clone(),
        metrics.clone(),
        ctx.durable.clone(),
        alarm_tx,
    ));

    let mut spill = match SpillStore::open(&cfg.spill_dir, ctx.disk_budget.clone()) {
        Ok(s) => Some(s),
        Err(e) => {
            monitor.abort();
            stream.stop().await;
            return Err(spill_err(e));
        }
    };
    let mut dec = Decoding {
        client: &client,
        resolver: Arc::new(StaticTypeResolver::new()),
        cache: RelationCache::new(),
        filter: &cfg.filter,
        max: cfg.max_batch_events.max(1),
        batches: ctx.batches.clone(),
        toast_reselect: cfg.toast_reselect,
        session_set: false,
    };
    dec.cache = RelationCache::with_resolver(dec.resolver.clone());
    let mut decoder = PgOutputDecoder::new();
    let mut tx: Option<OpenTx> = None;
    // The top-level xid of the streamed block being received (Stream Start … Stop).
    let mut stream_xid: Option<u32> = None;
    let mut last_emitted = skip_before;
    let mut shutdown = ctx.shutdown.clone();
    let result: Result<(), SourceError> = loop {
        let x = tokio::select! {
            // Biased: shutdown first (stop reading promptly), then a definite alarm from the
            // slot monitor, then the stream.
            biased;
            _ = shutdown.changed() => break Ok(()),
            Some(e) = alarm_rx.recv() => break Err(e),
            m = stream.next_message() => match m {
                Ok(Some(x)) => x,
                Ok(None) => break Err(SourceError::transient("replication stream", "ended")),
                Err(e) => break Err(replication_failure(&client, &cfg.slot, e).await),
            },
        };
        let msg = match decoder.decode_next(&x.data) {
            Ok(m) => m,
            Err(e) => {
                break Err(definite(
                    "decoding pgoutput",
                    e.to_string(),
                    "report this as a bug",
                ))
            }
        };
        // Inside a streamed block every message belongs to the open transaction: spill it
        // as received; it is decoded (Relation and Type included) at Stream Commit.
        if let Some(xid) = stream_xid {
            if !matches!(msg, PgOutputMessage::StreamStop) {
                // The spill shares the log's disk budget: while it is full the source
                // stops reading (the slot retains the WAL instead), as the log's appends
                // wait too.
                if !ctx.disk_budget.has_room() {
                    let waiting = ctx.metrics.gauge(
                        "cdc_pg_spill_waiting_for_disk",
                        "1 while spilling a streamed transaction waits for the disk budget (log.disk_budget_bytes)",
                    );
                    waiting.set(1);
                    let used = ctx.disk_budget.used_bytes();
                    tracing::warn!(
                        budget = ?ctx.disk_budget.limit(),
                        used,
                        spilled = ctx.disk_budget.own_bytes(),
                        "waiting for disk: the disk budget (log.disk_budget_bytes) is full; spilling of a streamed transaction waits until retention or consumers free space (a transaction larger than the budget never fits: raise the budget)"
                    );
                    let room = ctx
                        .disk_budget
                        .wait_for_room(&mut shutdown, Duration::from_millis(500))
                        .await;
                    waiting.set(0);
                    if !room {
                        break Ok(());
                    }
                    tracing::info!("disk budget has room again: spilling resumes");
                }
                let store = spill.as_mut().expect("spill store open while streaming");
                if let Err(e) = store.append(xid, x.wal_start, &x.data) {
                    break Err(spill_err(e));
                }
                continue;
            }
        }
        match msg {
            PgOutputMessage::Begin(b) => {
                tx = Some(OpenTx {
                    xid: b.xid,
                    final_lsn: b.final_lsn,
                    ts_ms: b.commit_ts / 1000 + PG_EPOCH_MS,
                    skip: b.final_lsn < last_emitted,
                    events: Vec::new(),
                    events_bytes: 0,
                    total: 0,
                    per_table: HashMap::new(),
                    tx_id: None,
                });
            }
            PgOutputMessage::Relation(r) => {
                if let Err(e) = dec.relation(&r).await {
                    break Err(e);
                }
            }
            PgOutputMessage::Type(t) => dec.cache.apply_type(&t),
            PgOutputMessage::Insert(_)
            | PgOutputMessage::Update(_)
            | PgOutputMessage::Delete(_)
            | PgOutputMessage::Truncate(_)
            | PgOutputMessage::Message(_) => {
                let Some(open) = tx.as_mut() else {
                    // Non-transactional logical message.
                    if let PgOutputMessage::Message(m) = msg {
                        // A message's LSN is the *end* of its WAL record (Postgres
                        // queues it at `buf->endptr`), which is where the next record
                        // starts: a transaction whose commit record follows it has
                        // commit_lsn == m.lsn and must not be skipped or confirmed
                        // away. So the message's position is exactly m.lsn, and the
                        // message itself was emitted already if m.lsn <= last_emitted.
                        let pos = SourcePosition::Postgres(PgPosition {
                            commit_lsn: m.lsn,
                            lsn: m.lsn,
                            tx_id: None,
                            xmin: None,
                        });
                        if m.lsn <= last_emitted {
                            continue;
                        }
                        let mut events = Vec::new();
                        if m.prefix != HEARTBEAT_PREFIX {
                            events.push(ChangeEvent::message(
                                EvMessage {
                                    prefix: m.prefix.clone(),
                                    content: m.content.to_vec(),
                                    transactional: false,
                                },
                                pos.clone(),
                                now_ms(),
                            ));
                        }
                        last_emitted = m.lsn;
                        if let Err(e) = send(
                            &ctx.batches,
                            ChangeBatch {
                                events,
                                commit: Some(Checkpoint::At(pos)),
                                approx_bytes: 0,
                                snapshot: None,
                            },
                        )
                        .await
                        {
                            break Err(e);
                        }
                    }
                    continue;
                };
                if open.skip {
                    continue;
                }
                if let Err(e) = dec.change(open, msg, x.wal_start).await {
                    break Err(e);
                }
            }
            PgOutputMessage::Commit(c) => {
                let Some(open) = tx.take() else { continue };
                if open.skip {
                    continue;
                }
                last_emitted = c.end_lsn;
                if let Err(e) = dec.commit(open, c.commit_lsn, c.end_lsn).await {
                    break Err(e);
                }
            }
            PgOutputMessage::StreamStart(s) => stream_xid = Some(s.xid),
            PgOutputMessage::StreamStop => stream_xid = None,
            PgOutputMessage::StreamAbort(a) => {
                if let Some(store) = spill.as_mut() {
                    store.abort(a.xid, a.subxid);
                }
                tracing::debug!(
                    xid = a.xid,
                    subxid = a.subxid,
                    "streamed transaction aborted"
                );
            }
            PgOutputMessage::StreamCommit(c) => {
                let store = spill.as_mut().expect("spill store open while streaming");
                if c.commit_lsn < last_emitted {
                    store.discard(c.xid);
                    continue;
                }
                let reader = match store.take(c.xid) {
                    Ok(r) => r,
                    Err(e) => break Err(spill_err(e)),
                };
                let open = OpenTx {
                    xid: c.xid,
                    final_lsn: c.commit_lsn,
                    ts_ms: c.commit_ts / 1000 + PG_EPOCH_MS,
                    skip: false,
                    events: Vec::new(),
                    events_bytes: 0,
                    total: 0,
                    per_table: HashMap::new(),
                    tx_id: None,
                };
                match dec.replay(open, reader, &mut shutdown).await {
                    Ok(Some(open)) => {
                        last_emitted = c.end_lsn;
                        if let Err(e) = dec.commit(open, c.commit_lsn, c.end_lsn).await {
                            break Err(e);
                        }
                    }
                    // Shutdown during the replay: the partial transaction stays unflushed.
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(e),
                }
            }
            PgOutputMessage::Origin(_) => {}
            other => {
                tracing::debug!(kind = %super::pgoutput::type_name(other.type_byte()), "ignored pgoutput message");
            }
        }
    };
    drop(spill.take());
    drop(dec);
    monitor.abort();
    // Let the pipeline drain what we sent, then confirm the final durable position.
    let durable = ctx.drain(result.is_err()).await;
    // The stream's last status update reads the handle: it confirms this position.
    stream.stop().await;
    if let Some(lsn) = durable.position_with(durable_lsn) {
        tracing::info!(flushed = %lsn, "final position sent to the server");
    }
    result
}

/// Decoding state shared by the live stream and the replay of spilled transactions.
pub(super) struct Decoding<'a> {
    client: &'a tokio_postgres::Client,
    resolver: Arc<StaticTypeResolver>,
    cache: RelationCache,
    filter: &'a TableFilter,
    max: usize,
    batches: mpsc::Sender<ChangeBatch>,
    toast_reselect: bool,
    /// The query connection has the replication session's output settings (set before the
    /// first re-select: its values are parsed by the same text parser as pgoutput's).
    session_set: bool,
}

impl Decoding<'_> {
    async fn relation(&mut self, r: &super::pgoutput::Relation) -> Result<(), SourceError> {
        let missing = self.cache.unresolved_types(r);
        if !missing.is_empty() {
            let ts = load_types(self.client, &missing)
                .await
                .map_err(|e| sql_err("loading column types", e))?;
            ts.into_iter().for_each(|t| self.resolver.insert(t));
        }
        let cat = load_table_catalog(self.client, r.id)
            .await
            .map_err(|e| sql_err("reading the table's primary key", e))?;
        let info = self.cache.apply_relation_with(r, cat.as_ref());
        tracing::debug!(table = %info.schema.id, "relation");
        Ok(())
    }

    /// Adds a data message's events to `open`; hands a full chunk to the pipeline.
    async fn change(
        &mut self,
        open: &mut OpenTx,
        msg: PgOutputMessage,
        wal_start: Lsn,
    ) -> Result<(), SourceError> {
        let msg = match msg {
            PgOutputMessage::Update(u) if self.toast_reselect => {
                PgOutputMessage::Update(self.reselect_toast(u).await?)
            }
            m => m,
        };
        let pos = SourcePosition::Postgres(PgPosition {
            commit_lsn: open.final_lsn,
            lsn: wal_start,
            tx_id: Some(open.xid),
            xmin: None,
        });
        for mut ev in to_events(&self.cache, self.filter, msg, pos, open.ts_ms)? {
            open.total += 1;
            // Looked up by reference: no key allocated per event.
            let n = match ev.table.as_ref() {
                Some(t) => match open.per_table.get_mut(&t.id) {
                    Some(n) => n,
                    None => open.per_table.entry(t.id.clone()).or_insert(0),
                },
                None => open.per_table.entry(TableId::new("", "")).or_insert(0),
            };
            *n += 1;
            let id = open
                .tx_id
                .get_or_insert_with(|| format!("{}:{}", open.xid, open.final_lsn.0).into())
                .clone();
            ev.tx = Some(TransactionInfo {
                id,
                total_order: open.total,
                data_collection_order: *n,
            });
            // A key change is two records, delete and create: two events.
            if ev.changes_key() {
                open.total += 1;
                *n += 1;
            }
            open.events_bytes += ev.approx_size() as u64;
            open.events.push(ev);
        }
        if open.events.len() >= self.max {
            let events = std::mem::take(&mut open.events);
            send(
                &self.batches,
                ChangeBatch {
                    events,
                    commit: None,
                    approx_bytes: std::mem::take(&mut open.events_bytes),
                    snapshot: None,
                },
            )
            .await?;
        }
        Ok(())
    }

    /// `source.toast = "reselect"`: fills the unchanged TOASTed columns of an update with
    /// the row's current values, read by key. The current value may be newer than the
    /// change (the row may have changed again since); a row gone since keeps the
    /// placeholder, as does a table without a key.
    async fn reselect_toast(
        &mut self,
        mut u: super::pgoutput::Update,
    ) -> Result<super::pgoutput::Update, SourceError> {
        use super::pgoutput::TupleColumn;
        let unchanged: Vec<usize> = (0..u.new.columns.len())
            .filter(|&i| matches!(u.new.columns[i], TupleColumn::UnchangedToast))
            .collect();
        let Some(rel) = self.cache.get(u.relation_id).cloned() else {
            return Ok(u);
        };
        if unchanged.is_empty()
            || rel.schema.key.is_empty()
            || !self.filter.includes(&rel.schema.id)
        {
            return Ok(u);
        }
        let mut conds = Vec::with_capacity(rel.schema.key.len());
        for &k in &rel.schema.key {
            let text = match (&u.new.columns.get(k), u.old.as_ref()) {
                (Some(TupleColumn::Text(b)), _) => b.clone(),
                (_, Some(old)) => match old.tuple().columns.get(k) {
                    Some(TupleColumn::Text(b)) => b.clone(),
                    _ => return Ok(u),
                },
                _ => return Ok(u),
            };
            let Ok(text) = std::str::from_utf8(&text) else {
                return Ok(u);
            };
            conds.push(format!(
                "{} = {}",
                quote_ident(&rel.columns[k].name),
                escape_literal(text)
            ));
        }
        let cols: Vec<String> = unchanged
            .iter()
            .map(|&i| quote_ident(&rel.columns[i].name))
            .collect();
        let sql = format!(
            "SELECT {} FROM {}.{} WHERE {}",
            cols.join(", "),
            quote_ident(&rel.schema.id.schema),
            quote_ident(&rel.schema.id.name),
            conds.join(" AND ")
        );
        // The simple protocol returns every value in its type's text output, which is
        // what pgoutput sends and the value parser reads — once the session prints values
        // as the replication session does (dates, intervals, time zones, floats, bytea).
        if !self.session_set {
            self.client
                .batch_execute(super::snapshot::SESSION_SETTINGS)
                .await
                .map_err(|e| sql_err("setting the session's output formats", e))?;
            self.session_set = true;
        }
        let msgs = self
            .client
            .simple_query(&sql)
            .await
            .map_err(|e| sql_err("re-selecting unchanged TOASTed values", e))?;
        let Some(row) = msgs.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        }) else {
            tracing::debug!(table = %rel.schema.id, "row gone before its TOASTed values could be re-selected; the placeholder stays");
            return Ok(u);
        };
        for (j, &i) in unchanged.iter().enumerate() {
            u.new.columns[i] = match row.get(j) {
                Some(v) => TupleColumn::Text(bytes::Bytes::copy_from_slice(v.as_bytes())),
                None => TupleColumn::Null,
            };
        }
        Ok(u)
    }

    /// Ends a transaction: its last events with the commit position.
    async fn commit(
        &mut self,
        open: OpenTx,
        commit_lsn: Lsn,
        end_lsn: Lsn,
    ) -> Result<(), SourceError> {
        let pos = SourcePosition::Postgres(PgPosition {
            commit_lsn,
            lsn: end_lsn,
            tx_id: Some(open.xid),
            xmin: None,
        });
        send(
            &self.batches,
            ChangeBatch {
                events: open.events,
                commit: Some(Checkpoint::At(pos)),
                approx_bytes: open.events_bytes,
                snapshot: None,
            },
        )
        .await
    }

    /// Decodes a spilled transaction in order, skipping aborted subtransactions' data.
    /// `None`: shutdown was requested during the replay.
    async fn replay(
        &mut self,
        mut open: OpenTx,
        reader: Option<SpillReader>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Option<OpenTx>, SourceError> {
        let Some(mut reader) = reader else {
            return Ok(Some(open));
        };
        let (messages, bytes) = reader.size();
        tracing::info!(xid = open.xid, commit_lsn = %open.final_lsn, messages, bytes, "streamed transaction committed; replaying it from the spill");
        while let Some((wal_start, data)) = reader.next_message().map_err(spill_err)? {
            let msg = PgOutputDecoder::decode(&data, true).map_err(|e| {
                definite(
                    "decoding a spilled pgoutput message",
                    e.to_string(),
                    "report this as a bug",
                )
            })?;
            let xid = match &msg {
                PgOutputMessage::Relation(r) => {
                    self.relation(r).await?;
                    continue;
                }
                PgOutputMessage::Type(t) => {
                    self.cache.apply_type(t);
                    continue;
                }
                PgOutputMessage::Insert(m) => m.xid,
                PgOutputMessage::Update(m) => m.xid,
                PgOutputMessage::Delete(m) => m.xid,
                PgOutputMessage::Truncate(m) => m.xid,
                PgOutputMessage::Message(m) => m.xid,
                other => {
                    tracing::debug!(kind = %super::pgoutput::type_name(other.type_byte()), "ignored spilled pgoutput message");
                    continue;
                }
            };
            if xid.is_some_and(|x| reader.is_aborted(x)) {
                continue;
            }
            let before = open.events.len();
            self.change(&mut open, msg, wal_start).await?;
            if open.events.len() < before && shutdown.has_changed().unwrap_or(true) {
                return Ok(None);
            }
        }
        Ok(Some(open))
    }
}

/// A string literal that means the same whatever `standard_conforming_strings` says.
pub(super) fn escape_literal(s: &str) -> String {
    format!("E'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

pub(super) fn spill_err(e: SpillError) -> SourceError {
    if e.is_disk_full() {
        SourceError::transient(
            "spilling a streamed transaction",
            format!("{e}; free space on that disk or set source.spill_dir to a bigger one"),
        )
        .caused_by(e)
    } else {
        definite(
            "spilling a streamed transaction",
            e.to_string(),
            "check that source.spill_dir is a writable local directory",
        )
        .caused_by(e)
    }
}

pub(super) fn to_events(
    cache: &RelationCache,
    filter: &TableFilter,
    msg: PgOutputMessage,
    pos: SourcePosition,
    ts: i64,
) -> Result<Vec<ChangeEvent>, SourceError> {
    let bad = |e: &dyn std::fmt::Display| {
        definite(
            "decoding a change",
            e.to_string(),
            "report this as a bug, with the column's type",
        )
    };
    let rel_of = |id: u32| -> Result<Option<Arc<super::relation::RelationInfo>>, SourceError> {
        let r = cache
            .get(id)
            .cloned()
            .ok_or_else(|| bad(&format!("no Relation for id {id}")))?;
        Ok(filter.includes(&r.schema.id).then_some(r))
    };
    Ok(match msg {
        PgOutputMessage::Insert(i) => {
            let Some(rel) = rel_of(i.relation_id)? else {
                return Ok(vec![]);
            };
            let row = super::relation::decode_tuple(&rel, &i.new).map_err(|e| bad(&e))?;
            vec![ChangeEvent::create(rel.schema.clone(), row, pos, ts).map_err(|e| bad(&e))?]
        }
        PgOutputMessage::Update(u) => {
            let Some(rel) = rel_of(u.relation_id)? else {
                return Ok(vec![]);
            };
            let after = super::relation::decode_tuple(&rel, &u.new).map_err(|e| bad(&e))?;
            let before = match &u.old {
                Some(o) => {
                    Some(super::relation::decode_tuple(&rel, o.tuple()).map_err(|e| bad(&e))?)
                }
                None => None,
            };
            vec![
                ChangeEvent::update(rel.schema.clone(), before, after, pos, ts)
                    .map_err(|e| bad(&e))?,
            ]
        }
        PgOutputMessage::Delete(d) => {
            let Some(rel) = rel_of(d.relation_id)? else {
                return Ok(vec![]);
            };
            let before = super::relation::decode_tuple(&rel, d.old.tuple()).map_err(|e| bad(&e))?;
            vec![ChangeEvent::delete(rel.schema.clone(), before, pos, ts).map_err(|e| bad(&e))?]
        }
        PgOutputMessage::Truncate(t) => {
            let mut v = Vec::new();
            for id in t.relation_ids {
                if let Some(rel) = rel_of(id)? {
                    v.push(ChangeEvent::truncate(rel.schema.clone(), pos.clone(), ts));
                }
            }
            v
        }
        PgOutputMessage::Message(m) => {
            if m.prefix == HEARTBEAT_PREFIX {
                return Ok(vec![]);
            }
            vec![ChangeEvent::message(
                EvMessage {
                    prefix: m.prefix,
                    content: m.content.to_vec(),
                    transactional: m.transactional,
                },
                pos,
                ts,
            )]
        }
        _ => vec![],
    })
}
