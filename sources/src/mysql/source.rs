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
//! [`RetentionTask`] watches that risk instead: before each stream opens, and then every
//! `source.binlog_check_interval_ms` against the durable position.
//!
//! # Table schemas and their history
//!
//! A snapshot loads them ([`Schemas::load`]) inside its transaction, so they are the
//! rows' schemas; the stream then follows the binlog's DDL on them. Every state is kept in
//! the schema history ([`SchemaHistory`] over [`SourceContext::history`]: the embedded log
//! in `<log.dir>/history`, whose topic deletes nothing): a snapshot's schemas at the
//! position its `End` mark carries, recorded before its `Begin` batch is sent
//! (`snapshot.mode = never`: the schemas at the start position), then each DDL that changed
//! them at its group's checkpoint, recorded before any batch at or after it is sent
//! ([`super::stream`]). So whenever a checkpoint is durable in the log, the history holds
//! what it takes to restore the schemas valid there; a resume restores them
//! ([`SchemaHistory::restore`]) and applies the current table filter to them
//! ([`Schemas::refilter`]: the include list may have changed between runs).
//!
//! With no history at or before the stored position (a log written before the history
//! existed, a history directory moved away), the stream starts from `information_schema`'s
//! schemas *now*, records them at the stored position, and says so: a DDL between the
//! stored position and the restart is then not seen at its place. Without a store at all
//! (`SourceContext::history` is `None`) every resume is such a start.
//!
//! The history's calls block on an fsync: they run in [`tokio::task::block_in_place`]
//! (the pipeline's runtime is multi-threaded), and only at a start and on DDL.

use std::time::Duration;

use cdc_schemas::{Checkpoint, MySqlPosition, SourcePosition};
use mysql_async::prelude::Queryable;
use tokio::sync::mpsc;

use super::binlog::{connect_err, my_err, BinlogStart, Flavor};
use super::config::MySqlSourceConfig;
use super::history::SchemaHistory;
use super::metrics::MyMetrics;
use super::retention::RetentionTask;
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

/// Where the stream starts after a snapshot (or `never`'s start) as the checkpoint of the
/// snapshot's `End` mark: the position its history record is at.
fn start_position(s: &BinlogStart) -> MySqlPosition {
    MySqlPosition {
        file: s.file.clone(),
        pos: s.pos,
        gtid_set: s.gtid_set.clone(),
        ..Default::default()
    }
}

/// The source's schema history over the pipeline's store (`None` without one: resumes
/// then read `information_schema`, see the module docs).
fn open_history(
    ctx: &SourceContext,
    cfg: &MySqlSourceConfig,
) -> Result<Option<SchemaHistory>, SourceError> {
    let Some(store) = ctx.history.clone() else {
        tracing::warn!("no schema history store: a resume reads table schemas from information_schema as they are then (a DDL made since the stored position is not seen at its place)");
        return Ok(None);
    };
    let h = tokio::task::block_in_place(|| SchemaHistory::open(store, &cfg.filter))?;
    Ok(Some(h))
}

/// Records `schemas` as the state at `position` (a snapshot's or a stream's start) and
/// returns once that is durable; nothing without a store.
fn record_start(
    history: Option<&mut SchemaHistory>,
    position: &MySqlPosition,
    schemas: &Schemas,
) -> Result<(), SourceError> {
    if let Some(h) = history {
        tokio::task::block_in_place(|| h.record_snapshot(position, schemas))?;
    }
    Ok(())
}

/// The schemas valid at the stored position `p`: restored from the history, else (none
/// at or before `p`, or no store) loaded from `information_schema` now.
async fn resume_schemas(
    conn: &mut mysql_async::Conn,
    cfg: &MySqlSourceConfig,
    history: Option<&mut SchemaHistory>,
    p: &MySqlPosition,
) -> Result<Schemas, SourceError> {
    let Some(h) = history else {
        return Schemas::load(conn, &cfg.filter).await.map_err(schema_err);
    };
    if let Some(mut restored) = tokio::task::block_in_place(|| h.restore(p))? {
        let newly = restored.refilter(&cfg.filter);
        if !newly.is_empty() {
            let names: Vec<String> = newly.iter().map(ToString::to_string).collect();
            tracing::warn!(tables = ?names, "the table filter now includes tables it did not when the history was recorded: they are captured from the stored position on, their earlier rows are not in the log (a new snapshot, with an empty log dir, takes them)");
        }
        return Ok(restored);
    }
    tracing::warn!(file = %p.file, pos = p.pos, "no schema history at or before the stored position: table schemas are read from information_schema as they are now (a DDL made since the stored position is not seen at its place)");
    let loaded = Schemas::load(conn, &cfg.filter).await.map_err(schema_err)?;
    record_start(Some(h), p, &loaded)?;
    Ok(loaded)
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
    if mode == SnapshotMode::InitialOnly && stored.is_some() {
        tracing::info!("snapshot.mode = initial_only and the snapshot is complete: nothing to do");
        return Ok(());
    }
    let mut history = open_history(&ctx, &cfg)?;
    let mut start = match &stored {
        Some(p) => {
            tracing::info!(file = %p.file, pos = p.pos, gtid_set = ?p.gtid_set.as_ref().map(|g| g.to_string()), "resuming from the stored position");
            schemas = Some(resume_schemas(&mut conn, &cfg, history.as_mut(), p).await?);
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
            record_start(history.as_mut(), &start_position(&s), &loaded)?;
            schemas = Some(loaded);
            tracing::info!(file = %s.file, pos = s.pos, "snapshot.mode = never: streaming from the server's current position");
            s
        }
        None => {
            let over_log = ctx.resume_from.is_some();
            match snapshot(
                &cfg,
                flavor,
                over_log,
                &mut ctx,
                &metrics,
                &mut history,
                &mut schemas,
            )
            .await?
            {
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
    let retention = RetentionTask::spawn(
        cfg.endpoint.clone(),
        cfg.binlog_check_interval,
        &ctx.metrics,
        ctx.durable.clone(),
        ctx.shutdown.clone(),
    );
    let mut schemas = Some(schemas);
    let result = loop {
        let s = schemas.take().unwrap_or_default();
        // A purged start is found by the retention check before any dump is opened.
        let streamed = match retention.check_start(&start).await {
            Some(purged) => StreamEnd::Purged(purged),
            None => {
                stream(
                    &cfg,
                    flavor,
                    start.clone(),
                    s,
                    &mut ctx,
                    metrics.clone(),
                    history.as_mut(),
                )
                .await
            }
        };
        match streamed {
            StreamEnd::Stopped => break Ok(()),
            StreamEnd::Purged(e) if mode == SnapshotMode::WhenNeeded => {
                tracing::warn!(error = %e, "the stored binlog position is gone from the server; snapshot.mode = when_needed: taking a new snapshot");
                let again = snapshot(
                    &cfg,
                    flavor,
                    true,
                    &mut ctx,
                    &metrics,
                    &mut history,
                    &mut schemas,
                )
                .await?;
                match again {
                    Some(s) => start = s,
                    None => break Ok(()),
                }
            }
            StreamEnd::Purged(e) | StreamEnd::Failed(e) => break Err(e),
        }
    };
    retention.stop().await;
    // Let the pipeline drain what we sent.
    let durable = ctx.drain(result.is_err()).await;
    if let Some(p) = durable.position_with(|p| Some(p.to_string())) {
        tracing::info!(position = %p, "source stopped; durable position");
    }
    result
}

/// Runs a snapshot and sends its `End`; `None`: `initial_only` is done. Its schemas are
/// recorded in `history` at the `End` mark's position before its `Begin` batch is sent.
async fn snapshot(
    cfg: &MySqlSourceConfig,
    flavor: Flavor,
    over_log: bool,
    ctx: &mut SourceContext,
    metrics: &MyMetrics,
    history: &mut Option<SchemaHistory>,
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
        |start, loaded| record_start(history.as_mut(), &start_position(start), loaded),
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
    let end = start_position(&done.start);
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
    *schemas = Some(done.schemas);
    Ok(Some(done.start))
}
