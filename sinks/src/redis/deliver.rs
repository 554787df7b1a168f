//! Sending a batch to Redis: cut into chunks (never splitting one of the plan's ranges,
//! so a transaction is applied by one MULTI/EXEC), each chunk taken through the steps of
//! [`super::apply`] over the one connection, then truncates finished by a sweep.
//!
//! Invariants: chunks are applied in batch order, one after the other (at most one EXEC
//! unanswered, and nothing of a chunk is planned from reads taken before the EXEC of the
//! chunk before it); a chunk left in flight is at the front of the next call's batch,
//! and is reported delivered only once its EXEC is answered; rejected indices
//! are into the slice given; a chunk whose EXEC found a watched key changed is planned
//! again from fresh reads (bounded); a truncate's sweep runs right after the EXEC that set
//! its rows aside, deletes only keys the table's rows set does not hold again (so a row
//! written after the truncate survives it), and a sweep left unfinished is finished on
//! the next connection before anything else is applied.

use super::apply::{rows_key, sweeps_key, truncated_key, ChunkPlan, Exec};
use super::conn::{is_transient_reply, Cmd, Conn, ConnError, Reply};
use super::{RedisSink, CALL_BYTES, CALL_CHANGES};
use crate::change::{Change, Op};
use crate::{Delivered, SinkError};

const WHAT: &str = "applying changes in Redis";

/// How often a chunk is planned again after its watched keys changed, before the sink
/// calls it a transient failure (another writer is busy on the same keys).
const MAX_CONFLICTS: usize = 20;

/// A chunk of the batch: its changes' indices (END records left out) and the range of
/// the batch it covers.
struct Chunk {
    idx: Vec<usize>,
    start: usize,
    end: usize,
}

/// The chunks of `changes[from..]` up to the last cut: whole ranges of `cuts` (absolute
/// ends, ascending), up to about [`CALL_CHANGES`] changes or [`CALL_BYTES`] bytes of
/// records each. A range of only END records at the end is in no chunk.
fn chunks(changes: &[Change], from: usize, cuts: &[usize]) -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    let mut bytes = 0;
    let mut start = from;
    let mut chunk_start = from;
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
            out.push(Chunk {
                idx: std::mem::take(&mut cur),
                start: chunk_start,
                end,
            });
            chunk_start = end;
            bytes = 0;
        }
    }
    if !cur.is_empty() {
        out.push(Chunk {
            idx: cur,
            start: chunk_start,
            end: start,
        });
    }
    out
}

/// A chunk whose EXEC is sent and whose replies are not read yet.
pub(crate) struct Sent {
    plan: ChunkPlan,
    /// Replies its block gets (MULTI's, each QUEUED, EXEC's).
    replies: usize,
    /// Its range of the batch, in the indices of the current call.
    start: usize,
    pub(crate) end: usize,
    /// What to subtract from the batch indices in `plan` (those of the call that planned
    /// it) to get the current call's.
    shift: usize,
}

/// What a call took effect of so far.
#[derive(Default)]
struct Done {
    rejected: Vec<(usize, String)>,
    /// The refused hash's fields of those refusals.
    refused_fields: Vec<String>,
}

impl Done {
    /// A chunk applied: its refusals, in the current call's indices.
    fn take(&mut self, plan: &mut ChunkPlan, shift: usize, metrics: &super::RedisMetrics) {
        metrics.stale.add(plan.stale);
        self.rejected
            .extend(plan.rejected.drain(..).map(|(i, e)| (i - shift, e)));
        self.refused_fields.append(&mut plan.refused_fields);
    }
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
    /// Applies `changes[from..upto]` (what the plan allows of the batch after the chunk in
    /// flight, if any), keeping `cuts` (ascending, the last is `upto`), and reads the
    /// outcome of the chunk in flight.
    ///
    /// Pipelined: each chunk's reads are sent behind the EXEC of the chunk before, and
    /// the last chunk's EXEC is left in flight when the call returns, so that Redis
    /// applies it while the driver prepares the next batch. Its outcome is read by the
    /// next call (which then reports it delivered), or by this one when it has nothing
    /// new to send. A chunk that truncates is applied on its own, in step.
    pub(super) async fn apply(
        &mut self,
        changes: &[Change],
        from: usize,
        upto: usize,
        cuts: &[usize],
    ) -> Result<Delivered, SinkError> {
        let addr = self.cfg.address.clone();
        self.connected().await?;
        // Taken out while in use: dropped (not put back) if anything fails on it, so a
        // half-read pipeline or a pending WATCH never carries over.
        let mut conn = self.conn.take().expect("connected");
        let io = |e: ConnError| e.into_sink_error(&addr);
        if !self.sweeps_checked {
            // A sweep cut short (a crash, a lost connection) ends before anything applies.
            self.finish_sweeps(&mut conn).await?;
            self.sweeps_checked = true;
        }
        let mut done = Done::default();
        for chunk in chunks(changes, from, cuts) {
            let mut plan = ChunkPlan::new(&self.cfg, changes, &chunk.idx);
            // The refusals reported by the last call have durable dead letters now.
            if !self.forget_refused.is_empty() {
                plan.set_forget(std::mem::take(&mut self.forget_refused));
            }
            if plan.truncated_suffixes().next().is_some() {
                self.settle(&mut conn, &mut done).await?;
                // The truncate renames the rows set to the truncated one: that must be free.
                self.finish_sweeps(&mut conn).await?;
                self.apply_now(&mut conn, &mut plan).await?;
                done.take(&mut plan, 0, &self.metrics);
                for suffix in plan.truncates() {
                    self.sweep(&mut conn, &suffix).await?;
                }
                continue;
            }
            let reads = plan.reads();
            conn.send_all(&reads).await.map_err(io)?;
            if let Some(mut prev) = self.in_flight.take() {
                let r = conn.recv_n(prev.replies).await.map_err(io)?;
                match prev.plan.take_exec(&r) {
                    Exec::Done => done.take(&mut prev.plan, prev.shift, &self.metrics),
                    Exec::Conflict => {
                        // Another writer moved an offset: this chunk's reads were taken
                        // after nothing of the one before applied. Both again, in step.
                        self.metrics.conflicts.inc();
                        conn.recv_n(reads.len()).await.map_err(io)?;
                        prev.plan.reset_for_retry();
                        self.apply_now(&mut conn, &mut prev.plan).await?;
                        done.take(&mut prev.plan, prev.shift, &self.metrics);
                        self.apply_now(&mut conn, &mut plan).await?;
                        done.take(&mut plan, 0, &self.metrics);
                        continue;
                    }
                    Exec::Failed(e) => return Err(reply_error(WHAT, &e)),
                }
            }
            let r = conn.recv_n(reads.len()).await.map_err(io)?;
            let writes = self.plan_writes(&mut conn, &mut plan, &r).await?;
            conn.send_all(&writes).await.map_err(io)?;
            self.metrics.execs.inc();
            self.in_flight = Some(Sent {
                plan,
                replies: writes.len(),
                start: chunk.start,
                end: chunk.end,
                shift: 0,
            });
        }
        let in_flight_now = self.in_flight.as_ref().is_some_and(|s| s.start >= from);
        if !in_flight_now {
            // Nothing new went out behind it: read how the chunk in flight went.
            self.settle(&mut conn, &mut done).await?;
        }
        self.conn = Some(conn);
        self.forget_refused.append(&mut done.refused_fields);
        let mut d = Delivered {
            rejected: done.rejected,
            ..Delivered::default()
        };
        d.rejected.sort_by_key(|(i, _)| *i);
        match &mut self.in_flight {
            Some(s) => {
                d.upto = s.start;
                d.in_flight = s.end - s.start;
                // In the next call's indices: the delivered prefix is gone from its batch.
                s.shift += d.upto;
                s.start -= d.upto;
                s.end -= d.upto;
            }
            None => d.upto = upto,
        }
        Ok(d)
    }

    /// Reads the outcome of the chunk in flight, if any (applying it again, in step, if
    /// another writer moved an offset meanwhile).
    async fn settle(&mut self, conn: &mut Conn, done: &mut Done) -> Result<(), SinkError> {
        let Some(mut prev) = self.in_flight.take() else {
            return Ok(());
        };
        let addr = self.cfg.address.clone();
        let r = conn
            .recv_n(prev.replies)
            .await
            .map_err(|e| e.into_sink_error(&addr))?;
        match prev.plan.take_exec(&r) {
            Exec::Done => {}
            Exec::Conflict => {
                self.metrics.conflicts.inc();
                prev.plan.reset_for_retry();
                self.apply_now(conn, &mut prev.plan).await?;
            }
            Exec::Failed(e) => return Err(reply_error(WHAT, &e)),
        }
        done.take(&mut prev.plan, prev.shift, &self.metrics);
        Ok(())
    }

    /// Steps 1 to 4 of a chunk, waiting for each: planned again while its EXEC finds an
    /// offset moved by another writer (bounded).
    async fn apply_now(&mut self, conn: &mut Conn, plan: &mut ChunkPlan) -> Result<(), SinkError> {
        let addr = self.cfg.address.clone();
        let io = |e: ConnError| e.into_sink_error(&addr);
        let mut conflicts = 0;
        loop {
            let r = conn.pipeline(&plan.reads()).await.map_err(io)?;
            let writes = self.plan_writes(conn, plan, &r).await?;
            let r = conn.pipeline(&writes).await.map_err(io)?;
            self.metrics.execs.inc();
            match plan.take_exec(&r) {
                Exec::Done => return Ok(()),
                Exec::Conflict => {
                    conflicts += 1;
                    self.metrics.conflicts.inc();
                    if conflicts >= MAX_CONFLICTS {
                        return Err(SinkError::transient(
                            WHAT,
                            "another client keeps changing the sink's offsets while it applies changes",
                        ));
                    }
                    plan.reset_for_retry();
                }
                Exec::Failed(e) => return Err(reply_error(WHAT, &e)),
            }
        }
    }

    /// Steps 1 (its replies, `reads`) to 3 of a chunk; returns step 4's block.
    async fn plan_writes(
        &mut self,
        conn: &mut Conn,
        plan: &mut ChunkPlan,
        reads: &[Reply],
    ) -> Result<Vec<Cmd>, SinkError> {
        let addr = self.cfg.address.clone();
        let io = |e: ConnError| e.into_sink_error(&addr);
        check_replies(reads, WHAT)?;
        plan.take_reads(reads).map_err(|e| unexpected(WHAT, e))?;
        if let Some(ask) = plan.reads_refused() {
            let r = conn.pipeline(&[ask]).await.map_err(io)?;
            check_replies(&r, WHAT)?;
            plan.take_refused(&r[0]).map_err(|e| unexpected(WHAT, e))?;
        }
        let exists = plan.reads_types();
        if !exists.is_empty() {
            let r = conn.pipeline(&exists).await.map_err(io)?;
            check_replies(&r, WHAT)?;
            let types = plan.take_types(&r).map_err(|e| unexpected(WHAT, e))?;
            if !types.is_empty() {
                let r = conn.pipeline(&types).await.map_err(io)?;
                check_replies(&r, WHAT)?;
                plan.take_fresh_types(&r).map_err(|e| unexpected(WHAT, e))?;
            }
        }
        Ok(plan.writes())
    }

    /// Finishes every sweep the sweeps list names.
    async fn finish_sweeps(&mut self, conn: &mut Conn) -> Result<(), SinkError> {
        let addr = self.cfg.address.clone();
        let mut members = Cmd::new("SMEMBERS");
        members.arg(sweeps_key(&self.cfg.prefix).as_bytes());
        let r = conn
            .call(members)
            .await
            .map_err(|e| e.into_sink_error(&addr))?;
        let suffixes: Vec<String> = match r {
            Reply::Array(Some(v)) => v
                .iter()
                .filter_map(|m| m.as_bytes())
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect(),
            Reply::Error(e) => return Err(reply_error("reading the sink's pending sweeps", &e)),
            other => {
                return Err(unexpected(
                    "reading the sink's pending sweeps",
                    format!("{other:?}"),
                ))
            }
        };
        for suffix in suffixes {
            tracing::info!(sink = %self.name, table = %suffix, "sink: finishing a truncate's sweep cut short");
            self.sweep(conn, &suffix).await?;
        }
        Ok(())
    }

    /// Deletes the rows of a truncated table (the keys of its truncated rows set that its
    /// rows set does not hold again), a thousand at a time, each step one MULTI/EXEC under
    /// WATCH of the rows set; then forgets the sweep.
    async fn sweep(&mut self, conn: &mut Conn, suffix: &str) -> Result<(), SinkError> {
        const WHAT: &str = "deleting a truncated table's rows in Redis";
        let addr = self.cfg.address.clone();
        let io = |e: ConnError| e.into_sink_error(&addr);
        let rows = rows_key(&self.cfg.prefix, suffix);
        let truncated = truncated_key(&self.cfg.prefix, suffix);
        let mut deleted = 0u64;
        let mut conflicts = 0;
        loop {
            let mut watch = Cmd::new("WATCH");
            watch.arg(rows.as_bytes());
            let mut pick = Cmd::new("SRANDMEMBER");
            pick.arg(truncated.as_bytes()).arg_u64(1000);
            let r = conn.pipeline(&[watch, pick]).await.map_err(io)?;
            check_replies(&r, WHAT)?;
            let keys: Vec<Vec<u8>> = match r.get(1) {
                Some(Reply::Array(Some(v))) => v
                    .iter()
                    .filter_map(|m| m.as_bytes().map(<[u8]>::to_vec))
                    .collect(),
                other => return Err(unexpected(WHAT, format!("{other:?}"))),
            };
            if keys.is_empty() {
                conn.call(Cmd::new("UNWATCH")).await.map_err(io)?;
                break;
            }
            let mut ask = Cmd::new("SMISMEMBER");
            ask.arg(rows.as_bytes());
            for k in &keys {
                ask.arg(k);
            }
            let flags = match conn.call(ask).await.map_err(io)? {
                Reply::Array(Some(f)) if f.len() == keys.len() => f,
                other => return Err(unexpected(WHAT, format!("{other:?}"))),
            };
            let mut del = Cmd::new("DEL");
            let mut srem = Cmd::new("SREM");
            srem.arg(truncated.as_bytes());
            for (k, f) in keys.iter().zip(&flags) {
                // A key the rows set holds again was written after the truncate: it stays.
                if !matches!(f, Reply::Int(1)) {
                    del.arg(k);
                }
                srem.arg(k);
            }
            let gone = del.args() - 1;
            let mut block = vec![Cmd::new("MULTI")];
            if gone > 0 {
                block.push(del);
            }
            block.push(srem);
            block.push(Cmd::new("EXEC"));
            let r = conn.pipeline(&block).await.map_err(io)?;
            match r.last() {
                Some(Reply::Array(Some(results))) => {
                    if let Some(Reply::Error(e)) =
                        results.iter().find(|r| matches!(r, Reply::Error(_)))
                    {
                        return Err(reply_error(WHAT, e));
                    }
                    deleted += gone as u64;
                }
                Some(Reply::Array(None)) => {
                    // The rows set changed meanwhile (another writer): ask again.
                    conflicts += 1;
                    if conflicts >= MAX_CONFLICTS {
                        return Err(SinkError::transient(
                            WHAT,
                            "another client keeps changing the sink's rows set",
                        ));
                    }
                }
                Some(Reply::Error(e)) => return Err(reply_error(WHAT, e)),
                other => return Err(unexpected(WHAT, format!("{other:?}"))),
            }
        }
        let mut forget = Cmd::new("SREM");
        forget
            .arg(sweeps_key(&self.cfg.prefix).as_bytes())
            .arg(suffix.as_bytes());
        if let Reply::Error(e) = conn.call(forget).await.map_err(io)? {
            return Err(reply_error(WHAT, &e));
        }
        tracing::info!(sink = %self.name, table = %suffix, deleted, "sink: truncated table's rows deleted in Redis");
        Ok(())
    }
}
