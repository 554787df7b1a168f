//! The Postgres source: what runs when — set-up, the initial snapshot and its hand-off
//! to streaming, the stream of transactions (one batch each, large ones in chunks), the
//! slot monitor — and the [`crate::Source`] the factory builds.
//!
//! Set-up lives in [`super::setup`], the snapshot in [`super::snapshot`], the stream in
//! [`super::stream`], the slot monitor in [`super::metrics`]; this file decides which run
//! when and holds the source's contract with the pipeline together.
//!
//! # Checkpoints
//!
//! After the snapshot the checkpoint is the slot's consistent point (`commit_lsn = lsn =
//! consistent point`). While a *new* snapshot runs over an existing log the checkpoint is
//! [`Checkpoint::SnapshotIncomplete`]: a restart finds no usable position and snapshots
//! again (`r` records may then appear twice in the log). Every snapshot is framed by
//! [`SnapshotMark::Begin`] (the published tables) and [`SnapshotMark::End`] (the
//! consistent point): the pipeline deletes from the log what the snapshot no longer finds.
//! Streaming positions are described in [`super::stream`].
//!
//! # Failures
//!
//! Transient failures (connection lost, server restarting) are returned as
//! [`SourceError::Transient`]; the connector's supervisor then discards everything not yet
//! durable (it reopens the log) and restarts the source from the checkpoint, with backoff.
//! That keeps this loop free of partial-transaction bookkeeping across reconnects.

use std::time::Duration;

use cdc_schemas::{Checkpoint, Lsn, PgPosition, SourcePosition};
use tokio::sync::mpsc;

pub use super::config::PgSourceConfig;
use super::replication::{
    CreateSlotOptions, ReplicationConnection, ReplicationError, SlotSnapshot,
};
use super::setup::{ensure_publication, slot_row};
use super::snapshot::{run_snapshot, SnapshotParams};
use super::stream::stream;
use super::stream_task::durable_lsn;
pub use crate::config::SnapshotMode;
use crate::{ChangeBatch, SnapshotMark, Source, SourceContext, SourceError};

/// The prefix of the connector's heartbeat messages; never emitted as records.
pub const HEARTBEAT_PREFIX: &str = "cdc_heartbeat";

/// Microseconds between 1970-01-01 and 2000-01-01 (Postgres' epoch), in ms.
pub(super) const PG_EPOCH_MS: i64 = 946_684_800_000;

/// The Postgres source.
pub struct PostgresSource {
    cfg: PgSourceConfig,
}

impl PostgresSource {
    pub fn new(cfg: PgSourceConfig) -> Self {
        PostgresSource { cfg }
    }

    /// The database this source captures.
    pub fn database(&self) -> &str {
        &self.cfg.endpoint.dbname
    }
}

impl Source for PostgresSource {
    async fn run(self, ctx: SourceContext) -> Result<(), SourceError> {
        run(self.cfg, ctx).await
    }
}

pub(super) fn definite(
    what: impl Into<String>,
    detail: impl Into<String>,
    fix: impl Into<String>,
) -> SourceError {
    SourceError::definite(what, detail, fix)
}

pub(super) fn sql_err(what: &str, e: tokio_postgres::Error) -> SourceError {
    super::conn::source_error(what, e, "see the server's message")
}

/// The Postgres position of a checkpoint (None for another source's, or an unfinished
/// snapshot).
pub(super) fn pos_of(c: Option<&Checkpoint>) -> Option<PgPosition> {
    c.and_then(Checkpoint::position).and_then(pg_position)
}

pub(super) fn pg_position(p: &SourcePosition) -> Option<PgPosition> {
    match p {
        SourcePosition::Postgres(p) => Some(p.clone()),
        _ => None,
    }
}

/// `Some((acknowledged lsn, confirmed lsn))` when the log went back below what the slot
/// already confirmed: the stored position is behind both the furthest one this process
/// made durable (`acknowledged`) and the slot's `confirmed_flush_lsn`. The changes between
/// were in the log and the server will not send them again. A stored position behind the
/// slot alone is not enough: on a quiet database the slot is confirmed past the last
/// commit (stream_task's idle confirmation), with nothing lost.
pub(super) fn log_went_back(
    acknowledged: Option<&Checkpoint>,
    stored: Option<&PgPosition>,
    confirmed: Option<Lsn>,
) -> Option<(Lsn, Lsn)> {
    let acked = pos_of(acknowledged)?.lsn;
    let at = stored?.lsn;
    let confirmed = confirmed?;
    (acked > at && confirmed > at).then_some((acked, confirmed))
}

async fn run(cfg: PgSourceConfig, mut ctx: SourceContext) -> Result<(), SourceError> {
    let client = cfg
        .endpoint
        .connect()
        .await
        .map_err(|e| SourceError::from(ReplicationError::Connect(e)))?;
    let tables = ensure_publication(&client, &cfg).await?;
    let stored = pos_of(ctx.resume_from.as_ref());
    let slot = slot_row(&client, &cfg.slot).await?;
    if let Some(s) = &slot {
        if s.plugin.as_deref() != Some("pgoutput")
            || s.database.as_deref() != Some(cfg.endpoint.dbname.as_str())
        {
            return Err(definite(
                format!("replication slot {:?}", cfg.slot),
                format!(
                    "it exists but is a {:?} slot of database {:?}; this connector needs a pgoutput slot of {:?}",
                    s.plugin, s.database, cfg.endpoint.dbname
                ),
                "set source.slot to another name, or drop the slot: SELECT pg_drop_replication_slot('<name>')",
            ));
        }
    }
    let lost = slot
        .as_ref()
        .map(|s| s.wal_status.as_deref() == Some("lost"))
        .unwrap_or(false);
    let mode = cfg.snapshot_mode;
    let mut stored = stored;
    if let Some((acked, confirmed)) = log_went_back(
        ctx.acknowledged.as_ref(),
        stored.as_ref(),
        slot.as_ref().and_then(|s| s.confirmed_flush_lsn),
    ) {
        let at = stored.as_ref().map(|p| p.lsn).unwrap_or_default();
        let detail = format!(
            "the log's stored position (lsn {at}) is behind lsn {acked}, which this process had made durable in it, and the slot {:?} has confirmed lsn {confirmed}: the log lost commits it had acknowledged (a Kafka broker that dropped its last writes on a restart, a disk that did not keep a flush), and the server does not send changes before its confirmed position again",
            cfg.slot
        );
        if mode != SnapshotMode::WhenNeeded {
            return Err(definite(
                "the log",
                detail,
                "set snapshot.mode = \"when_needed\" to take a new snapshot (records are then re-read as op r); to prevent it with Kafka as the log, keep acknowledged writes durable (replication.factor >= 3, min.insync.replicas >= 2)",
            ));
        }
        tracing::warn!(%detail, "snapshot.mode = when_needed: taking a new snapshot");
        stored = None;
    }
    let mut repl = ReplicationConnection::connect(&cfg.endpoint).await?;

    if mode == SnapshotMode::InitialOnly && stored.is_some() {
        // Nobody will read the slot again: a slot left behind would retain WAL for ever.
        if slot.is_some() {
            repl.drop_slot(&cfg.slot, true).await?;
            tracing::info!(slot = %cfg.slot, "snapshot.mode = initial_only: dropped the replication slot left by an earlier run");
        }
        tracing::info!("snapshot.mode = initial_only and the snapshot is complete: nothing to do");
        return Ok(());
    }
    let (start, skip_before) = match (&stored, slot.is_some() && !lost) {
        (Some(p), true) => {
            tracing::info!(lsn = %p.lsn, commit_lsn = %p.commit_lsn, "resuming from the stored position");
            (p.lsn, p.lsn)
        }
        (Some(p), false) if mode != SnapshotMode::WhenNeeded => {
            let why = if lost {
                "was invalidated (wal_status = lost): the server removed WAL it still needed"
            } else {
                "does not exist"
            };
            return Err(definite(
                format!("replication slot {:?}", cfg.slot),
                format!("the log's checkpoint is at {} but the slot {why}; changes since then cannot be streamed", p.lsn),
                "set snapshot.mode = \"when_needed\" to take a new snapshot (records are then re-read as op r), or start over with an empty log dir; to prevent it, raise max_slot_wal_keep_size and watch the retained-WAL alarm",
            ));
        }
        (None, exists) if mode == SnapshotMode::Never => {
            if !exists {
                if lost {
                    repl.drop_slot(&cfg.slot, false).await?;
                }
                let created = repl
                    .create_slot(
                        &cfg.slot,
                        &CreateSlotOptions {
                            snapshot: SlotSnapshot::Nothing,
                            ..Default::default()
                        },
                    )
                    .await?;
                tracing::info!(slot = %cfg.slot, consistent_point = %created.consistent_point, "replication slot created (snapshot.mode = never)");
            }
            (Lsn::ZERO, Lsn::ZERO)
        }
        _ => {
            // A (new) snapshot. Over an existing log, the checkpoint is marked "snapshot
            // incomplete" before any snapshot record; the mark tells the pipeline which
            // tables the snapshot reads, so that it deletes the keys the snapshot does not
            // find again.
            let over_log = stored.is_some() || ctx.resume_from.is_some();
            send(
                &ctx.batches,
                ChangeBatch {
                    events: Vec::new(),
                    commit: over_log.then_some(Checkpoint::SnapshotIncomplete),
                    approx_bytes: 0,
                    snapshot: Some(SnapshotMark::Begin {
                        tables: tables.clone(),
                    }),
                },
            )
            .await?;
            if slot.is_some() {
                tracing::warn!(slot = %cfg.slot, "dropping the existing slot: no usable position for it (a snapshot did not complete, or the slot was lost); a new snapshot follows");
                repl.drop_slot(&cfg.slot, true).await?;
            }
            let created = repl
                .create_slot(&cfg.slot, &CreateSlotOptions::default())
                .await?;
            let snapshot_name = created.snapshot_name.clone().ok_or_else(|| {
                definite(
                    "creating the slot",
                    "the server exported no snapshot",
                    "report this as a bug",
                )
            })?;
            tracing::info!(slot = %cfg.slot, consistent_point = %created.consistent_point, tables = tables.len(), "replication slot created; snapshot follows");
            let rows = run_snapshot(
                SnapshotParams {
                    endpoint: cfg.endpoint.clone(),
                    snapshot_name,
                    tables: tables.clone(),
                    connections: cfg.snapshot_connections,
                    chunk_pages: cfg.snapshot_chunk_pages,
                    batch_events: cfg.max_batch_events,
                    consistent_point: created.consistent_point,
                    progress: ctx.progress.clone(),
                },
                ctx.batches.clone(),
            )
            .await?;
            let cp = created.consistent_point;
            send(
                &ctx.batches,
                ChangeBatch {
                    events: Vec::new(),
                    commit: Some(Checkpoint::At(SourcePosition::Postgres(PgPosition {
                        commit_lsn: cp,
                        lsn: cp,
                        tx_id: None,
                        xmin: None,
                    }))),
                    approx_bytes: 0,
                    snapshot: Some(SnapshotMark::End),
                },
            )
            .await?;
            tracing::info!(rows, consistent_point = %cp, "snapshot complete; streaming starts at the consistent point");
            if mode == SnapshotMode::InitialOnly {
                if !wait_durable(&mut ctx, cp).await {
                    // The supervisor retries; the next attempt finds the checkpoint durable
                    // (and drops the slot) or snapshots again.
                    return Err(SourceError::transient(
                        "snapshot.mode = initial_only",
                        "the snapshot's end is not durable in the log yet; the replication slot is kept until it is",
                    ));
                }
                // The snapshot is durable and nothing will stream from this slot: drop it
                // now, or it would retain WAL for as long as it exists.
                repl.drop_slot(&cfg.slot, true).await?;
                tracing::info!(slot = %cfg.slot, "snapshot.mode = initial_only: snapshot durable, replication slot dropped");
                return Ok(());
            }
            (cp, cp)
        }
    };
    stream(cfg, client, repl, start, skip_before, ctx).await
}

pub(super) async fn send(
    tx: &mpsc::Sender<ChangeBatch>,
    b: ChangeBatch,
) -> Result<(), SourceError> {
    tx.send(b)
        .await
        .map_err(|_| SourceError::transient("postgres source", "the pipeline stopped"))
}

/// Waits (bounded) until the pipeline reports `lsn` durable; false if it did not (it went
/// away, or a minute passed).
pub(super) async fn wait_durable(ctx: &mut SourceContext, lsn: Lsn) -> bool {
    let reached = |c: Option<&Checkpoint>| {
        c.and_then(Checkpoint::position)
            .and_then(durable_lsn)
            .is_some_and(|l| l >= lsn)
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(60), ctx.durable.wait_for(reached)).await,
        Ok(Ok(()))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(lsn: u64) -> PgPosition {
        PgPosition {
            commit_lsn: Lsn(lsn),
            lsn: Lsn(lsn),
            tx_id: None,
            xmin: None,
        }
    }

    fn cp(lsn: u64) -> Checkpoint {
        Checkpoint::At(SourcePosition::Postgres(at(lsn)))
    }

    /// Lost only when the stored position is behind both what this process made durable
    /// and what the slot confirmed.
    #[test]
    fn a_log_that_went_back_below_the_slot_is_a_loss() {
        // The broker-restart case: durable 300, confirmed 300, the log back at 200.
        assert_eq!(
            log_went_back(Some(&cp(300)), Some(&at(200)), Some(Lsn(300))),
            Some((Lsn(300), Lsn(300)))
        );
        // Durable 300 but not yet confirmed past 200: the server sends it again.
        assert_eq!(
            log_went_back(Some(&cp(300)), Some(&at(200)), Some(Lsn(200))),
            None
        );
        // The log is where this process left it; the slot was confirmed further while idle.
        assert_eq!(
            log_went_back(Some(&cp(300)), Some(&at(300)), Some(Lsn(900))),
            None
        );
        // First attempt, an unfinished snapshot, no slot, no stored position: nothing to check.
        assert_eq!(log_went_back(None, Some(&at(200)), Some(Lsn(300))), None);
        assert_eq!(
            log_went_back(
                Some(&Checkpoint::SnapshotIncomplete),
                Some(&at(200)),
                Some(Lsn(300))
            ),
            None
        );
        assert_eq!(log_went_back(Some(&cp(300)), Some(&at(200)), None), None);
        assert_eq!(log_went_back(Some(&cp(300)), None, Some(Lsn(300))), None);
    }
}
