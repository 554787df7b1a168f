//! The snapshot of a MySQL / MariaDB source: every captured table read in one consistent
//! transaction, as `op = r` events, handed off to the stream at the binlog position of
//! that transaction.
//!
//! # Consistency
//!
//! MariaDB, lock-free: `START TRANSACTION WITH CONSISTENT SNAPSHOT` (repeatable read)
//! and, in the same session, `SHOW STATUS LIKE 'binlog_snapshot_%'`: the binlog file and
//! offset at which the snapshot was taken (MariaDB fixes them with the snapshot), and
//! `BINLOG_GTID_POS(file, pos)`, the GTID state there. Every transaction committed before
//! that point is in the snapshot and every one after it follows in the stream that starts
//! there. MySQL has no such status: the snapshot is opened under a brief
//! `FLUSH TABLES WITH READ LOCK` (RELOAD privilege), during which the binlog position is
//! read, then the lock is released before any row is read.
//!
//! Values are read over the text protocol with the session's `time_zone = '+00:00'` and
//! parsed by [`decode::text_value`]; table schemas are loaded ([`Schemas::load`]) inside
//! the snapshot's transaction, so they are the ones the rows have.
//!
//! One connection reads the tables one after the other (chunking tables by key ranges
//! over several connections sharing the snapshot is a later step).
//!
//! # Markers
//!
//! As the Postgres snapshot's (Debezium 3.x): the first record `first`, the last `last`,
//! each table's first `first_in_data_collection` and last `last_in_data_collection`,
//! precedence `last` > `first` > `last_in_data_collection` > `first_in_data_collection`.
//! The newest record read is held back until the next one shows it is not the last.

use std::sync::Arc;
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
use super::table::MyTable;
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

/// Opens the consistent snapshot on `conn` and returns where the stream starts.
async fn open_snapshot(conn: &mut Conn, flavor: Flavor) -> Result<BinlogStart, SourceError> {
    conn.query_drop(
        "SET SESSION time_zone = '+00:00'; SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
    )
    .await
    .map_err(sql_err("preparing the snapshot session"))?;
    match flavor {
        Flavor::MariaDb => {
            conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
                .await
                .map_err(sql_err("starting the snapshot transaction"))?;
            let rows: Vec<(String, String)> = conn
                .query("SHOW STATUS LIKE 'binlog_snapshot_%'")
                .await
                .map_err(sql_err("reading the snapshot's binlog position"))?;
            let get = |n: &str| {
                rows.iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(n))
                    .map(|(_, v)| v.clone())
            };
            let (Some(file), Some(pos)) =
                (get("binlog_snapshot_file"), get("binlog_snapshot_position"))
            else {
                return Err(SourceError::definite(
                    "starting the snapshot",
                    "the server reports no binlog_snapshot_file / binlog_snapshot_position",
                    "enable the binary log (log_bin) and restart the server",
                ));
            };
            let pos: u64 = pos.parse().unwrap_or(4);
            if file.is_empty() {
                return Err(SourceError::definite(
                    "starting the snapshot",
                    "the binary log is off (binlog_snapshot_file is empty)",
                    "enable the binary log: log_bin = mysql-bin, binlog_format = ROW, binlog_row_image = FULL in my.cnf, then restart the server",
                ));
            }
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
        Flavor::MySql => {
            conn.query_drop("FLUSH TABLES WITH READ LOCK")
                .await
                .map_err(sql_err(
                    "locking the tables to read the binlog position (needs RELOAD)",
                ))?;
            let result = async {
                conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
                    .await?;
                let row: Option<mysql_async::Row> =
                    match conn.query_first("SHOW BINARY LOG STATUS").await {
                        Ok(r) => r,
                        Err(_) => conn.query_first("SHOW MASTER STATUS").await?,
                    };
                Ok::<_, mysql_async::Error>(row)
            }
            .await;
            let unlock = conn.query_drop("UNLOCK TABLES").await;
            let row = result.map_err(sql_err("starting the snapshot transaction"))?;
            unlock.map_err(sql_err("releasing the snapshot's read lock"))?;
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
    let mut conn = cfg.endpoint.connect().await.map_err(connect_err)?;
    let start = open_snapshot(&mut conn, flavor).await?;
    let schemas = Schemas::load(&mut conn, &cfg.filter)
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
            snapshot: Some(SnapshotMark::Begin { tables: ids }),
        },
    )
    .await?;
    let mut estimate = 0u64;
    for t in &tables {
        let n: Option<Option<u64>> = conn
            .exec_first(
                "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
                (t.database.as_str(), t.name.as_str()),
            )
            .await
            .map_err(sql_err("sizing a table for the snapshot"))?;
        estimate += n.flatten().unwrap_or(0);
    }
    progress.begin(tables.len() as u64, estimate);
    tracing::info!(
        tables = tables.len(),
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
    let mut seq = Markers::new(out.clone(), cfg.max_batch_events, Some(progress.clone()));
    seq.shutdown = Some(shutdown.clone());
    let opts = cfg.decode.clone();
    let result = async {
        for t in &tables {
            let c = Captured::new(t.clone())?;
            let rows = read_table(&mut conn, &c, &pos, &opts, &mut seq, metrics).await?;
            seq.table_done().await?;
            progress.table_done();
            tracing::info!(table = %c.schema.id, rows, "table snapshot read");
        }
        seq.finish().await
    }
    .await;
    if let Some(l) = logger {
        l.abort();
    }
    progress.end();
    result?;
    let _ = conn.query_drop("COMMIT").await;
    let _ = conn.disconnect().await;
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

async fn read_table(
    conn: &mut Conn,
    t: &Captured,
    pos: &SourcePosition,
    opts: &DecodeOptions,
    seq: &mut Markers,
    metrics: &MyMetrics,
) -> Result<u64, SourceError> {
    let cols = &t.my.columns;
    let list: Vec<String> = cols
        .iter()
        .map(|c| decode::select_expr(c, &my_ident(&c.name)).into_owned())
        .collect();
    let sql = format!(
        "SELECT {} FROM {}.{}",
        list.join(", "),
        my_ident(&t.my.database),
        my_ident(&t.my.name)
    );
    let what = format!("reading {} for the snapshot", t.schema.id);
    let mut result = conn.query_iter(sql).await.map_err(|e| my_err(&what, e))?;
    let ts = now_ms();
    let mut n = 0u64;
    let bad = |e: String| {
        SourceError::definite(
            format!("snapshot of {}", t.schema.id),
            e,
            "report this as a bug, with the column's type",
        )
    };
    while let Some(row) = result.next().await.map_err(|e| my_err(&what, e))? {
        let mut values = Vec::with_capacity(cols.len());
        for (i, c) in t.decoder.columns().iter().enumerate() {
            let raw = match row.as_ref(i) {
                Some(MyValue::Bytes(b)) => Some(b.as_slice()),
                Some(MyValue::NULL) | None => None,
                Some(other) => {
                    // The text protocol only sends bytes and NULLs; anything else is
                    // passed through as its SQL text.
                    let s = other.as_sql(true);
                    values.push(c.text(Some(s.as_bytes()), opts));
                    continue;
                }
            };
            values.push(c.text(raw, opts));
        }
        let ev = ChangeEvent::read(t.schema.clone(), Row::new(values), pos.clone(), ts)
            .map_err(|e| bad(e.to_string()))?;
        n += 1;
        seq.push(ev).await?;
    }
    metrics.snapshot_rows.add(n);
    Ok(n)
}

/// Assigns the snapshot markers as records go out (see the module documentation).
struct Markers {
    out: mpsc::Sender<ChangeBatch>,
    max: usize,
    batch: Vec<ChangeEvent>,
    bytes: u64,
    /// The newest record, not yet known not to be the last.
    held: Option<ChangeEvent>,
    table_started: bool,
    first_sent: bool,
    progress: Option<Arc<SnapshotProgress>>,
    /// Checked after each batch: a shutdown stops the snapshot (it starts over next time).
    shutdown: Option<tokio::sync::watch::Receiver<bool>>,
}

impl Markers {
    fn new(
        out: mpsc::Sender<ChangeBatch>,
        max: usize,
        progress: Option<Arc<SnapshotProgress>>,
    ) -> Self {
        Markers {
            out,
            max: max.max(1),
            batch: Vec::new(),
            bytes: 0,
            held: None,
            table_started: false,
            first_sent: false,
            progress,
            shutdown: None,
        }
    }

    async fn push(&mut self, mut ev: ChangeEvent) -> Result<(), SourceError> {
        if !self.table_started {
            self.table_started = true;
            ev.snapshot = SnapshotMarker::FirstInDataCollection;
        }
        if let Some(prev) = self.held.replace(ev) {
            self.emit(prev, false).await?;
        }
        Ok(())
    }

    /// Adds `ev` to the batch; `last`: it is the very last record.
    async fn emit(&mut self, mut ev: ChangeEvent, last: bool) -> Result<(), SourceError> {
        if last {
            ev.snapshot = SnapshotMarker::Last;
        } else if !self.first_sent {
            ev.snapshot = SnapshotMarker::First;
        }
        self.first_sent = true;
        self.bytes += ev.approx_size() as u64;
        self.batch.push(ev);
        if self.batch.len() >= self.max {
            self.flush().await?;
        }
        Ok(())
    }

    async fn table_done(&mut self) -> Result<(), SourceError> {
        self.table_started = false;
        if let Some(h) = self.held.as_mut() {
            h.snapshot = SnapshotMarker::LastInDataCollection;
        }
        Ok(())
    }

    async fn finish(&mut self) -> Result<(), SourceError> {
        if let Some(h) = self.held.take() {
            self.emit(h, true).await?;
        }
        self.flush().await
    }

    async fn flush(&mut self) -> Result<(), SourceError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let events = std::mem::replace(&mut self.batch, Vec::with_capacity(self.max));
        if let Some(p) = &self.progress {
            p.add_rows(events.len() as u64);
        }
        send(
            &self.out,
            ChangeBatch {
                events,
                commit: None,
                approx_bytes: std::mem::take(&mut self.bytes),
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

    async fn run(tables: Vec<Vec<i32>>, max: usize) -> Vec<(i32, SnapshotMarker)> {
        let t = Arc::new(
            TableSchema::new(
                TableId::new("d", "t"),
                vec![Column::new("id", ColumnType::Int32, "int")],
                &["id"],
            )
            .unwrap(),
        );
        let (tx, mut rx) = mpsc::channel(1000);
        let mut m = Markers::new(tx, max, None);
        for rows in tables {
            for r in rows {
                m.push(ev(&t, r)).await.unwrap();
            }
            m.table_done().await.unwrap();
        }
        m.finish().await.unwrap();
        drop(m);
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
            run(vec![vec![1, 2, 3], vec![], vec![4], vec![5, 6]], 2).await,
            vec![
                (1, M::First),
                (2, M::True),
                (3, M::LastInDataCollection),
                (4, M::LastInDataCollection),
                (5, M::FirstInDataCollection),
                (6, M::Last),
            ]
        );
        assert_eq!(run(vec![vec![7]], 10).await, vec![(7, M::Last)]);
        assert_eq!(
            run(vec![vec![1], vec![2]], 10).await,
            vec![(1, M::First), (2, M::Last)]
        );
        assert!(run(vec![vec![], vec![]], 10).await.is_empty());
    }
}
