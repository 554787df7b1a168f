//! The MySQL / MariaDB source: what runs when — resume, the snapshot and its hand-off to
//! the binlog stream, a new snapshot when the binlog is gone (`when_needed`) — and the
//! [`crate::Source`] the factory builds.
//!
//! The snapshot lives in [`super::snapshot`], the stream in [`super::stream`], the binlog
//! connection in [`super::binlog`]; this file decides which run when and holds the
//! source's contract with the pipeline together.
//!
//! # Where to start
//!
//! - A stored checkpoint: stream from it (GTID state, or file and offset).
//! - None, `snapshot.mode = "never"`: stream from the server's current position.
//! - Otherwise a snapshot (`Begin` … rows … `End` with the stream's start), then stream.
//!   Over an existing log (an unfinished snapshot, or `when_needed` after the binlog was
//!   purged) `Begin` carries [`Checkpoint::SnapshotIncomplete`].
//! - `initial_only`: after the snapshot is durable, return; with a stored checkpoint,
//!   nothing to do. MySQL keeps nothing on the server for a replica, so nothing is left
//!   behind.
//!
//! # Acknowledgement
//!
//! A MySQL replica has no slot: the server keeps binlogs by its own retention, whatever
//! the connector has read. The durable handle is only waited on at shutdown (bounded),
//! so that what was sent has a chance to become durable before the source returns.
//!
//! # Table schemas and their history
//!
//! A snapshot loads them ([`Schemas::load`]) inside its transaction, so they are the
//! rows' schemas; the stream then follows the binlog's DDL on them. Each state is kept in
//! the schema history ([`SchemaHistory`], a JSON-lines file beside the log): the
//! snapshot's (or, for `never`, the start's) as the base, then one entry per DDL that
//! changed the schemas, each tagged with the binlog position after the statement. It is
//! written (and synced) before the DDL's checkpoint can be sent, so a resume from a
//! durable checkpoint finds the state valid there: the newest entry at or before it.
//! Without a usable entry (a log written before the history existed, a deleted file) the
//! stream starts from `information_schema`'s schemas *now*, and says so: a DDL between
//! the stored position and the restart is then not seen at its place.

use std::time::Duration;

use cdc_schemas::{Checkpoint, MySqlPosition, SourcePosition};
use mysql_async::prelude::Queryable;
use tokio::sync::mpsc;

use super::binlog::{connect_err, my_err, BinlogStart, Flavor};
use super::config::MySqlSourceConfig;
use super::metrics::MyMetrics;
use super::schema::{SchemaLoadError, Schemas};
use super::snapshot::{current_position, run_snapshot};
use super::stream::{stream, StreamEnd};
pub use crate::config::SnapshotMode;
use crate::{ChangeBatch, SnapshotMark, Source, SourceContext, SourceError};

/// The MySQL / MariaDB source.
pub struct MySqlSource {
    cfg: MySqlSourceConfig,
}

impl MySqlSource {
    pub fn new(cfg: MySqlSourceConfig) -> Self {
        MySqlSource { cfg }
    }

    /// The database of the URL (may be empty: records name each table's database).
    pub fn database(&self) -> &str {
        &self.cfg.endpoint.dbname
    }

    /// `mariadb://` URLs name Debezium's MariaDB connector in records.
    pub fn is_mariadb_url(&self) -> bool {
        self.cfg.mariadb_url
    }
}

impl Source for MySqlSource {
    async fn run(self, ctx: SourceContext) -> Result<(), SourceError> {
        run(self.cfg, ctx).await
    }
}

pub(super) async fn send(
    tx: &mpsc::Sender<ChangeBatch>,
    b: ChangeBatch,
) -> Result<(), SourceError> {
    tx.send(b)
        .await
        .map_err(|_| SourceError::transient("mysql source", "the pipeline stopped"))
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A MySQL identifier, back-quoted.
pub(super) fn my_ident(s: &str) -> String {
    format!("`{}`", s.replace('`', "``"))
}

/// The MySQL position of a checkpoint (None for another source's, or an unfinished
/// snapshot).
pub(super) fn my_position(c: Option<&Checkpoint>) -> Option<MySqlPosition> {
    match c.and_then(Checkpoint::position) {
        Some(SourcePosition::Mysql(p)) => Some(p.clone()),
        _ => None,
    }
}

/// One state of the schema history: `schemas` hold for the binlog after `file:pos`.
#[derive(serde::Serialize, serde::Deserialize)]
struct HistoryEntry {
    file: String,
    pos: u64,
    schemas: Schemas,
}

/// The schema history (see the module documentation).
pub(super) struct SchemaHistory {
    path: std::path::PathBuf,
}

fn history_err(path: &std::path::Path, e: std::io::Error) -> SourceError {
    SourceError::transient(
        "writing the MySQL schema history",
        format!(
            "{}: {e}; free space on that disk or fix its permissions",
            path.display()
        ),
    )
    .caused_by(e)
}

/// Binlog order of two positions of one server.
fn position_key(file: &str, pos: u64) -> (u64, String, u64) {
    (
        super::metrics::file_number(file).unwrap_or(0),
        file.to_string(),
        pos,
    )
}

impl SchemaHistory {
    pub fn new(path: std::path::PathBuf) -> Self {
        SchemaHistory { path }
    }

    fn line(file: &str, pos: u64, schemas: &Schemas) -> Vec<u8> {
        let mut line = serde_json::to_vec(&HistoryEntry {
            file: file.to_string(),
            pos,
            schemas: schemas.clone(),
        })
        .expect("schemas serialise");
        line.push(b'\n');
        line
    }

    /// Starts a new history whose base is `schemas` at `file:pos` (a snapshot's start).
    pub fn reset(&self, file: &str, pos: u64, schemas: &Schemas) -> Result<(), SourceError> {
        use std::io::Write;
        let tmp = self.path.with_extension("jsonl.tmp");
        let write = || -> std::io::Result<()> {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&Self::line(file, pos, schemas))?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            if let Some(dir) = self.path.parent() {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        };
        write().map_err(|e| history_err(&self.path, e))
    }

    /// Records that `schemas` hold after `file:pos` (a DDL's end).
    pub fn append(&self, file: &str, pos: u64, schemas: &Schemas) -> Result<(), SourceError> {
        use std::io::Write;
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            f.write_all(&Self::line(file, pos, schemas))?;
            f.sync_data()
        };
        write().map_err(|e| history_err(&self.path, e))
    }

    /// Keeps, when the file outgrew `limit` bytes, only the state at the durable
    /// `file:pos` and the entries after it (what a resume can still need).
    pub fn compact(&self, limit: u64, file: &str, pos: u64) -> Result<(), SourceError> {
        let big = std::fs::metadata(&self.path).is_ok_and(|m| m.len() > limit);
        if !big {
            return Ok(());
        }
        let Ok(text) = std::fs::read_to_string(&self.path) else {
            return Ok(());
        };
        let Some(base) = self.at(file, pos) else {
            return Ok(());
        };
        let want = position_key(file, pos);
        let later: Vec<&str> = text
            .lines()
            .filter(|l| {
                serde_json::from_str::<HistoryEntry>(l)
                    .is_ok_and(|e| position_key(&e.file, e.pos) > want)
            })
            .collect();
        self.reset(file, pos, &base)?;
        for l in later {
            let e: HistoryEntry = serde_json::from_str(l).expect("parsed above");
            self.append(&e.file, e.pos, &e.schemas)?;
        }
        tracing::info!(history = %self.path.display(), "schema history compacted");
        Ok(())
    }

    /// The schemas valid at `file:pos`: the newest entry at or before it. A line cut short
    /// by a crash is ignored (its DDL's checkpoint was not durable either).
    pub fn at(&self, file: &str, pos: u64) -> Option<Schemas> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        let want = position_key(file, pos);
        let mut best: Option<((u64, String, u64), Schemas)> = None;
        for line in text.lines() {
            let Ok(e) = serde_json::from_str::<HistoryEntry>(line) else {
                continue;
            };
            let k = position_key(&e.file, e.pos);
            if k <= want && best.as_ref().is_none_or(|(b, _)| k >= *b) {
                best = Some((k, e.schemas));
            }
        }
        best.map(|(_, s)| s)
    }
}

/// A failure to load table schemas as a source error.
pub(super) fn schema_err(e: SchemaLoadError) -> SourceError {
    if e.is_transient() {
        SourceError::transient("loading table schemas", e.to_string()).caused_by(e)
    } else {
        SourceError::definite(
            "loading table schemas",
            e.to_string(),
            "grant SELECT on the captured tables to the source's user",
        )
        .caused_by(e)
    }
}

async fn run(cfg: MySqlSourceConfig, mut ctx: SourceContext) -> Result<(), SourceError> {
    let metrics = MyMetrics::register(&ctx.metrics);
    let mut conn = cfg.endpoint.connect().await.map_err(connect_err)?;
    let (version, format): (String, String) = conn
        .query_first("SELECT VERSION(), @@GLOBAL.binlog_format")
        .await
        .map_err(|e| my_err("reading the server version", e))?
        .unwrap_or_default();
    if !format.eq_ignore_ascii_case("ROW") {
        return Err(SourceError::definite(
            "binlog_format",
            format!("binlog_format is {format}: row changes are only in the binlog with ROW"),
            "SET GLOBAL binlog_format = 'ROW' and add binlog_format = ROW to my.cnf (run `cdc check` for every setting)",
        ));
    }
    let flavor = Flavor::of_version(&version);
    let stored = my_position(ctx.resume_from.as_ref());
    let mode = cfg.snapshot_mode;
    let mut schemas: Option<Schemas> = None;
    let history = SchemaHistory::new(cfg.schema_history.clone());
    if mode == SnapshotMode::InitialOnly && stored.is_some() {
        tracing::info!("snapshot.mode = initial_only and the snapshot is complete: nothing to do");
        return Ok(());
    }
    let mut start = match &stored {
        Some(p) => {
            tracing::info!(file = %p.file, pos = p.pos, gtid_set = ?p.gtid_set.as_ref().map(|g| g.to_string()), "resuming from the stored position");
            schemas = history.at(&p.file, p.pos);
            if let Some(found) = &schemas {
                // Compacts: entries past the checkpoint are of DDL not durable yet, which
                // the stream reads (and records) again.
                history.reset(&p.file, p.pos, found)?;
            }
            if schemas.is_none() {
                tracing::warn!(history = %cfg.schema_history.display(), "no schema history at the stored position: table schemas are read from information_schema as they are now (a DDL made since the stored position is not seen at its place)");
                let loaded = Schemas::load(&mut conn, &cfg.filter)
                    .await
                    .map_err(schema_err)?;
                history.reset(&p.file, p.pos, &loaded)?;
                schemas = Some(loaded);
            }
            BinlogStart {
                file: p.file.clone(),
                pos: p.pos,
                gtid_set: p.gtid_set.clone(),
            }
        }
        None if mode == SnapshotMode::Never => {
            let s = current_position(&mut conn, flavor).await?;
            let loaded = Schemas::load(&mut conn, &cfg.filter)
                .await
                .map_err(schema_err)?;
            history.reset(&s.file, s.pos, &loaded)?;
            schemas = Some(loaded);
            tracing::info!(file = %s.file, pos = s.pos, "snapshot.mode = never: streaming from the server's current position");
            s
        }
        None => {
            let over_log = ctx.resume_from.is_some();
            match snapshot(&cfg, flavor, over_log, &mut ctx, &metrics, &mut schemas).await? {
                Some(s) => s,
                None => return Ok(()),
            }
        }
    };
    let schemas = match schemas {
        Some(s) => s,
        None => Schemas::load(&mut conn, &cfg.filter)
            .await
            .map_err(schema_err)?,
    };
    let _ = conn.disconnect().await;
    let mut schemas = Some(schemas);
    let result = loop {
        let s = schemas.take().unwrap_or_default();
        match stream(&cfg, flavor, start.clone(), s, &mut ctx, metrics.clone()).await {
            StreamEnd::Stopped => break Ok(()),
            StreamEnd::Purged(e) if mode == SnapshotMode::WhenNeeded => {
                tracing::warn!(error = %e, "the stored binlog position is gone from the server; snapshot.mode = when_needed: taking a new snapshot");
                match snapshot(&cfg, flavor, true, &mut ctx, &metrics, &mut schemas).await? {
                    Some(s) => start = s,
                    None => break Ok(()),
                }
            }
            StreamEnd::Purged(e) | StreamEnd::Failed(e) => break Err(e),
        }
    };
    // Let the pipeline drain what we sent (bounded; briefly after an error: what is not
    // durable is read again by the next attempt from the log's checkpoint).
    let SourceContext {
        batches, durable, ..
    } = ctx;
    drop(batches);
    let mut durable = durable;
    let drain = if result.is_err() {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(30)
    };
    let deadline = tokio::time::Instant::now() + drain;
    while tokio::time::timeout_at(deadline, durable.changed())
        .await
        .map(|r| r.is_ok())
        .unwrap_or(false)
    {}
    if let Some(p) = durable.position_with(|p| Some(p.to_string())) {
        tracing::info!(position = %p, "source stopped; durable position");
    }
    result
}

/// Runs a snapshot and sends its `End`; `None`: `initial_only` is done.
async fn snapshot(
    cfg: &MySqlSourceConfig,
    flavor: Flavor,
    over_log: bool,
    ctx: &mut SourceContext,
    metrics: &MyMetrics,
    schemas: &mut Option<Schemas>,
) -> Result<Option<BinlogStart>, SourceError> {
    let done = match run_snapshot(
        cfg,
        flavor,
        over_log,
        &ctx.batches,
        &ctx.progress,
        metrics,
        &ctx.shutdown,
    )
    .await
    {
        Ok(d) => d,
        Err(_) if *ctx.shutdown.borrow() => {
            tracing::info!("shutdown during the snapshot: it starts over on the next run");
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let end = MySqlPosition {
        file: done.start.file.clone(),
        pos: done.start.pos,
        gtid_set: done.start.gtid_set.clone(),
        ..Default::default()
    };
    send(
        &ctx.batches,
        ChangeBatch {
            events: Vec::new(),
            commit: Some(Checkpoint::At(SourcePosition::Mysql(end.clone()))),
            approx_bytes: 0,
            snapshot: Some(SnapshotMark::End),
        },
    )
    .await?;
    tracing::info!(rows = done.rows, file = %end.file, pos = end.pos, "snapshot complete; streaming starts at its binlog position");
    if cfg.snapshot_mode == SnapshotMode::InitialOnly {
        let want = Checkpoint::At(SourcePosition::Mysql(end));
        let reached = tokio::time::timeout(
            Duration::from_secs(60),
            ctx.durable.wait_for(|c| c == Some(&want)),
        )
        .await;
        if !matches!(reached, Ok(Ok(()))) {
            return Err(SourceError::transient(
                "snapshot.mode = initial_only",
                "the snapshot's end is not durable in the log yet",
            ));
        }
        tracing::info!("snapshot.mode = initial_only: snapshot durable, done");
        return Ok(None);
    }
    SchemaHistory::new(cfg.schema_history.clone()).reset(
        &done.start.file,
        done.start.pos,
        &done.schemas,
    )?;
    *schemas = Some(done.schemas);
    Ok(Some(done.start))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mysql::table::{MyColumn, MyTable};

    fn schemas(cols: usize) -> Schemas {
        let mut s = Schemas::default();
        s.insert(MyTable {
            database: "d".into(),
            name: "t".into(),
            columns: (0..cols)
                .map(|i| MyColumn {
                    name: format!("c{i}"),
                    data_type: "int".into(),
                    column_type: "int(11)".into(),
                    charset: None,
                    nullable: true,
                    default: None,
                    generated: false,
                })
                .collect(),
            key: vec![],
        });
        s
    }

    fn cols(s: &Schemas) -> usize {
        s.get("d", "t").unwrap().columns.len()
    }

    #[test]
    fn history_gives_the_state_at_a_position() {
        let dir = std::env::temp_dir().join(format!("cdc-myhist-{}", std::process::id()));
        let h = SchemaHistory::new(dir.join("h.jsonl"));
        assert!(h.at("binlog.000001", 100).is_none());
        h.reset("binlog.000001", 100, &schemas(1)).unwrap();
        h.append("binlog.000001", 500, &schemas(2)).unwrap();
        h.append("binlog.000010", 4, &schemas(3)).unwrap();
        // A line cut short by a crash.
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("h.jsonl"))
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"{\"file\":\"binl"))
            .unwrap();
        assert!(h.at("binlog.000001", 99).is_none());
        assert_eq!(cols(&h.at("binlog.000001", 100).unwrap()), 1);
        assert_eq!(cols(&h.at("binlog.000001", 499).unwrap()), 1);
        assert_eq!(cols(&h.at("binlog.000001", 500).unwrap()), 2);
        // binlog.000009 < binlog.000010 by number.
        assert_eq!(cols(&h.at("binlog.000009", 9_999).unwrap()), 2);
        assert_eq!(cols(&h.at("binlog.000010", 4).unwrap()), 3);
        // Compacted up to a durable 000001:600: its state and what follows stay.
        h.compact(0, "binlog.000001", 600).unwrap();
        assert!(h.at("binlog.000001", 500).is_none());
        assert_eq!(cols(&h.at("binlog.000001", 600).unwrap()), 2);
        assert_eq!(cols(&h.at("binlog.000010", 4).unwrap()), 3);
        let lines = std::fs::read_to_string(dir.join("h.jsonl")).unwrap();
        assert_eq!(lines.lines().count(), 2, "{lines}");
        // A new snapshot starts a new history.
        h.reset("binlog.000011", 4, &schemas(1)).unwrap();
        assert!(h.at("binlog.000010", 4).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
