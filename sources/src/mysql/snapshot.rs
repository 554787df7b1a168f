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

/// How often the MariaDB readers start their transactions together before the fallback.
pub const ALIGN_ATTEMPTS: usize = 5;

const START_TX: &str = "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY";

/// A new reader: connected, UTC session, repeatable read.
async fn reader(cfg: &MySqlSourceConfig) -> Result<Conn, SourceError> {
    let mut conn = cfg.endpoint.connect().await.map_err(connect_err)?;
    conn.query_drop(
        "SET SESSION time_zone = '+00:00'; SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
    )
    .await
    .map_err(sql_err("preparing the snapshot session"))?;
    Ok(conn)
}

/// MariaDB: starts the snapshot transaction on `conn`; returns its binlog file and offset.
async fn maria_start(conn: &mut Conn) -> Result<(String, u64), SourceError> {
    conn.query_drop(START_TX)
        .await
        .map_err(sql_err("starting the snapshot transaction"))?;
    maria_start_pos(conn).await
}

/// MariaDB: the stream's start at a snapshot's binlog position (with its GTID state).
async fn maria_start_at(
    conn: &mut Conn,
    (file, pos): (String, u64),
) -> Result<BinlogStart, SourceError> {
    let gtid: Option<Option<String>> = conn
        .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (file.as_str(), pos))
        .await
        .map_err(sql_err("reading the snapshot's GTID position"))?;
    let gtid_set = gtid_set_of(gtid.flatten().as_deref())?;
    Ok(BinlogStart {
        file,
        pos,
        gtid_set: Some(gtid_set),
    })
}

/// Starts every reader's transaction together (MariaDB); their positions, in order.
async fn maria_start_all(conns: &mut [Conn]) -> Result<Vec<(String, u64)>, SourceError> {
    futures_util::future::try_join_all(conns.iter_mut().map(maria_start)).await
}

async fn rollback_all(conns: &mut [Conn]) -> Result<(), SourceError> {
    futures_util::future::try_join_all(conns.iter_mut().map(|c| c.query_drop("ROLLBACK")))
        .await
        .map_err(sql_err("restarting the snapshot transactions"))?;
    Ok(())
}

/// The indexes of the largest group of equal positions.
fn largest_group(positions: &[(String, u64)]) -> Vec<usize> {
    let mut best: Vec<usize> = Vec::new();
    for p in positions {
        let group: Vec<usize> = (0..positions.len())
            .filter(|&i| &positions[i] == p)
            .collect();
        if group.len() > best.len() {
            best = group;
        }
    }
    best
}

/// Opens `n` readers (at least one) whose transactions share one snapshot; returns them and
/// where the stream starts (see the module documentation).
async fn open_readers(
    cfg: &MySqlSourceConfig,
    flavor: Flavor,
    n: usize,
) -> Result<(Vec<Conn>, BinlogStart), SourceError> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n.max(1) {
        conns.push(reader(cfg).await?);
    }
    if flavor == Flavor::MySql {
        let start = locked_start(&mut conns, flavor).await?;
        return Ok((conns, start));
    }
    if conns.len() == 1 {
        let p = maria_start(&mut conns[0]).await?;
        let start = maria_start_at(&mut conns[0], p).await?;
        return Ok((conns, start));
    }
    for attempt in 1..=ALIGN_ATTEMPTS {
        let positions = maria_start_all(&mut conns).await?;
        if positions.iter().all(|p| *p == positions[0]) {
            let start = maria_start_at(&mut conns[0], positions[0].clone()).await?;
            return Ok((conns, start));
        }
        tracing::debug!(
            attempt,
            "the snapshot readers' transactions started at different binlog positions (a commit fell between them); starting them again"
        );
        rollback_all(&mut conns).await?;
    }
    match locked_start(&mut conns, flavor).await {
        Ok(start) => {
            tracing::info!(
                readers = conns.len(),
                attempts = ALIGN_ATTEMPTS,
                "the snapshot readers could not start at one binlog position under the concurrent writes: started them under a brief FLUSH TABLES WITH READ LOCK"
            );
            Ok((conns, start))
        }
        Err(e) => {
            // Without RELOAD: as many readers as agree (one always does).
            let positions = maria_start_all(&mut conns).await?;
            let keep = largest_group(&positions);
            let mut kept = Vec::with_capacity(keep.len());
            for (i, c) in conns.into_iter().enumerate() {
                if keep.contains(&i) {
                    kept.push(c);
                } else {
                    let _ = c.disconnect().await;
                }
            }
            tracing::warn!(
                readers = kept.len(),
                wanted = n,
                error = %e,
                "the snapshot readers could not start at one binlog position and the brief read lock was refused: reading with fewer connections. Fix: GRANT RELOAD ON *.* to the connector's user"
            );
            let start = maria_start_at(&mut kept[0], positions[keep[0]].clone()).await?;
            Ok((kept, start))
        }
    }
}

/// Starts every reader's transaction under `FLUSH TABLES WITH READ LOCK` (nothing commits
/// meanwhile), reads the position, and releases the lock.
async fn locked_start(conns: &mut [Conn], flavor: Flavor) -> Result<BinlogStart, SourceError> {
    conns[0]
        .query_drop("FLUSH TABLES WITH READ LOCK")
        .await
        .map_err(sql_err(
            "locking the tables to read the binlog position (needs RELOAD)",
        ))?;
    let result = async {
        for c in conns.iter_mut() {
            c.query_drop(START_TX)
                .await
                .map_err(sql_err("starting the snapshot transaction"))?;
        }
        match flavor {
            Flavor::MariaDb => Ok(Ok(maria_start_pos(&mut conns[0]).await?)),
            Flavor::MySql => {
                let c = &mut conns[0];
                let row: Option<mysql_async::Row> =
                    match c.query_first("SHOW BINARY LOG STATUS").await {
                        Ok(r) => r,
                        Err(_) => c
                            .query_first("SHOW MASTER STATUS")
                            .await
                            .map_err(sql_err("reading the binlog position"))?,
                    };
                Ok(Err(row))
            }
        }
    }
    .await;
    let unlock = conns[0].query_drop("UNLOCK TABLES").await;
    let got: Result<Result<(String, u64), Option<mysql_async::Row>>, SourceError> = result;
    let got = got?;
    unlock.map_err(sql_err("releasing the snapshot's read lock"))?;
    match got {
        Ok(p) => maria_start_at(&mut conns[0], p).await,
        Err(row) => {
            let Some(row) = row else {
                return Err(SourceError::definite(
                    "starting the snapshot",
                    "the binary log is off (SHOW MASTER STATUS is empty)",
                    "enable the binary log (log_bin, binlog_format = ROW) and restart the server",
                ));
            };
            let file: String = row.get(0).unwrap_or_default();
            let pos: u64 = row.get(1).unwrap_or(4);
            let executed: Option<String> = row.get(4);
            let gtid_set = match executed.as_deref().map(str::trim) {
                Some(s) if !s.is_empty() => Some(gtid_set_of(Some(s))?),
                _ => None,
            };
            Ok(BinlogStart {
                file,
                pos,
                gtid_set,
            })
        }
    }
}

/// MariaDB, in a session whose snapshot transaction is open: its binlog position.
async fn maria_start_pos(conn: &mut Conn) -> Result<(String, u64), SourceError> {
    let rows: Vec<(String, String)> = conn
        .query("SHOW STATUS LIKE 'binlog_snapshot_%'")
        .await
        .map_err(sql_err("reading the snapshot's binlog position"))?;
    let get = |n: &str| {
        rows.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
    };
    match (get("binlog_snapshot_file"), get("binlog_snapshot_position")) {
        (Some(file), Some(pos)) if !file.is_empty() => Ok((file, pos.parse().unwrap_or(4))),
        _ => Err(SourceError::definite(
            "starting the snapshot",
            "the server reports no binlog_snapshot_file / binlog_snapshot_position",
            "enable the binary log: log_bin = mysql-bin, binlog_format = ROW, binlog_row_image = FULL in my.cnf, then restart the server",
        )),
    }
}

fn gtid_set_of(text: Option<&str>) -> Result<GtidSet, SourceError> {
    match text.map(str::trim) {
        None | Some("") => Ok(GtidSet::empty_mariadb()),
        Some(t) => t.parse().map_err(|e: cdc_schemas::gtid::ParseGtidError| {
            SourceError::definite(
                "reading the snapshot's GTID position",
                e.to_string(),
                "report this as a bug",
            )
        }),
    }
}

/// The current binlog position (for `snapshot.mode = "never"`).
pub async fn current_position(conn: &mut Conn, flavor: Flavor) -> Result<BinlogStart, SourceError> {
    let row: Option<mysql_async::Row> = match conn.query_first("SHOW BINARY LOG STATUS").await {
        Ok(r) => r,
        Err(_) => conn
            .query_first("SHOW MASTER STATUS")
            .await
            .map_err(sql_err("reading the binlog position"))?,
    };
    let Some(row) = row else {
        return Err(SourceError::definite(
            "reading the binlog position",
            "the binary log is off",
            "enable the binary log (log_bin, binlog_format = ROW) and restart the server",
        ));
    };
    let file: String = row.get(0).unwrap_or_default();
    let pos: u64 = row.get(1).unwrap_or(4);
    let gtid_set = match flavor {
        Flavor::MariaDb => {
            let g: Option<Option<String>> = conn
                .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (file.as_str(), pos))
                .await
                .map_err(sql_err("reading the GTID position"))?;
            Some(gtid_set_of(g.flatten().as_deref())?)
        }
        Flavor::MySql => None,
    };
    Ok(BinlogStart {
        file,
        pos,
        gtid_set,
    })
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
    let mut result = Ok(());
    while let Some(r) = workers.join_next().await {
        let r = r.unwrap_or_else(|e| {
            Err(SourceError::definite(
                "snapshot reader",
                e.to_string(),
                "report this as a bug",
            ))
        });
        if let Err(e) = r {
            if result.is_ok() {
                result = Err(e);
            }
            workers.abort_all();
        }
    }
    if let Some(l) = logger {
        l.abort();
    }
    if result.is_ok() {
        result = seq.finish().await;
    }
    progress.end();
    result?;
    let view = progress.view();
    tracing::info!(
        rows = view.rows,
        tables = view.tables,
        secs = started.elapsed().as_secs_f64(),
        rows_per_sec = view.rows_per_sec() as u64,
        "snapshot read every table"
    );
    Ok(SnapshotDone {
        start,
        schemas,
        rows: view.rows,
    })
}

fn qualified(t: &MyTable) -> String {
    format!("{}.{}", my_ident(&t.database), my_ident(&t.name))
}

fn is_integer(c: &MyColumn) -> bool {
    matches!(
        c.data_type.to_ascii_lowercase().as_str(),
        "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint"
    )
}

/// How a key column's value is written back into SQL as a range boundary; `None`: its
/// text form does not compare as the index orders (floating point, ENUM, SET, BIT, JSON,
/// spatial), so the table is read whole.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Literal {
    /// Integers and decimals: the text as it is.
    Number,
    /// Binary strings: `X'…'` (compared byte-wise, as their index is).
    Hex,
    /// Character strings and temporal types: a quoted string, which the comparison
    /// converts to the column's character set and collation (or type).
    Quoted,
}

fn literal_kind(c: &MyColumn) -> Option<Literal> {
    let dt = c.data_type.to_ascii_lowercase();
    Some(match dt.as_str() {
        "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint" | "decimal"
        | "numeric" => Literal::Number,
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => Literal::Hex,
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext"
            if c.charset.as_deref() == Some("binary") =>
        {
            Literal::Hex
        }
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "date"
        | "datetime" | "timestamp" | "time" | "year" => Literal::Quoted,
        _ => return None,
    })
}

/// The `WHERE` predicates that split `t` into ranges of about `chunk_rows` rows (see the
/// module documentation); one `None` for a table read whole.
async fn plan_ranges(
    conn: &mut Conn,
    t: &MyTable,
    estimated_rows: u64,
    chunk_rows: u64,
    no_backslash: bool,
) -> Result<Vec<Option<String>>, SourceError> {
    let key: Vec<&MyColumn> = t
        .key
        .iter()
        .filter_map(|k| t.columns.iter().find(|c| &c.name == k))
        .collect();
    if key.is_empty() || key.len() != t.key.len() {
        return Ok(vec![None]);
    }
    let what = format!("planning the snapshot chunks of {}.{}", t.database, t.name);
    if key.len() == 1 && is_integer(key[0]) {
        if estimated_rows <= chunk_rows {
            return Ok(vec![None]);
        }
        let k = my_ident(&key[0].name);
        let (lo, hi): (Option<String>, Option<String>) = conn
            .query_first(format!("SELECT MIN({k}), MAX({k}) FROM {}", qualified(t)))
            .await
            .map_err(|e| my_err(&what, e))?
            .unwrap_or_default();
        let (Some(lo), Some(hi)) = (
            lo.and_then(|v| v.parse::<i128>().ok()),
            hi.and_then(|v| v.parse::<i128>().ok()),
        ) else {
            return Ok(vec![None]);
        };
        return Ok(integer_ranges(
            &k,
            lo,
            hi,
            estimated_rows.div_ceil(chunk_rows),
        ));
    }
    let kinds: Option<Vec<Literal>> = key.iter().map(|c| literal_kind(c)).collect();
    let Some(kinds) = kinds else {
        return Ok(vec![None]);
    };
    let names: Vec<String> = key.iter().map(|c| my_ident(&c.name)).collect();
    let order = names.join(", ");
    let mut ranges = Vec::new();
    let mut prev: Option<Vec<String>> = None;
    loop {
        let after = prev.as_ref().map(|b| compare(&names, b, ">"));
        let sql = format!(
            "SELECT {order} FROM {}{} ORDER BY {order} LIMIT 1 OFFSET {}",
            qualified(t),
            after
                .as_ref()
                .map(|a| format!(" WHERE {a}"))
                .unwrap_or_default(),
            chunk_rows - 1
        );
        let row: Option<mysql_async::Row> =
            conn.query_first(sql).await.map_err(|e| my_err(&what, e))?;
        let Some(row) = row else {
            ranges.push(after);
            break;
        };
        let bound: Vec<String> = kinds
            .iter()
            .enumerate()
            .map(|(i, kind)| literal(row.as_ref(i), *kind, no_backslash))
            .collect();
        let upto = compare(&names, &bound, "<=");
        ranges.push(Some(match after {
            Some(a) => format!("({a}) AND ({upto})"),
            None => upto,
        }));
        prev = Some(bound);
    }
    Ok(ranges)
}

/// `count` ranges of the integer key `k` between `lo` and `hi`, the first open below
/// and the last open above.
fn integer_ranges(k: &str, lo: i128, hi: i128, count: u64) -> Vec<Option<String>> {
    let width = hi - lo + 1;
    let count = (count as i128).clamp(1, width.max(1));
    if count <= 1 {
        return vec![None];
    }
    let bounds: Vec<i128> = (1..count).map(|i| lo + width * i / count).collect();
    let mut out = Vec::with_capacity(count as usize);
    out.push(Some(format!("{k} < {}", bounds[0])));
    for w in bounds.windows(2) {
        out.push(Some(format!("{k} >= {} AND {k} < {}", w[0], w[1])));
    }
    out.push(Some(format!("{k} >= {}", bounds[bounds.len() - 1])));
    out
}

/// `(names) op (values)` in the lexicographic order of the key, spelt out so that the
/// range optimizer sees column comparisons: `a > x OR (a = x AND b > y)` for `>`, and the
/// same with `<` and a final `<=` for `<=`.
fn compare(names: &[String], values: &[String], op: &str) -> String {
    let strict = if op == "<=" { "<" } else { op };
    let last = names.len() - 1;
    let mut s = format!("{} {op} {}", names[last], values[last]);
    for i in (0..last).rev() {
        s = format!(
            "{n} {strict} {v} OR ({n} = {v} AND ({s}))",
            n = names[i],
            v = values[i]
        );
    }
    s
}

/// A text-protocol value as an SQL literal of `kind`.
fn literal(v: Option<&MyValue>, kind: Literal, no_backslash: bool) -> String {
    let bytes: &[u8] = match v {
        Some(MyValue::Bytes(b)) => b,
        Some(MyValue::NULL) | None => return "NULL".into(),
        Some(other) => return other.as_sql(no_backslash),
    };
    match kind {
        Literal::Number
            if bytes
                .iter()
                .all(|b| b.is_ascii_digit() || b"+-.eE".contains(b)) =>
        {
            String::from_utf8_lossy(bytes).into_owned()
        }
        Literal::Hex => {
            let mut s = String::with_capacity(3 + 2 * bytes.len());
            s.push_str("X'");
            for b in bytes {
                s.push_str(&format!("{b:02X}"));
            }
            s.push('\'');
            s
        }
        _ => MyValue::Bytes(bytes.to_vec()).as_sql(no_backslash),
    }
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
    // Values the text protocol does not send as bytes (it sends only bytes and NULLs)
    // are passed on as their SQL text.
    let mut other: Vec<Option<String>> = Vec::new();
    while let Some(row) = result.next().await.map_err(|e| my_err(&what, e))? {
        let width = t.c.decoder.columns().len();
        other.clear();
        other.extend((0..width).map(|i| match row.as_ref(i) {
            Some(MyValue::Bytes(_)) | Some(MyValue::NULL) | None => None,
            Some(v) => Some(v.as_sql(true)),
        }));
        let values = t.c.decoder.row_from_text(
            (0..width).map(|i| match (row.as_ref(i), &other[i]) {
                (_, Some(s)) => Some(s.as_bytes()),
                (Some(MyValue::Bytes(b)), None) => Some(b.as_slice()),
                _ => None,
            }),
            opts,
        );
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
/// documentation). Sending happens under its lock: the channel is the only order.
struct Sequencer {
    out: mpsc::Sender<ChangeBatch>,
    state: tokio::sync::Mutex<SeqState>,
    /// The first table not read completely yet: a table's records wait until every
    /// table before it is done, so tables go out in their order (Debezium's, which its
    /// markers assume) while the chunks of one table are read in parallel.
    front: tokio::sync::watch::Sender<usize>,
    progress: Option<Arc<SnapshotProgress>>,
    /// Checked after each batch: a shutdown stops the snapshot (it starts over next time).
    shutdown: Option<tokio::sync::watch::Receiver<bool>>,
}

impl Sequencer {
    fn new(
        out: mpsc::Sender<ChangeBatch>,
        tables: Vec<TableId>,
        chunks: Vec<usize>,
        progress: Arc<SnapshotProgress>,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        let mut s = Sequencer::unobserved(out, tables, chunks);
        s.progress = Some(progress);
        s.shutdown = Some(shutdown);
        s
    }

    fn unobserved(
        out: mpsc::Sender<ChangeBatch>,
        tables: Vec<TableId>,
        chunks: Vec<usize>,
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
            front: tokio::sync::watch::Sender::new(0),
            progress: None,
            shutdown: None,
        }
    }

    /// Sends `events` (rows of table `table` in read order, `bytes` their
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
        // Chunks are handed out in table order, so the readers of earlier tables are not
        // waiting here: the front always advances.
        let mut front = self.front.subscribe();
        front
            .wait_for(|&f| f >= table)
            .await
            .map_err(|_| SourceError::transient("snapshot", "the snapshot stopped"))?;
        let mut guard = self.state.lock().await;
        let st = &mut *guard;
        let t = &mut st.tables[table];
        if !t.seen {
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
        if let Some(p) = &self.progress {
            p.add_rows(n as u64);
        }
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
        let next = st
            .tables
            .iter()
            .position(|t| t.chunks_left > 0)
            .unwrap_or(st.tables.len());
        self.front.send_replace(next);
        let t = &mut st.tables[table];
        tracing::info!(table = %t.id, rows = t.rows, "table snapshot read");
        if let Some(p) = &self.progress {
            p.table_done();
        }
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
        send(
            &self.out,
            ChangeBatch {
                events,
                commit: None,
                approx_bytes,
                snapshot: None,
            },
        )
        .await
        .map_err(|_| SourceError::transient("snapshot", "the pipeline stopped"))?;
        if self.shutdown.as_ref().is_some_and(|s| *s.borrow()) {
            return Err(SourceError::transient(
                "snapshot",
                "stopped by the shutdown; it starts over on the next run",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cdc_schemas::{Column, ColumnType, TableSchema, Value};

    fn ev(t: &Arc<TableSchema>, id: i32) -> ChangeEvent {
        ChangeEvent::read(
            t.clone(),
            Row::new(vec![Value::Int32(id)]),
            SourcePosition::Mysql(MySqlPosition::default()),
            0,
        )
        .unwrap()
    }

    /// The records sent when `tables` (each a list of chunks of rows) are read, chunk
    /// after chunk, in batches of at most `max`.
    async fn run(tables: Vec<Vec<Vec<i32>>>, max: usize) -> Vec<(i32, SnapshotMarker)> {
        let t = Arc::new(
            TableSchema::new(
                TableId::new("d", "t"),
                vec![Column::new("id", ColumnType::Int32, "int")],
                &["id"],
            )
            .unwrap(),
        );
        let (tx, mut rx) = mpsc::channel(1000);
        let ids = tables.iter().map(|_| TableId::new("d", "t")).collect();
        let chunks = tables.iter().map(Vec::len).collect();
        let seq = Sequencer::unobserved(tx, ids, chunks);
        for (i, chunks) in tables.into_iter().enumerate() {
            for rows in chunks {
                for part in rows.chunks(max) {
                    let evs = part.iter().map(|&r| ev(&t, r)).collect();
                    seq.emit(i, evs, 0).await.unwrap();
                }
                seq.chunk_done(i).await.unwrap();
            }
        }
        seq.finish().await.unwrap();
        drop(seq);
        let mut out = Vec::new();
        while let Some(b) = rx.recv().await {
            assert!(!b.events.is_empty() && b.events.len() <= max && b.commit.is_none());
            for e in b.events {
                let Value::Int32(i) = e.after.as_ref().unwrap().0[0] else {
                    unreachable!()
                };
                out.push((i, e.snapshot));
            }
        }
        out
    }

    use SnapshotMarker as M;

    #[tokio::test]
    async fn markers() {
        assert_eq!(
            run(
                vec![
                    vec![vec![1, 2], vec![3]],
                    vec![vec![]],
                    vec![vec![4]],
                    vec![vec![5, 6]]
                ],
                2
            )
            .await,
            vec![
                (1, M::First),
                (2, M::True),
                (3, M::LastInDataCollection),
                (4, M::LastInDataCollection),
                (5, M::FirstInDataCollection),
                (6, M::Last),
            ]
        );
        assert_eq!(run(vec![vec![vec![7]]], 10).await, vec![(7, M::Last)]);
        assert_eq!(
            run(vec![vec![vec![1]], vec![vec![], vec![2]]], 10).await,
            vec![(1, M::First), (2, M::Last)]
        );
        assert!(run(vec![vec![vec![]], vec![vec![]]], 10).await.is_empty());
    }
}

#[cfg(test)]
mod range_tests {
    use super::*;

    #[test]
    fn integer_ranges_cover_everything_once() {
        let r = integer_ranges("`id`", 1, 10, 3);
        assert_eq!(
            r,
            vec![
                Some("`id` < 4".to_string()),
                Some("`id` >= 4 AND `id` < 7".to_string()),
                Some("`id` >= 7".to_string()),
            ]
        );
        assert_eq!(integer_ranges("`id`", 5, 5, 4), vec![None]);
        assert_eq!(integer_ranges("`id`", 1, 100, 1), vec![None]);
        // More pieces than values: one per value.
        assert_eq!(integer_ranges("`id`", 1, 2, 9).len(), 2);
    }

    #[test]
    fn composite_comparisons_are_spelt_out() {
        let n = ["`a`".to_string(), "`b`".to_string()];
        let v = ["1".to_string(), "'x'".to_string()];
        assert_eq!(compare(&n, &v, ">"), "`a` > 1 OR (`a` = 1 AND (`b` > 'x'))");
        assert_eq!(
            compare(&n, &v, "<="),
            "`a` < 1 OR (`a` = 1 AND (`b` <= 'x'))"
        );
        assert_eq!(compare(&n[..1], &v[..1], ">"), "`a` > 1");
    }

    #[test]
    fn literals() {
        let b = |s: &[u8]| MyValue::Bytes(s.to_vec());
        assert_eq!(literal(Some(&b(b"-12")), Literal::Number, false), "-12");
        assert_eq!(
            literal(Some(&b(b"\x00\xff")), Literal::Hex, false),
            "X'00FF'"
        );
        assert_eq!(
            literal(Some(&b(b"o'k\\")), Literal::Quoted, false),
            "'o\\'k\\\\'"
        );
        assert_eq!(literal(Some(&b(b"o'k")), Literal::Quoted, true), "'o''k'");
        // Not a number after all: quoted, never pasted.
        assert_eq!(literal(Some(&b(b"1;x")), Literal::Number, true), "'1;x'");
    }
}
