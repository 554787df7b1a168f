//! The snapshot of a MySQL / MariaDB source: every captured table read as of one
//! consistent point, in primary-key range chunks over `[snapshot] connections` readers,
//! as `op = r` events, handed off to the stream at the binlog position of that point.
//!
//! This module owns opening the readers' transactions, planning the chunks, reading them
//! and the order and markers of the records it sends; values are decoded by
//! [`decode::TableDecoder`] and progress is counted in [`crate::progress`].
//!
//! # Consistency
//!
//! MariaDB, lock-free: each reader runs `START TRANSACTION WITH CONSISTENT SNAPSHOT`
//! (repeatable read) and, in the same session, `SHOW STATUS LIKE 'binlog_snapshot_%'`: the
//! binlog file and offset that correspond to its snapshot. MariaDB takes the snapshot and
//! that position together under its commit-ordering lock, and InnoDB commits in binlog
//! order, so a snapshot holds exactly the binlogged transactions before its position;
//! `BINLOG_GTID_POS(file, pos)` is the GTID state there. Readers whose positions are equal
//! therefore see the same rows, and every transaction committed after that point follows in
//! the stream that starts there. The readers start their transactions together; when a
//! commit falls between them (the positions differ) all of them start again, up to
//! [`ALIGN_ATTEMPTS`] times. Then, with RELOAD, a brief `FLUSH TABLES WITH READ LOCK` is
//! held only while the transactions start; without it the snapshot goes on with the
//! largest group of readers that agree (at least one), and says so in the log. (Changes
//! made with `sql_log_bin = 0` or to non-transactional tables do not move the position, so
//! they are not ordered against it; they are not streamed either.)
//!
//! MySQL has no `binlog_snapshot_*` status: the readers' transactions are started under a
//! brief `FLUSH TABLES WITH READ LOCK` (RELOAD privilege), during which the binlog position
//! is read, then the lock is released before any row is read.
//!
//! # Chunks
//!
//! A table with a primary key is split into key ranges of about `[snapshot] chunk_rows`
//! rows, each read by one `SELECT … WHERE <range>` on whichever reader is free (tables
//! without a primary key, or with a key of a type whose text form does not order as the
//! index does, are read whole). A single integer key is split arithmetically between its
//! `MIN` and `MAX` (in the table's estimated row count / `chunk_rows` pieces); any other key
//! by keyset pagination: `WHERE key > previous boundary ORDER BY key LIMIT 1 OFFSET
//! chunk_rows - 1` finds each next boundary. The first range is open below and the last
//! open above, and each row's key satisfies exactly one range's predicate, so every row is
//! read once whatever the boundaries are. A composite key's comparisons are spelt out
//! (`a > x OR (a = x AND b > y)`), which MariaDB's range optimizer turns into index ranges.
//!
//! Values are read over the text protocol with the session's `time_zone = '+00:00'`
//! ([`decode::select_expr`] widens FLOAT); table schemas are loaded ([`Schemas::load`])
//! inside the first reader's transaction, so they are the ones the rows have.
//!
//! # Markers and order
//!
//! As the Postgres snapshot's (Debezium 3.x): the first record `first`, the last `last`,
//! each table's first `first_in_data_collection` and last `last_in_data_collection`,
//! precedence `last` > `first` > `last_in_data_collection` > `first_in_data_collection`.
//! All readers send through one [`Sequencer`], which holds back each table's newest record
//! (it may be the table's last) and the `last_in_data_collection` record of the table
//! completed most recently (it may be the snapshot's last). Tables go out in their order
//! (a reader holding a chunk of a later table waits until the earlier ones are done), the
//! chunks of one table in parallel; those interleave, but each key occurs once in a
//! snapshot, so no key's order changes.
//!
//! A shutdown (or a crash) mid-snapshot leaves a snapshot that is not complete; the next
//! run starts it over (the `Begin` then carries `SnapshotIncomplete`), so the keys read
//! twice are reads, which set a key's state, never changes applied twice.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cdc_schemas::{
    ChangeEvent, GtidSet, MySqlPosition, Row, SnapshotMarker, SourcePosition, TableId,
};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Value as MyValue};
use tokio::sync::mpsc;

use super::binlog::{connect_err, my_err, BinlogStart, Flavor};
use super::config::MySqlSourceConfig;
use super::decode::{self, DecodeOptions};
use super::metrics::MyMetrics;
use super::schema::Schemas;
use super::source::{my_ident, now_ms, schema_err, send};
use super::stream::Captured;
use super::table::{MyColumn, MyTable};
use crate::progress::SnapshotProgress;
use crate::{ChangeBatch, SnapshotMark, SourceError};

mod plan;
mod sequencer;
mod start;

use plan::*;
use sequencer::*;
use start::*;
pub use start::{current_position, ALIGN_ATTEMPTS};
// `cdc verify` reads a table's key ranges the way the snapshot does (`mysql/verify.rs`).
pub(in crate::mysql) use plan::{compare, is_integer, literal, literal_kind, qualified, Literal};

/// What a finished snapshot hands to the stream.
pub struct SnapshotDone {
    pub start: BinlogStart,
    /// The schemas of the tables read: the stream starts with them.
    pub schemas: Schemas,
    pub rows: u64,
}

fn sql_err(what: &str) -> impl Fn(mysql_async::Error) -> SourceError + '_ {
    move |e| my_err(what, e)
}

/// A table as the readers read it.
struct SnapTable {
    /// Position in the snapshot's table list (the sequencer's index).
    index: usize,
    c: Captured,
    /// `SELECT <columns> FROM <table>`, without a range.
    select: String,
}

/// One range of a table: `filter` is its `WHERE` predicate (`None`: the whole table).
struct Chunk {
    table: Arc<SnapTable>,
    filter: Option<String>,
}

/// Runs a snapshot: sends the `Begin` batch (with [`cdc_schemas::Checkpoint::SnapshotIncomplete`]
/// when `over_log`), every row, and returns where streaming starts; the caller sends `End`.
/// `before_begin` gets where streaming starts and the snapshot's schemas once both are
/// known, before `Begin` is sent (the schema history records them there).
#[allow(clippy::too_many_arguments)]
pub async fn run_snapshot(
    cfg: &MySqlSourceConfig,
    flavor: Flavor,
    over_log: bool,
    out: &mpsc::Sender<ChangeBatch>,
    progress: &Arc<SnapshotProgress>,
    metrics: &MyMetrics,
    shutdown: &tokio::sync::watch::Receiver<bool>,
    before_begin: impl FnOnce(&BinlogStart, &Schemas) -> Result<(), SourceError> + Send,
) -> Result<SnapshotDone, SourceError> {
    let started = Instant::now();
    let (mut conns, start) = open_readers(cfg, flavor, cfg.snapshot_connections).await?;
    let schemas = Schemas::load(&mut conns[0], &cfg.filter)
        .await
        .map_err(schema_err)?;
    let mut tables: Vec<MyTable> = schemas.iter().cloned().collect();
    // As Debezium: in the order of the include patterns (each pattern's tables by name).
    tables.sort_by_cached_key(|t| {
        let name = t.id().to_string();
        let p = cfg.filter.include_patterns();
        p.iter().position(|p| crate::filter::glob(p, &name))
    });
    let ids: Vec<TableId> = tables.iter().map(MyTable::id).collect();
    before_begin(&start, &schemas)?;
    send(
        out,
        ChangeBatch {
            events: Vec::new(),
            commit: over_log.then_some(cdc_schemas::Checkpoint::SnapshotIncomplete),
            approx_bytes: 0,
            snapshot: Some(SnapshotMark::Begin {
                tables: ids.clone(),
            }),
        },
    )
    .await?;
    let no_backslash: Option<String> = conns[0]
        .query_first("SELECT @@sql_mode")
        .await
        .map_err(sql_err("reading the session's sql_mode"))?;
    let no_backslash = no_backslash.is_some_and(|m| m.contains("NO_BACKSLASH_ESCAPES"));
    let mut estimate = 0u64;
    let mut queue = VecDeque::new();
    let mut chunks_per_table = Vec::with_capacity(tables.len());
    for (index, t) in tables.iter().enumerate() {
        let n: Option<Option<u64>> = conns[0]
            .exec_first(
                "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
                (t.database.as_str(), t.name.as_str()),
            )
            .await
            .map_err(sql_err("sizing a table for the snapshot"))?;
        let rows = n.flatten().unwrap_or(0);
        estimate += rows;
        let c = Captured::new(t.clone())?;
        let list: Vec<String> = t
            .columns
            .iter()
            .map(|col| decode::select_expr(col, &my_ident(&col.name)).into_owned())
            .collect();
        let table = Arc::new(SnapTable {
            index,
            select: format!("SELECT {} FROM {}", list.join(", "), qualified(t)),
            c,
        });
        let ranges = plan_ranges(
            &mut conns[0],
            t,
            rows,
            cfg.snapshot_chunk_rows.max(1),
            no_backslash,
        )
        .await?;
        tracing::debug!(table = %table.c.schema.id, chunks = ranges.len(), estimated_rows = rows, "snapshot plan");
        chunks_per_table.push(ranges.len());
        for filter in ranges {
            queue.push_back(Chunk {
                table: table.clone(),
                filter,
            });
        }
    }
    progress.begin(tables.len() as u64, estimate);
    tracing::info!(
        tables = tables.len(),
        chunks = queue.len(),
        connections = conns.len(),
        estimated_rows = estimate,
        file = %start.file,
        pos = start.pos,
        gtid_set = ?start.gtid_set.as_ref().map(|g| g.to_string()),
        "snapshot started"
    );
    let logger = crate::progress::spawn_logger(progress);
    let pos = SourcePosition::Mysql(MySqlPosition {
        file: start.file.clone(),
        pos: start.pos,
        ..Default::default()
    });
    let seq = Arc::new(Sequencer::new(
        out.clone(),
        ids,
        chunks_per_table,
        progress.clone(),
        shutdown.clone(),
    ));
    let queue = Arc::new(Mutex::new(queue));
    let mut workers = tokio::task::JoinSet::new();
    for mut conn in conns {
        let queue = queue.clone();
        let seq = seq.clone();
        let pos = pos.clone();
        let batch = cfg.max_batch_events.max(1);
        let rows = metrics.snapshot_rows.clone();
        let opts = cfg.decode.clone();
        workers.spawn(async move {
            loop {
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                let Some(chunk) = next else { break };
                let n = read_chunk(&mut conn, &chunk, &pos, &opts, batch, &seq).await?;
                rows.add(n);
                seq.chunk_done(chunk.table.index).await?;
            }
            let _ = conn.query_drop("COMMIT").await;
            let _ = conn.disconnect().await;
            Ok::<(), SourceError>(())
        });
    }
    let mut result = crate::progress::join_readers(&mut workers).await;
    if result.is_ok() {
        result = seq.finish().await;
    }
    let rows = crate::progress::end_snapshot(progress, logger, started, result)?;
    Ok(SnapshotDone {
        start,
        schemas,
        rows,
    })
}

/// Reads one chunk; returns its row count.
async fn read_chunk(
    conn: &mut Conn,
    chunk: &Chunk,
    pos: &SourcePosition,
    opts: &DecodeOptions,
    batch: usize,
    seq: &Sequencer,
) -> Result<u64, SourceError> {
    let t = &chunk.table;
    let sql = match &chunk.filter {
        Some(f) => format!("{} WHERE {f}", t.select),
        None => t.select.clone(),
    };
    let what = format!("reading {} for the snapshot", t.c.schema.id);
    let mut result = conn.query_iter(sql).await.map_err(|e| my_err(&what, e))?;
    let ts = now_ms();
    let mut n = 0u64;
    let bad = |e: String| {
        SourceError::definite(
            format!("snapshot of {}", t.c.schema.id),
            e,
            "report this as a bug, with the column's type",
        )
    };
    let mut events: Vec<ChangeEvent> = Vec::with_capacity(batch);
    let mut bytes = 0u64;
    let mut other: Vec<Option<String>> = Vec::new();
    while let Some(row) = result.next().await.map_err(|e| my_err(&what, e))? {
        let values = decode_text_row(&t.c, &row, opts, &mut other);
        let ev = ChangeEvent::read(t.c.schema.clone(), Row::new(values), pos.clone(), ts)
            .map_err(|e| bad(e.to_string()))?;
        bytes += ev.approx_size() as u64;
        events.push(ev);
        n += 1;
        if events.len() >= batch {
            let full = std::mem::replace(&mut events, Vec::with_capacity(batch));
            seq.emit(t.index, full, std::mem::take(&mut bytes)).await?;
        }
    }
    seq.emit(t.index, events, bytes).await?;
    Ok(n)
}

/// Decodes one text-protocol row of `c` (the snapshot's and `cdc verify`'s reading).
/// `other` is scratch space, reused across rows.
pub(in crate::mysql) fn decode_text_row(
    c: &Captured,
    row: &mysql_async::Row,
    opts: &DecodeOptions,
    other: &mut Vec<Option<String>>,
) -> Vec<cdc_schemas::Value> {
    let width = c.decoder.columns().len();
    // Values the text protocol does not send as bytes (it sends only bytes and NULLs)
    // are passed on as their SQL text.
    other.clear();
    other.extend((0..width).map(|i| match row.as_ref(i) {
        Some(MyValue::Bytes(_)) | Some(MyValue::NULL) | None => None,
        Some(v) => Some(v.as_sql(true)),
    }));
    c.decoder.row_from_text(
        (0..width).map(|i| match (row.as_ref(i), &other[i]) {
            (_, Some(s)) => Some(s.as_bytes()),
            (Some(MyValue::Bytes(b)), None) => Some(b.as_slice()),
            _ => None,
        }),
        opts,
    )
}
