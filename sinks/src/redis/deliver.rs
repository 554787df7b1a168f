//! Turning changes into `APPLY` script calls, sending them in one pipeline, reading what
//! each refused, and finishing truncates with `SWEEP` (see [`super::script`] for the
//! scripts' arguments).
//!
//! Invariants: a call never splits one of the plan's ranges (so a transaction is applied
//! by one atomic call); the changes of a call are in batch order, and calls run in order
//! on the one connection; rejected indices are into the slice given; a truncate's sweep
//! runs after its marker is set, so a change applied meanwhile with a newer version
//! survives it and an older one is ignored by the marker.

use serde_json::Value;

use super::config::{Mode, ValueKind};
use super::conn::{is_transient_reply, Cmd, Reply};
use super::{RedisSink, CALL_BYTES, CALL_CHANGES};
use crate::change::{Change, Op};
use crate::SinkError;

/// One script call: its arguments after the script's name, and for each change it
/// carries (numbered from 1 in the script), the change's index in the batch.
struct Call {
    body: Cmd,
    changes: Vec<usize>,
}

/// A table's section of a call being built.
struct Section {
    vh: String,
    entries: Cmd,
    changes: Vec<usize>,
}

/// Builds calls from a batch, one at a time (so that the first can be on its way to
/// Redis while the next is built).
struct Builder<'a> {
    cfg: &'a super::config::Resolved,
    flags: String,
    changes: &'a [Change],
    cuts: &'a [usize],
    /// Next cut to take.
    cut: usize,
    /// Start of the next range.
    start: usize,
    key: String,
    json: Vec<u8>,
    field: Vec<u8>,
    vh: String,
}

/// The versions hash of a change's table.
pub fn versions_key(prefix: &str, c: &Change) -> String {
    format!("{prefix}:__cdc:v:{}.{}", c.schema, c.table)
}

/// A column's value in a hash field: strings as they are, anything else as JSON.
fn field_text(v: &Value, out: &mut Vec<u8>) {
    out.clear();
    match v {
        Value::String(s) => out.extend_from_slice(s.as_bytes()),
        other => {
            let _ = serde_json::to_writer(&mut *out, other);
        }
    }
}

impl<'a> Builder<'a> {
    fn new(cfg: &'a super::config::Resolved, changes: &'a [Change], cuts: &'a [usize]) -> Self {
        let v = match cfg.value {
            ValueKind::Json => 'j',
            ValueKind::Hash => 'h',
        };
        let m = match cfg.mode {
            Mode::Upsert => 'u',
            Mode::Invalidate => 'i',
        };
        Builder {
            cfg,
            flags: format!("{v}{m}"),
            changes,
            cuts,
            cut: 0,
            start: 0,
            key: String::new(),
            json: Vec::new(),
            field: Vec::new(),
            vh: String::new(),
        }
    }

    /// The next call, `None` when the batch is all in calls. A call ends at a cut, once
    /// it holds [`CALL_CHANGES`] changes or [`CALL_BYTES`] bytes.
    fn next_call(&mut self) -> Option<Call> {
        let mut sections: Vec<Section> = Vec::new();
        let mut n = 0;
        let mut bytes = 0;
        while self.cut < self.cuts.len() && n < CALL_CHANGES && bytes < CALL_BYTES {
            let end = self.cuts[self.cut];
            self.cut += 1;
            for i in self.start..end {
                let c = &self.changes[i];
                if c.op == Op::TxEnd {
                    continue;
                }
                self.vh.clear();
                self.vh.push_str(&self.cfg.prefix);
                self.vh.push_str(":__cdc:v:");
                self.vh.push_str(&c.schema);
                self.vh.push('.');
                self.vh.push_str(&c.table);
                let si = match sections.iter().position(|s| s.vh == self.vh) {
                    Some(si) => si,
                    None => {
                        sections.push(Section {
                            vh: self.vh.clone(),
                            entries: Cmd::default(),
                            changes: Vec::new(),
                        });
                        sections.len() - 1
                    }
                };
                let sec = &mut sections[si];
                sec.changes.push(i);
                n += 1;
                let before = sec.entries.len();
                self.entry(c, si, &mut sections);
                bytes += sections[si].entries.len() - before;
            }
            self.start = end;
        }
        if n == 0 {
            return None;
        }
        let mut body = Cmd::default();
        body.arg(self.flags.as_bytes())
            .arg_u64(self.cfg.ttl_ms.unwrap_or(0));
        let mut changes = Vec::with_capacity(n);
        for s in sections {
            body.arg(s.vh.as_bytes()).arg_u64(s.changes.len() as u64);
            body.append(&s.entries);
            changes.extend(s.changes);
        }
        Some(Call { body, changes })
    }

    /// Appends `c`'s arguments to section `si`.
    fn entry(&mut self, c: &Change, si: usize, sections: &mut [Section]) {
        let e = &mut sections[si].entries;
        let mut version = String::with_capacity(21);
        match (c.op, &c.after) {
            (Op::Truncate, _) => {
                version.push('t');
                version.push_str(&c.version().to_string());
                e.arg(version.as_bytes());
            }
            (op, Some(after)) if op.upserts() && self.cfg.mode == Mode::Upsert => {
                self.cfg.template.render(c, &mut self.key);
                e.arg_u64(c.version()).arg(self.key.as_bytes());
                match self.cfg.value {
                    ValueKind::Json => {
                        self.json.clear();
                        let _ = serde_json::to_writer(&mut self.json, after);
                        e.arg(&self.json);
                    }
                    ValueKind::Hash => {
                        let n = after.values().filter(|v| !v.is_null()).count();
                        e.arg_u64(n as u64);
                        for (k, v) in after.iter().filter(|(_, v)| !v.is_null()) {
                            field_text(v, &mut self.field);
                            e.arg(k.as_bytes()).arg(&self.field);
                        }
                    }
                }
            }
            _ => {
                // A delete, or any change of an invalidating sink.
                self.cfg.template.render(c, &mut self.key);
                version.push('d');
                version.push_str(&c.version().to_string());
                e.arg(version.as_bytes()).arg(self.key.as_bytes());
            }
        }
    }
}

impl RedisSink {
    /// Applies `changes` (a prefix of the batch that the plan allows), keeping `cuts`;
    /// returns the refused changes.
    pub(super) async fn apply(
        &mut self,
        changes: &[Change],
        cuts: &[usize],
    ) -> Result<Vec<(usize, String)>, SinkError> {
        let mut truncates: Vec<(String, u64)> = Vec::new();
        for c in changes.iter().filter(|c| c.op == Op::Truncate) {
            let vh = versions_key(&self.cfg.prefix, c);
            match truncates.iter_mut().find(|(k, _)| *k == vh) {
                Some((_, v)) => *v = (*v).max(c.version()),
                None => truncates.push((vh, c.version())),
            }
        }
        let addr = self.cfg.address.clone();
        let io = |e: super::conn::ConnError| e.into_sink_error(&addr);
        self.connected().await?;
        // Taken out while in use: dropped (not put back) if anything fails on it.
        let mut c = self.conn.take().expect("connected");
        // Each call is sent as soon as it is built, so Redis runs one while the next is
        // built; the replies are read after the last.
        let mut builder = Builder::new(&self.cfg, changes, cuts);
        let mut calls = Vec::new();
        while let Some(call) = builder.next_call() {
            c.conn
                .send(&evalsha(&c.apply_sha, &call.body))
                .await
                .map_err(io)?;
            calls.push(call);
        }
        let mut todo: Vec<usize> = (0..calls.len()).collect();
        let mut rejected = Vec::new();
        let mut reloads = 0;
        loop {
            let mut again = Vec::new();
            for &i in &todo {
                let reply = c.conn.recv().await.map_err(io)?;
                self.metrics.calls.inc();
                match reply {
                    Reply::Array(Some(items)) => {
                        if let Some(Reply::Int(n)) = items.get(1) {
                            self.metrics.stale.add(*n as u64);
                        }
                        for pair in items.get(2..).unwrap_or(&[]).chunks(2) {
                            if let [Reply::Int(n), err] = pair {
                                let idx = calls[i].changes[(*n as usize).saturating_sub(1)];
                                let why = err
                                    .as_bytes()
                                    .map(|b| String::from_utf8_lossy(b).into_owned())
                                    .unwrap_or_else(|| format!("{err:?}"));
                                rejected.push((idx, format!("Redis refused the change: {why}")));
                            }
                        }
                    }
                    Reply::Error(e) if e.starts_with("NOSCRIPT") => again.push(i),
                    Reply::Error(e) if is_transient_reply(&e) => {
                        return Err(SinkError::transient("applying changes in Redis", e));
                    }
                    other => {
                        return Err(SinkError::definite(
                            "applying changes in Redis",
                            format!("unexpected reply to the sink's script: {other:?}"),
                            "check that the server is Redis ≥ 6.2 or Valkey with Lua scripting; report this if it is",
                        ));
                    }
                }
            }
            if again.is_empty() {
                break;
            }
            // The script cache was flushed (SCRIPT FLUSH, a restart between calls): load
            // the scripts again and resend what Redis did not know.
            reloads += 1;
            if reloads > 3 {
                return Err(SinkError::transient(
                    "applying changes in Redis",
                    "the server keeps forgetting the sink's scripts (NOSCRIPT)",
                ));
            }
            let (a, s) = super::load_scripts(&mut c.conn, &addr).await?;
            c.apply_sha = a;
            c.sweep_sha = s;
            tracing::info!(sink = %self.name, "sink: Redis lost the scripts (NOSCRIPT); reloaded them");
            for &i in &again {
                c.conn
                    .send(&evalsha(&c.apply_sha, &calls[i].body))
                    .await
                    .map_err(io)?;
            }
            todo = again;
        }
        self.conn = Some(c);
        for (vh, tv) in truncates {
            self.sweep(&vh, tv).await?;
        }
        rejected.sort_by_key(|(i, _)| *i);
        Ok(rejected)
    }

    /// Deletes the rows of truncated table `vh` older than `tv` (its marker is set).
    async fn sweep(&mut self, vh: &str, tv: u64) -> Result<(), SinkError> {
        let addr = self.cfg.address.clone();
        let mut cursor = b"0".to_vec();
        let mut deleted = 0i64;
        loop {
            let c = self.connected().await?;
            let mut scan = Cmd::new("HSCAN");
            scan.arg(vh.as_bytes())
                .arg(&cursor)
                .arg(b"COUNT")
                .arg_u64(1000);
            let reply = c
                .conn
                .call(scan)
                .await
                .map_err(|e| e.into_sink_error(&addr))?;
            let (next, items) = match reply {
                Reply::Array(Some(mut v)) if v.len() == 2 => {
                    let items = v.pop();
                    let next = v.pop();
                    match (next, items) {
                        (Some(Reply::Bulk(Some(n))), Some(Reply::Array(Some(items)))) => (n, items),
                        _ => return Err(unexpected("HSCAN", "a cursor and fields")),
                    }
                }
                Reply::Error(e) if is_transient_reply(&e) => {
                    return Err(SinkError::transient(
                        "truncating a table's rows in Redis",
                        e,
                    ))
                }
                other => return Err(unexpected("HSCAN", &format!("{other:?}"))),
            };
            let mut sweep = Cmd::new("EVALSHA");
            sweep
                .arg(c.sweep_sha.as_bytes())
                .arg(b"0")
                .arg(vh.as_bytes())
                .arg_u64(tv);
            let mut any = false;
            for pair in items.chunks(2) {
                if let [Reply::Bulk(Some(f)), Reply::Bulk(Some(v))] = pair {
                    let older = std::str::from_utf8(v)
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok())
                        .is_some_and(|v| v < tv);
                    if older && f.as_slice() != b"__truncated" {
                        sweep.arg(f);
                        any = true;
                    }
                }
            }
            if any {
                match c
                    .conn
                    .call(sweep)
                    .await
                    .map_err(|e| e.into_sink_error(&addr))?
                {
                    Reply::Int(n) => deleted += n,
                    Reply::Error(e) if e.starts_with("NOSCRIPT") => {
                        let (a, s) = super::load_scripts(&mut c.conn, &addr).await?;
                        c.apply_sha = a;
                        c.sweep_sha = s;
                        // Scan this chunk again with the scripts back.
                        continue;
                    }
                    Reply::Error(e) if is_transient_reply(&e) => {
                        return Err(SinkError::transient(
                            "truncating a table's rows in Redis",
                            e,
                        ))
                    }
                    other => return Err(unexpected("the sweep script", &format!("{other:?}"))),
                }
            }
            if next == b"0" {
                break;
            }
            cursor = next;
        }
        tracing::info!(sink = %self.name, versions = %vh, deleted, "sink: table truncated in Redis");
        Ok(())
    }
}

fn evalsha(sha: &str, body: &Cmd) -> Cmd {
    let mut cmd = Cmd::new("EVALSHA");
    cmd.arg(sha.as_bytes()).arg(b"0").append(body);
    cmd
}

fn unexpected(what: &str, got: &str) -> SinkError {
    SinkError::definite(
        "truncating a table's rows in Redis",
        format!("unexpected reply to {what}: {got}"),
        "check that the server is Redis ≥ 6.2 or Valkey",
    )
}
