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
//! # Table schemas
//!
//! A snapshot loads them ([`Schemas::load`]) inside its transaction, so they are the
//! rows' schemas; the stream then follows the binlog's DDL on them. A stream resumed from
//! a stored position loads them from `information_schema` when it starts: they are the
//! tables' schemas *now*, so a DDL between the stored position and the restart is not
//! seen in order (storing the schema state with the checkpoint, a schema history, is the
//! step that closes this).

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
    let mut start = match &stored {
        Some(p) => {
            tracing::info!(file = %p.file, pos = p.pos, gtid_set = ?p.gtid_set.as_ref().map(|g| g.to_string()), "resuming from the stored position");
            BinlogStart {
                file: p.file.clone(),
                pos: p.pos,
                gtid_set: p.gtid_set.clone(),
            }
        }
        None if mode == SnapshotMode::Never => {
            let s = current_position(&mut conn, flavor).await?;
            schemas = Some(
                Schemas::load(&mut conn, &cfg.filter)
                    .await
                    .map_err(schema_err)?,
            );
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
    let done = run_snapshot(cfg, flavor, over_log, &ctx.batches, &ctx.progress, metrics).await?;
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
    *schemas = Some(done.schemas);
    Ok(Some(done.start))
}
