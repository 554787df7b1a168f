//! The initial snapshot: every captured table read as of the replication slot's exported
//! snapshot, in parallel chunks, as `op = r` events.
//!
//! This module owns the driver (describing the tables, planning chunks, the readers) and
//! the order and markers of the records it sends; the rows are parsed by
//! [`super::decode::copy`] and progress is counted in [`crate::progress`].
//!
//! Consistency with the slot: the slot is created with `EXPORT_SNAPSHOT` on the replication
//! connection, which then stays open and idle until every reader has imported the snapshot
//! (`BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '…'`).
//! The readers see exactly the transactions that committed before the slot's consistent
//! point; streaming starts at that point, so every change is either in the snapshot or in
//! the stream, never both and never neither.
//!
//! Chunks: each table is split into ctid page ranges of `chunk_pages` pages (the last
//! range is open-ended, so rows on pages past the size estimate are not missed), read with
//! `COPY (SELECT … WHERE ctid >= '(lo,0)' AND ctid < '(hi,0)') TO STDOUT`. Postgres 14+
//! runs these as TID range scans; older versions scan the table per chunk (correct, slower).
//!
//! Format: a table whose columns are all built-in scalar types with a [`BinKind`] (the
//! type table's `binary` column, [`binary_plan`]) is read with `(FORMAT binary)`: no text
//! formatting on the server and no text parsing here (BENCHMARKS.md, "Postgres source",
//! has the CPU figures); the decoders give exactly the [`Value`](cdc_schemas::Value)s
//! the text parser gives (`tests/tests/pg_snapshot_copy.rs`). Any other table (arrays,
//! enums, domains, composites, network and other text-like types) is read in text format
//! and parsed with the same value parsers as pgoutput's text tuples (the readers set the
//! walsender's session GUCs, so the output functions print the same text). Both go
//! through a [`CopyDecoder`] ([`super::decode::copy`]), which also handles rows split
//! across CopyData messages.
//!
//! The table's schema is derived by building the Relation message pgoutput would send
//! (columns in attnum order, generated columns left out, key = replica identity columns) and
//! applying it to a [`RelationCache`], so snapshot and streamed records of a table share one
//! schema version.
//!
//! # Markers (`source.snapshot`, Debezium 3.x semantics)
//!
//! In the order records reach the pipeline (the order they are appended): the very first
//! snapshot record is `first`, the very last `last`; a table's first record is
//! `first_in_data_collection` and its last `last_in_data_collection`; all others `true`.
//! When one record is several of these, the precedence is Debezium's: `last` >
//! `first` > `last_in_data_collection` > `first_in_data_collection`. Empty tables have
//! no records and so no markers.
//!
//! With parallel chunk readers the last record of a table (and of the snapshot) is known
//! only once every chunk of that table (every table) is done, so the `Sequencer` through
//! which all readers send holds records back: per table, the newest record read; and
//! globally, the `last_in_data_collection` record of the table completed most recently. A
//! held record goes out, in front of the batch, as soon as a later record of its table
//! (or of any table, for the global one) is sent; when a table's last chunk ends its held
//! record is marked `last_in_data_collection`; when the snapshot ends the globally held
//! record is marked `last`. The channel is the only order there is, so `first` is decided
//! at send time and sending happens under the sequencer's lock. Records of different
//! tables go to different topics, so holding one back never reorders anything that has an
//! order; within a table the send order is the read order.
//!
//! # Progress
//!
//! The readers count rows and tables in the [`SnapshotProgress`] the pipeline handed the
//! source ([`crate::progress`] owns the counters and their reporting).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use cdc_schemas::{ChangeEvent, Lsn, PgPosition, Row, SnapshotMarker, SourcePosition, TableId};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::conn::PgEndpoint;
use super::pgoutput::{Relation, RelationColumn, ReplicaIdentity};
use super::relation::{
    load_table_catalog, load_types, RelationCache, RelationInfo, StaticTypeResolver,
};
use super::replication::{quote_ident, quote_literal};
use crate::{ChangeBatch, SourceError};

use super::decode::copy::{binary_plan, CopyDecoder};
use super::decode::BinKind;
use crate::progress::SnapshotProgress;

/// The session settings pgoutput's walsender uses ([`super::replication::SESSION_OPTIONS`]).
pub const SESSION_SETTINGS: &str = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET IntervalStyle = 'iso_8601'; SET extra_float_digits = 3; SET bytea_output = 'hex'; SET client_encoding = 'UTF8'";

/// What the snapshot needs.
pub struct SnapshotParams {
    pub endpoint: PgEndpoint,
    pub snapshot_name: String,
    pub tables: Vec<TableId>,
    pub connections: usize,
    pub chunk_pages: u64,
    pub batch_events: usize,
    /// The slot's consistent point: the position of every snapshot record.
    pub consistent_point: Lsn,
    /// Where the readers count what they read (the pipeline reports it).
    pub progress: Arc<SnapshotProgress>,
}

struct Chunk {
    table: Arc<SnapTable>,
    lo: u64,
    hi: Option<u64>,
}

struct SnapTable {
    /// Position in the snapshot's table list (the sequencer's index).
    index: usize,
    rel: Arc<RelationInfo>,
    /// Read in binary format with these decoders; `None`: text format.
    binary: Option<Vec<BinKind>>,
    select_list: String,
    qualified: String,
}

fn pg_err(what: &str, e: tokio_postgres::Error) -> SourceError {
    super::conn::source_error(
        what,
        e,
        "see the server's message; the snapshot restarts from the beginning on the next start",
    )
}

/// Loads `table`'s columns and key as pgoutput would describe them.
pub async fn describe_table(
    client: &tokio_postgres::Client,
    cache: &mut RelationCache,
    resolver: &StaticTypeResolver,
    table: &TableId,
) -> Result<Arc<RelationInfo>, SourceError> {
    let rows = client
        .query(
            "SELECT c.oid, a.attname::text, a.atttypid, a.atttypmod,
                    (c.relreplident = 'f' OR coalesce(a.attnum = ANY(i.indkey), false)) AS key,
                    c.relreplident::text
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
             LEFT JOIN pg_index i ON i.indrelid = c.oid AND
                  CASE c.relreplident WHEN 'i' THEN i.indisreplident
                                      WHEN 'd' THEN i.indisprimary ELSE false END
             WHERE n.nspname = $1 AND c.relname = $2 AND a.attgenerated = ''
             ORDER BY a.attnum",
            &[&table.schema, &table.name],
        )
        .await
        .map_err(|e| pg_err("describing a table for the snapshot", e))?;
    if rows.is_empty() {
        return Err(SourceError::definite(
            format!("snapshot of {table}"),
            "the table has no columns or does not exist",
            "check source.tables",
        ));
    }
    let oid: u32 = rows[0].get(0);
    let ident: String = rows[0].get(5);
    let rel = Relation {
        xid: None,
        id: oid,
        namespace: table.schema.clone(),
        name: table.name.clone(),
        replica_identity: ReplicaIdentity::from_byte(ident.bytes().next().unwrap_or(b'd')),
        columns: rows
            .iter()
            .map(|r| RelationColumn {
                key: r.get(4),
                name: r.get(1),
                type_oid: r.get(2),
                type_modifier: r.get(3),
            })
            .collect(),
    };
    let missing = cache.unresolved_types(&rel);
    if !missing.is_empty() {
        for t in load_types(client, &missing)
            .await
            .map_err(|e| pg_err("loading column types", e))?
        {
            resolver.insert(t);
        }
    }
    // The same key and nullability as the streamed Relation gets (source.rs).
    let cat = load_table_catalog(client, oid)
        .await
        .map_err(|e| pg_err("reading the table's primary key", e))?;
    Ok(cache.apply_relation_with(&rel, cat.as_ref()))
}

/// Runs the snapshot; returns the number of rows read. Batches carry no commit position:
/// the caller sends the snapshot's checkpoint once this returns.
pub async fn run_snapshot(
    p: SnapshotParams,
    out: mpsc::Sender<ChangeBatch>,
) -> Result<u64, SourceError> {
    let progress = p.progress.clone();
    let started = Instant::now();
    let n = p.connections.max(1);
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        let c = p.endpoint.connect().await.map_err(|e| {
            SourceError::from(crate::postgres::replication::ReplicationError::Connect(e))
        })?;
        c.batch_execute(&format!(
            "{SESSION_SETTINGS}; BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {}",
            quote_literal(&p.snapshot_name)
        ))
        .await
        .map_err(|e| pg_err("importing the slot's snapshot", e))?;
        clients.push(c);
    }
    // Describe tables and plan chunks (on the first reader, inside the snapshot).
    let resolver = Arc::new(StaticTypeResolver::new());
    let mut cache = RelationCache::with_resolver(resolver.clone());
    let mut queue = std::collections::VecDeque::new();
    let mut chunks_per_table = Vec::with_capacity(p.tables.len());
    let mut estimate: f64 = 0.0;
    for (index, t) in p.tables.iter().enumerate() {
        let rel = describe_table(&clients[0], &mut cache, &resolver, t).await?;
        let row = clients[0]
            .query_one(
                "SELECT (pg_relation_size(c.oid) / current_setting('block_size')::int8)::int8, greatest(c.reltuples, 0)::float8
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2",
                &[&t.schema, &t.name],
            )
            .await
            .map_err(|e| pg_err("sizing a table for the snapshot", e))?;
        let pages: i64 = row.get(0);
        estimate += row.get::<_, f64>(1);
        let select_list = rel
            .columns
            .iter()
            .map(|c| quote_ident(&c.name))
            .collect::<Vec<_>>()
            .join(", ");
        let binary = binary_plan(&rel);
        let table = Arc::new(SnapTable {
            index,
            binary,
            rel,
            select_list,
            qualified: format!("{}.{}", quote_ident(&t.schema), quote_ident(&t.name)),
        });
        let step = p.chunk_pages.max(1);
        let pages = pages.max(0) as u64;
        let chunks = pages.div_ceil(step).max(1);
        chunks_per_table.push(chunks as usize);
        tracing::debug!(
            table = %t,
            chunks,
            copy_format = if table.binary.is_some() { "binary" } else { "text" },
            "snapshot plan"
        );
        for i in 0..chunks {
            let last = i + 1 == chunks;
            queue.push_back(Chunk {
                table: table.clone(),
                lo: i * step,
                hi: if last { None } else { Some((i + 1) * step) },
            });
        }
    }
    progress.begin(p.tables.len() as u64, estimate as u64);
    tracing::info!(
        tables = p.tables.len(),
        chunks = queue.len(),
        connections = n,
        estimated_rows = estimate as u64,
        consistent_point = %p.consistent_point,
        "snapshot started"
    );
    let seq = Arc::new(Sequencer::new(
        out,
        p.tables.clone(),
        chunks_per_table,
        progress.clone(),
    ));
    let queue = Arc::new(Mutex::new(queue));
    let logger = crate::progress::spawn_logger(&progress);
    let mut workers = tokio::task::JoinSet::new();
    for client in clients {
        let queue = queue.clone();
        let seq = seq.clone();
        let cp = p.consistent_point;
        let batch_events = p.batch_events.max(1);
        workers.spawn(async move {
            loop {
                let Some(chunk) = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
                else {
                    break;
                };
                read_chunk(&client, &chunk, cp, batch_events, &seq).await?;
                seq.chunk_done(chunk.table.index).await?;
            }
            client
                .batch_execute("COMMIT")
                .await
                .map_err(|e| pg_err("ending the snapshot transaction", e))?;
            Ok::<(), SourceError>(())
        });
    }
    let mut result = crate::progress::join_readers(&mut workers).await;
    if result.is_ok() {
        result = seq.finish().await;
    }
    let rows = crate::progress::end_snapshot(&progress, logger, started, result)?;
    Ok(rows)
}

/// Per table: what the sequencer knows.
struct TableSeq {
    id: TableId,
    chunks_left: usize,
    seen: bool,
    rows: u64,
    /// The newest record read, not sent yet: it may be the table's last.
    held: Option<ChangeEvent>,
}

struct SeqState {
    first_sent: bool,
    tables: Vec<TableSeq>,
    /// The `last_in_data_collection` record of the table completed most recently, not
    /// sent yet: it may be the snapshot's last.
    tail: Option<ChangeEvent>,
}

/// The one way snapshot records reach the pipeline; assigns the markers (see the module
/// documentation).
struct Sequencer {
    out: mpsc::Sender<ChangeBatch>,
    state: tokio::sync::Mutex<SeqState>,
    progress: Arc<SnapshotProgress>,
}

impl Sequencer {
    fn new(
        out: mpsc::Sender<ChangeBatch>,
        tables: Vec<TableId>,
        chunks: Vec<usize>,
        progress: Arc<SnapshotProgress>,
    ) -> Self {
        Sequencer {
            out,
            state: tokio::sync::Mutex::new(SeqState {
                first_sent: false,
                tables: tables
                    .into_iter()
                    .zip(chunks)
                    .map(|(id, chunks_left)| TableSeq {
                        id,
                        chunks_left,
                        seen: false,
                        rows: 0,
                        held: None,
                    })
                    .collect(),
                tail: None,
            }),
            progress,
        }
    }

    /// Sends `events` (rows of table `table`, in read order, `bytes` their
    /// [`ChangeEvent::approx_size`]), holding the newest back.
    async fn emit(
        &self,
        table: usize,
        mut events: Vec<ChangeEvent>,
        bytes: u64,
    ) -> Result<(), SourceError> {
        if events.is_empty() {
            return Ok(());
        }
        let n = events.len();
        let mut guard = self.state.lock().await;
        let st = &mut *guard;
        let t = &mut st.tables[table];
        if !t.seen {
            // Everything of this table goes through here in order: the first one received
            // is the first one sent.
            t.seen = true;
            events[0].snapshot = SnapshotMarker::FirstInDataCollection;
        }
        t.rows += n as u64;
        let newest = events.pop();
        let bytes = bytes.saturating_sub(newest.as_ref().map_or(0, |e| e.approx_size() as u64));
        // The records held back so far go first, as a batch of their own: prepending them
        // would move every event of the batch.
        let mut front = Vec::new();
        front.extend(st.tail.take());
        front.extend(std::mem::replace(&mut t.held, newest));
        self.progress.add_rows(n as u64);
        if !front.is_empty() {
            self.send(st, front, 0).await?;
        }
        self.send(st, events, bytes).await
    }

    /// One chunk of `table` is read completely.
    async fn chunk_done(&self, table: usize) -> Result<(), SourceError> {
        let mut guard = self.state.lock().await;
        let st = &mut *guard;
        let t = &mut st.tables[table];
        t.chunks_left = t.chunks_left.saturating_sub(1);
        if t.chunks_left > 0 {
            return Ok(());
        }
        let last = t.held.take();
        tracing::info!(table = %t.id, rows = t.rows, "table snapshot read");
        self.progress.table_done();
        let Some(mut last) = last else {
            return Ok(());
        };
        last.snapshot = SnapshotMarker::LastInDataCollection;
        match st.tail.replace(last) {
            Some(previous) => self.send(st, vec![previous], 0).await,
            None => Ok(()),
        }
    }

    /// Every table is read: the held record is the snapshot's last.
    async fn finish(&self) -> Result<(), SourceError> {
        let mut guard = self.state.lock().await;
        let st = &mut *guard;
        match st.tail.take() {
            Some(mut last) => {
                last.snapshot = SnapshotMarker::Last;
                self.send(st, vec![last], 0).await
            }
            None => Ok(()),
        }
    }

    async fn send(
        &self,
        st: &mut SeqState,
        mut events: Vec<ChangeEvent>,
        approx_bytes: u64,
    ) -> Result<(), SourceError> {
        let Some(first) = events.first_mut() else {
            return Ok(());
        };
        if !st.first_sent {
            st.first_sent = true;
            if first.snapshot != SnapshotMarker::Last {
                first.snapshot = SnapshotMarker::First;
            }
        }
        self.out
            .send(ChangeBatch {
                events,
                commit: None,
                approx_bytes,
                snapshot: None,
            })
            .await
            .map_err(|_| SourceError::transient("snapshot", "the pipeline stopped"))
    }
}

async fn read_chunk(
    client: &tokio_postgres::Client,
    chunk: &Chunk,
    cp: Lsn,
    batch_events: usize,
    seq: &Sequencer,
) -> Result<(), SourceError> {
    let t = &chunk.table;
    let mut sql = format!(
        "COPY (SELECT {} FROM {} WHERE ctid >= '({},0)'::tid",
        t.select_list, t.qualified, chunk.lo
    );
    if let Some(hi) = chunk.hi {
        sql.push_str(&format!(" AND ctid < '({hi},0)'::tid"));
    }
    sql.push_str(") TO STDOUT");
    let mut decoder = match &t.binary {
        Some(plan) => {
            sql.push_str(" (FORMAT binary)");
            CopyDecoder::binary(plan.clone())
        }
        None => CopyDecoder::text(),
    };
    let stream = client
        .copy_out(sql.as_str())
        .await
        .map_err(|e| pg_err("reading a snapshot chunk", e))?;
    futures_util::pin_mut!(stream);
    let pos = SourcePosition::Postgres(PgPosition {
        commit_lsn: cp,
        lsn: cp,
        tx_id: None,
        xmin: None,
    });
    let ts = now_ms();
    let schema = &t.rel.schema;
    let mut events: Vec<ChangeEvent> = Vec::with_capacity(batch_events);
    // approx_size of `events`, summed while each event is still in cache.
    let mut bytes = 0u64;
    let push = |events: &mut Vec<ChangeEvent>, bytes: &mut u64, row: Row| -> Result<(), String> {
        let ev =
            ChangeEvent::read(schema.clone(), row, pos.clone(), ts).map_err(|e| e.to_string())?;
        *bytes += ev.approx_size() as u64;
        events.push(ev);
        Ok(())
    };
    let bad = |e: String| {
        SourceError::definite(
            format!("snapshot of {}", schema.id),
            e,
            "report this as a bug, with the column's type",
        )
    };
    while let Some(data) = stream.next().await {
        let data = data.map_err(|e| pg_err("reading a snapshot chunk", e))?;
        decoder
            .feed(&t.rel, &data, &mut |row| push(&mut events, &mut bytes, row))
            .map_err(bad)?;
        if events.len() >= batch_events {
            let full = std::mem::replace(&mut events, Vec::with_capacity(batch_events));
            seq.emit(t.index, full, std::mem::take(&mut bytes)).await?;
        }
    }
    decoder
        .finish(&t.rel, &mut |row| push(&mut events, &mut bytes, row))
        .map_err(bad)?;
    seq.emit(t.index, events, bytes).await
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cdc_schemas::Value;

    fn table() -> Arc<cdc_schemas::TableSchema> {
        use cdc_schemas::{Column, ColumnType};
        Arc::new(
            cdc_schemas::TableSchema::new(
                TableId::new("public", "t"),
                vec![Column::new("id", ColumnType::Int32, "int4").not_null()],
                &["id"],
            )
            .unwrap(),
        )
    }

    fn ev(t: &Arc<cdc_schemas::TableSchema>, id: i32) -> ChangeEvent {
        ChangeEvent::read(
            t.clone(),
            Row::new(vec![Value::Int32(id)]),
            SourcePosition::Postgres(PgPosition::default()),
            0,
        )
        .unwrap()
    }

    fn id_of(e: &ChangeEvent) -> i32 {
        match e.after.as_ref().unwrap().0[0] {
            Value::Int32(i) => i,
            _ => unreachable!(),
        }
    }

    /// Drives a sequencer through `script` and returns (table, id, marker) in send order.
    async fn run_script(
        chunks: Vec<usize>,
        script: Vec<(usize, Option<Vec<i32>>)>,
    ) -> Vec<(usize, i32, SnapshotMarker)> {
        let t = table();
        let (tx, mut rx) = mpsc::channel(1024);
        let ids: Vec<TableId> = (0..chunks.len())
            .map(|i| TableId::new("public", format!("t{i}")))
            .collect();
        let seq = Sequencer::new(tx, ids, chunks, SnapshotProgress::new());
        for (table, rows) in script {
            match rows {
                Some(rows) => {
                    let evs = rows
                        .iter()
                        .map(|i| ev(&t, *i + 1000 * table as i32))
                        .collect();
                    seq.emit(table, evs, 0).await.unwrap();
                }
                None => seq.chunk_done(table).await.unwrap(),
            }
        }
        seq.finish().await.unwrap();
        drop(seq);
        let mut out = Vec::new();
        while let Some(b) = rx.recv().await {
            assert!(!b.events.is_empty());
            for e in b.events {
                let id = id_of(&e);
                out.push(((id / 1000) as usize, id % 1000, e.snapshot));
            }
        }
        out
    }

    use SnapshotMarker as M;

    #[tokio::test]
    async fn markers_one_table_in_chunks() {
        let got = run_script(
            vec![2],
            vec![
                (0, Some(vec![1, 2])),
                (0, Some(vec![3])),
                (0, None),
                (0, Some(vec![4, 5])),
                (0, None),
            ],
        )
        .await;
        assert_eq!(
            got,
            vec![
                (0, 1, M::First),
                (0, 2, M::True),
                (0, 3, M::True),
                (0, 4, M::True),
                (0, 5, M::Last)
            ]
        );
    }

    #[tokio::test]
    async fn markers_interleaved_tables_and_edge_cases() {
        // t0: two chunks interleaved with t1; t1: one row; t2: empty, completes last.
        let got = run_script(
            vec![2, 1, 1],
            vec![
                (1, Some(vec![1])),
                (0, Some(vec![1])),
                (0, Some(vec![2, 3])),
                (1, None),
                (0, None),
                (0, Some(vec![4])),
                (0, None),
                (2, None),
            ],
        )
        .await;
        // Send order: t0's 1 goes out with t0's 2 (t1's only row is held); when t1 ends
        // its row becomes the global tail; t0's 4 then pushes it out.
        assert_eq!(
            got,
            vec![
                (0, 1, M::First),
                (0, 2, M::True),
                (1, 1, M::LastInDataCollection),
                (0, 3, M::True),
                (0, 4, M::Last),
            ]
        );
    }

    #[tokio::test]
    async fn markers_single_row_and_first_of_later_table() {
        // One table with one row: Debezium's precedence makes it `last`.
        assert_eq!(
            run_script(vec![1], vec![(0, Some(vec![7])), (0, None)]).await,
            vec![(0, 7, M::Last)]
        );
        // A one-row table completed first: its row is sent first, so `first` wins over
        // `last_in_data_collection`; the second table starts with first_in_data_collection.
        assert_eq!(
            run_script(
                vec![1, 1],
                vec![
                    (0, Some(vec![1])),
                    (0, None),
                    (1, Some(vec![1, 2, 3])),
                    (1, None),
                ]
            )
            .await,
            vec![
                (0, 1, M::First),
                (1, 1, M::FirstInDataCollection),
                (1, 2, M::True),
                (1, 3, M::Last),
            ]
        );
        // Nothing at all: no records.
        assert!(run_script(vec![1, 1], vec![(0, None), (1, None)])
            .await
            .is_empty());
    }
}
