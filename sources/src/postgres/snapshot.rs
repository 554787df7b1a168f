//! The initial snapshot: every captured table read as of the replication slot's exported
//! snapshot, in parallel chunks, as `op = r` events.
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
//! `COPY (SELECT … WHERE ctid >= '(lo,0)' AND ctid < '(hi,0)') TO STDOUT` in text format
//! and parsed with the same value parsers as pgoutput's text tuples (the readers set the
//! walsender's session GUCs, so the output functions print the same text). Postgres 14+
//! runs these as TID range scans; older versions scan the table per chunk (correct, slower).
//!
//! The table's schema is derived by building the Relation message pgoutput would send
//! (columns in attnum order, generated columns left out, key = replica identity columns) and
//! applying it to a [`RelationCache`], so snapshot and streamed records of a table share one
//! schema version.
//!
//! Markers: the first record of a table's first chunk is `first_in_data_collection`, the
//! last record of its last chunk `last_in_data_collection`, all others `true` (chunks of one
//! table may finish out of order with several connections, so these mark chunk 0 and the
//! last chunk, not necessarily the first and last records written).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cdc_schemas::{
    ChangeEvent, Lsn, PgPosition, Row, SnapshotMarker, SourcePosition, TableId, Value,
};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::conn::PgEndpoint;
use super::pgoutput::{Relation, RelationColumn, ReplicaIdentity};
use super::relation::{load_types, RelationCache, RelationInfo, StaticTypeResolver};
use super::replication::{quote_ident, quote_literal};
use super::values::parse_value;
use crate::{ChangeBatch, SourceError};

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
}

struct Chunk {
    table: Arc<SnapTable>,
    index: usize,
    last: bool,
    lo: u64,
    hi: Option<u64>,
}

struct SnapTable {
    rel: Arc<RelationInfo>,
    select_list: String,
    qualified: String,
}

fn pg_err(what: &str, e: tokio_postgres::Error) -> SourceError {
    let transient = e.is_closed()
        || e.as_db_error()
            .map(|d| d.code().code().starts_with("08") || d.code().code().starts_with("57P"))
            .unwrap_or(true);
    let detail = crate::postgres::conn::error_chain(&e);
    if transient {
        SourceError::Transient {
            what: what.into(),
            detail,
        }
    } else {
        SourceError::Definite {
            what: what.into(),
            detail,
            fix: "see the server's message; the snapshot restarts from the beginning on the next start".into(),
        }
    }
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
        return Err(SourceError::Definite {
            what: format!("snapshot of {table}"),
            detail: "the table has no columns or does not exist".into(),
            fix: "check source.tables".into(),
        });
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
    Ok(cache.apply_relation(&rel))
}

/// Undoes COPY text escaping of one field.
pub fn unescape_copy(field: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let mut i = 0;
    while i < field.len() {
        let b = field[i];
        if b != b'\\' || i + 1 == field.len() {
            out.push(b);
            i += 1;
            continue;
        }
        let c = field[i + 1];
        i += 2;
        match c {
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'0'..=b'7' => {
                let mut v = (c - b'0') as u32;
                let mut n = 1;
                while n < 3 && i < field.len() && (b'0'..=b'7').contains(&field[i]) {
                    v = v * 8 + (field[i] - b'0') as u32;
                    i += 1;
                    n += 1;
                }
                out.push(v as u8);
            }
            b'x' => {
                let mut v = 0u32;
                let mut n = 0;
                while n < 2 && i < field.len() && field[i].is_ascii_hexdigit() {
                    v = v * 16 + (field[i] as char).to_digit(16).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                out.push(v as u8);
            }
            other => out.push(other),
        }
    }
}

/// Parses one COPY text line into a row of `rel`.
pub fn parse_copy_line(rel: &RelationInfo, line: &[u8], buf: &mut Vec<u8>) -> Result<Row, String> {
    let mut values = Vec::with_capacity(rel.columns.len());
    let mut fields = line.split(|b| *b == b'\t');
    for c in &rel.columns {
        let f = fields.next().ok_or_else(|| {
            format!(
                "COPY line has fewer fields than {} columns",
                rel.columns.len()
            )
        })?;
        if f == b"\\N" {
            values.push(Value::Null);
            continue;
        }
        unescape_copy(f, buf);
        values.push(parse_value(&c.kind, buf).map_err(|e| format!("column {}: {e}", c.name))?);
    }
    Ok(Row::new(values))
}

/// Runs the snapshot; returns the number of rows read. Batches carry no commit position:
/// the caller sends the snapshot's checkpoint once this returns.
pub async fn run_snapshot(
    p: SnapshotParams,
    out: mpsc::Sender<ChangeBatch>,
) -> Result<u64, SourceError> {
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
    let mut queue = VecDeque::new();
    let mut estimate: f64 = 0.0;
    for t in &p.tables {
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
        let table = Arc::new(SnapTable {
            rel,
            select_list,
            qualified: format!("{}.{}", quote_ident(&t.schema), quote_ident(&t.name)),
        });
        let step = p.chunk_pages.max(1);
        let pages = pages.max(0) as u64;
        let chunks = pages.div_ceil(step).max(1);
        for i in 0..chunks {
            let last = i + 1 == chunks;
            queue.push_back(Chunk {
                table: table.clone(),
                index: i as usize,
                last,
                lo: i * step,
                hi: if last { None } else { Some((i + 1) * step) },
            });
        }
    }
    tracing::info!(
        tables = p.tables.len(),
        chunks = queue.len(),
        connections = n,
        estimated_rows = estimate as u64,
        consistent_point = %p.consistent_point,
        "snapshot started"
    );
    let queue = Arc::new(Mutex::new(queue));
    let rows = Arc::new(AtomicU64::new(0));
    let progress = {
        let rows = rows.clone();
        tokio::spawn(async move {
            let mut t = tokio::time::interval(Duration::from_secs(5));
            t.tick().await;
            loop {
                t.tick().await;
                let r = rows.load(Ordering::Relaxed);
                let secs = started.elapsed().as_secs_f64().max(0.001);
                let rate = r as f64 / secs;
                let eta = if rate > 0.0 && estimate > r as f64 {
                    ((estimate - r as f64) / rate) as u64
                } else {
                    0
                };
                tracing::info!(
                    rows = r,
                    rows_per_sec = rate as u64,
                    eta_secs = eta,
                    "snapshot in progress"
                );
            }
        })
    };
    let mut workers = tokio::task::JoinSet::new();
    for client in clients {
        let queue = queue.clone();
        let out = out.clone();
        let rows = rows.clone();
        let cp = p.consistent_point;
        let batch_events = p.batch_events.max(1);
        workers.spawn(async move {
            loop {
                let Some(chunk) = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
                else {
                    break;
                };
                read_chunk(&client, &chunk, cp, batch_events, &out, &rows).await?;
            }
            client
                .batch_execute("COMMIT")
                .await
                .map_err(|e| pg_err("ending the snapshot transaction", e))?;
            Ok::<(), SourceError>(())
        });
    }
    let mut result = Ok(());
    while let Some(r) = workers.join_next().await {
        let r = r.unwrap_or_else(|e| {
            Err(SourceError::Definite {
                what: "snapshot reader".into(),
                detail: e.to_string(),
                fix: "report this as a bug".into(),
            })
        });
        if let Err(e) = r {
            if result.is_ok() {
                result = Err(e);
            }
            workers.abort_all();
        }
    }
    progress.abort();
    result?;
    let total = rows.load(Ordering::Relaxed);
    tracing::info!(
        rows = total,
        secs = started.elapsed().as_secs_f64(),
        "snapshot read every table"
    );
    Ok(total)
}

async fn read_chunk(
    client: &tokio_postgres::Client,
    chunk: &Chunk,
    cp: Lsn,
    batch_events: usize,
    out: &mpsc::Sender<ChangeBatch>,
    rows: &AtomicU64,
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
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = Vec::new();
    let mut events: Vec<ChangeEvent> = Vec::with_capacity(batch_events);
    let mut first = chunk.index == 0;
    let schema = &t.rel.schema;
    let mut emit = |line: &[u8], events: &mut Vec<ChangeEvent>| -> Result<(), SourceError> {
        let row = parse_copy_line(&t.rel, line, &mut buf).map_err(|e| SourceError::Definite {
            what: format!("snapshot of {}", schema.id),
            detail: e,
            fix: "report this as a bug, with the column's type".into(),
        })?;
        let mut ev = ChangeEvent::read(schema.clone(), row, pos.clone(), ts).map_err(|e| {
            SourceError::Definite {
                what: "snapshot".into(),
                detail: e.to_string(),
                fix: "report this as a bug".into(),
            }
        })?;
        if first {
            ev.snapshot = SnapshotMarker::FirstInDataCollection;
            first = false;
        }
        events.push(ev);
        Ok(())
    };
    while let Some(data) = stream.next().await {
        let data = data.map_err(|e| pg_err("reading a snapshot chunk", e))?;
        pending.extend_from_slice(&data);
        let mut start = 0;
        while let Some(nl) = pending[start..].iter().position(|b| *b == b'\n') {
            emit(&pending[start..start + nl], &mut events)?;
            start += nl + 1;
            if events.len() >= batch_events {
                rows.fetch_add(events.len() as u64, Ordering::Relaxed);
                let batch = ChangeBatch {
                    events: std::mem::replace(&mut events, Vec::with_capacity(batch_events)),
                    commit: None,
                };
                send(out, batch).await?;
            }
        }
        pending.drain(..start);
    }
    if !pending.is_empty() {
        let line = std::mem::take(&mut pending);
        emit(&line, &mut events)?;
    }
    if chunk.last {
        if let Some(last) = events.last_mut() {
            last.snapshot = SnapshotMarker::LastInDataCollection;
        }
    }
    if !events.is_empty() {
        rows.fetch_add(events.len() as u64, Ordering::Relaxed);
        send(
            out,
            ChangeBatch {
                events,
                commit: None,
            },
        )
        .await?;
    }
    Ok(())
}

async fn send(out: &mpsc::Sender<ChangeBatch>, b: ChangeBatch) -> Result<(), SourceError> {
    out.send(b).await.map_err(|_| SourceError::Transient {
        what: "snapshot".into(),
        detail: "the pipeline stopped".into(),
    })
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

    #[test]
    fn copy_unescape() {
        let mut out = Vec::new();
        unescape_copy(b"a\\tb\\nc\\\\d\\101\\x41", &mut out);
        assert_eq!(out, b"a\tb\nc\\dAA");
        unescape_copy(b"plain", &mut out);
        assert_eq!(out, b"plain");
    }
}
