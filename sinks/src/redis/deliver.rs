//! Sending a batch to Redis: cut into chunks (never splitting one of the plan's ranges,
//! so a transaction is applied by one MULTI/EXEC), each chunk taken through the steps of
//! [`super::apply`] over the one connection, then truncates finished by a sweep.
//!
//! Invariants: chunks are applied in batch order, one after the other; rejected indices
//! are into the slice given; a chunk whose EXEC found a watched key changed is planned
//! again from fresh reads (bounded); a truncate's sweep runs after its marker is set, and
//! deletes only rows whose version is below the truncate's, so a row changed after the
//! truncate survives it and a change before it is ignored by the marker.

use super::apply::{is_marker, ChunkPlan, Exec};
use super::conn::{is_transient_reply, Cmd, Conn, ConnError, Reply};
use super::{RedisSink, CALL_BYTES, CALL_CHANGES};
use crate::change::{Change, Op};
use crate::SinkError;

/// How often a chunk is planned again after its watched keys changed, before the sink
/// calls it a transient failure (another writer is busy on the same keys).
const MAX_CONFLICTS: usize = 20;

/// The batch indices of each chunk: whole ranges of `cuts`, up to about
/// [`CALL_CHANGES`] changes or [`CALL_BYTES`] bytes of records, END records left out.
fn chunks(changes: &[Change], cuts: &[usize]) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    let mut bytes = 0;
    let mut start = 0;
    for &end in cuts {
        for (i, c) in changes.iter().enumerate().take(end).skip(start) {
            if c.op == Op::TxEnd {
                continue;
            }
            cur.push(i);
            bytes += c.after.as_ref().map_or(0, |a| a.len() * 16)
                + c.after_json.as_ref().map_or(0, |t| t.len())
                + 64;
        }
        start = end;
        if cur.len() >= CALL_CHANGES || bytes >= CALL_BYTES {
            out.push(std::mem::take(&mut cur));
            bytes = 0;
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A reply that is an error in a read step: the server's state (transient) or not.
fn check_replies(replies: &[Reply], what: &str) -> Result<(), SinkError> {
    for r in replies {
        if let Reply::Error(e) = r {
            return Err(reply_error(what, e));
        }
    }
    Ok(())
}

fn reply_error(what: &str, e: &str) -> SinkError {
    if is_transient_reply(e) {
        SinkError::transient(what.to_string(), e.to_string())
    } else {
        SinkError::definite(
            what.to_string(),
            format!("Redis answered: {e}"),
            "check that the server is Redis ≥ 6.2 or Valkey and that the sink's user may run string, hash, keyspace and transaction commands",
        )
    }
}

fn unexpected(what: &str, got: String) -> SinkError {
    SinkError::definite(
        what.to_string(),
        format!("unexpected reply: {got}"),
        "check that the server is Redis ≥ 6.2 or Valkey; report this if it is",
    )
}

impl RedisSink {
    /// Applies `changes` (a prefix of the batch that the plan allows), keeping `cuts`;
    /// returns the refused changes.
    pub(super) async fn apply(
        &mut self,
        changes: &[Change],
        cuts: &[usize],
    ) -> Result<Vec<(usize, String)>, SinkError> {
        let addr = self.cfg.address.clone();
        self.connected().await?;
        // Taken out while in use: dropped (not put back) if anything fails on it, so a
        // half-read pipeline or a pending WATCH never carries over.
        let mut conn = self.conn.take().expect("connected");
        let io = |e: ConnError| e.into_sink_error(&addr);
        let mut rejected = Vec::new();
        let mut truncates: Vec<(String, u64)> = Vec::new();
        const WHAT: &str = "applying changes in Redis";
        for idx in chunks(changes, cuts) {
            let mut plan = ChunkPlan::new(&self.cfg, changes, &idx);
            let mut conflicts = 0;
            loop {
                let r = conn
                    .pipeline(&plan.reads_versions(&self.applied))
                    .await
                    .map_err(io)?;
                check_replies(&r, WHAT)?;
                let more = plan.take_versions(&r).map_err(|e| unexpected(WHAT, e))?;
                if !more.is_empty() {
                    let r = conn.pipeline(&more).await.map_err(io)?;
                    check_replies(&r, WHAT)?;
                    plan.take_more_versions(&r)
                        .map_err(|e| unexpected(WHAT, e))?;
                }
                plan.decide();
                let types = plan.reads_types();
                if !types.is_empty() {
                    let r = conn.pipeline(&types).await.map_err(io)?;
                    check_replies(&r, WHAT)?;
                    let more = plan.take_types(&r).map_err(|e| unexpected(WHAT, e))?;
                    if !more.is_empty() {
                        let r = conn.pipeline(&more).await.map_err(io)?;
                        check_replies(&r, WHAT)?;
                        plan.take_fresh_types(&r).map_err(|e| unexpected(WHAT, e))?;
                    }
                }
                let r = conn.pipeline(&plan.writes()).await.map_err(io)?;
                self.metrics.execs.inc();
                match plan.take_exec(&r) {
                    Exec::Done => {
                        for (vh, a) in plan.applied_after() {
                            match self.applied.get_mut(vh) {
                                Some(x) => *x = a,
                                None => {
                                    self.applied.insert(vh.to_string(), a);
                                }
                            }
                        }
                        break;
                    }
                    Exec::Conflict => {
                        conflicts += 1;
                        self.metrics.conflicts.inc();
                        if conflicts >= MAX_CONFLICTS {
                            return Err(SinkError::transient(
                                WHAT,
                                "another client keeps changing the sink's keys while it applies them",
                            ));
                        }
                        plan.reset_for_retry();
                    }
                    Exec::Failed(e) => return Err(reply_error(WHAT, &e)),
                }
            }
            self.metrics.stale.add(plan.stale);
            rejected.append(&mut plan.rejected);
            for (vh, tv) in plan.truncates() {
                match truncates.iter_mut().find(|(t, _)| *t == vh) {
                    Some((_, v)) => *v = (*v).max(tv),
                    None => truncates.push((vh, tv)),
                }
            }
        }
        for (vh, tv) in truncates {
            self.sweep(&mut conn, &vh, tv).await?;
        }
        self.conn = Some(conn);
        rejected.sort_by_key(|(i, _)| *i);
        Ok(rejected)
    }

    /// Deletes the rows of truncated table `vh` whose version is below `tv` (its marker
    /// is set), with their entries, a chunk of HSCAN at a time, each chunk under WATCH.
    async fn sweep(&mut self, conn: &mut Conn, vh: &str, tv: u64) -> Result<(), SinkError> {
        const WHAT: &str = "deleting a truncated table's rows in Redis";
        let addr = self.cfg.address.clone();
        let io = |e: ConnError| e.into_sink_error(&addr);
        let mut cursor = b"0".to_vec();
        let mut deleted = 0u64;
        let mut conflicts = 0;
        loop {
            let mut watch = Cmd::new("WATCH");
            watch.arg(vh.as_bytes());
            let mut scan = Cmd::new("HSCAN");
            scan.arg(vh.as_bytes())
                .arg(&cursor)
                .arg(b"COUNT")
                .arg_u64(1000);
            let r = conn.pipeline(&[watch, scan]).await.map_err(io)?;
            check_replies(&r, WHAT)?;
            let (next, items) = match r.get(1) {
                Some(Reply::Array(Some(v))) if v.len() == 2 => match (&v[0], &v[1]) {
                    (Reply::Bulk(Some(n)), Reply::Array(Some(items))) => (n.clone(), items),
                    _ => return Err(unexpected(WHAT, format!("{v:?}"))),
                },
                other => return Err(unexpected(WHAT, format!("{other:?}"))),
            };
            let old: Vec<&[u8]> = items
                .chunks(2)
                .filter_map(|p| match p {
                    [Reply::Bulk(Some(f)), Reply::Bulk(Some(v))] if !is_marker(f) => {
                        let v: u64 = std::str::from_utf8(v).ok()?.parse().ok()?;
                        (v < tv).then_some(f.as_slice())
                    }
                    _ => None,
                })
                .collect();
            if old.is_empty() {
                conn.call(Cmd::new("UNWATCH")).await.map_err(io)?;
            } else {
                let mut del = Cmd::new("DEL");
                let mut hdel = Cmd::new("HDEL");
                hdel.arg(vh.as_bytes());
                for f in &old {
                    del.arg(f);
                    hdel.arg(f);
                }
                let r = conn
                    .pipeline(&[Cmd::new("MULTI"), del, hdel, Cmd::new("EXEC")])
                    .await
                    .map_err(io)?;
                match r.last() {
                    Some(Reply::Array(Some(_))) => deleted += old.len() as u64,
                    Some(Reply::Array(None)) => {
                        // The versions hash changed meanwhile: scan this chunk again.
                        conflicts += 1;
                        if conflicts >= MAX_CONFLICTS {
                            return Err(SinkError::transient(
                                WHAT,
                                "another client keeps changing the sink's versions hash",
                            ));
                        }
                        continue;
                    }
                    Some(Reply::Error(e)) => return Err(reply_error(WHAT, e)),
                    other => return Err(unexpected(WHAT, format!("{other:?}"))),
                }
            }
            if next == b"0" {
                break;
            }
            cursor = next;
        }
        tracing::info!(sink = %self.name, versions = %vh, deleted, "sink: truncated table's rows deleted in Redis");
        Ok(())
    }
}
