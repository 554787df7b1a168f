//! Turning changes into `APPLY` script calls, sending them in one pipeline, reading what
//! each refused, and finishing truncates with `SWEEP` (see [`super::script`] for the
//! scripts' arguments).
//!
//! Invariants: a call never splits one of the plan's ranges (so a transaction is applied
//! by one atomic call); the changes of a call are in batch order, and calls run in order
//! on the one connection; rejected indices are into the slice given; a truncate's sweep
//! runs after its marker is set, so a change applied meanwhile with a newer version
//! survives it and an older one is ignored by the marker.

use std::collections::HashMap;

use serde_json::Value;

use super::config::{Mode, ValueKind};
use super::conn::{is_transient_reply, Cmd, Reply};
use super::{RedisSink, CALL_BYTES, CALL_CHANGES};
use crate::change::{Change, Op};
use crate::SinkError;

/// One script call being built.
struct Call {
    /// Versions-hash names, in their 1-based index order.
    tables: Vec<String>,
    table_index: HashMap<String, usize>,
    entries: Cmd,
    /// For each change of the call, its index in the batch.
    changes: Vec<usize>,
}

impl Call {
    fn new() -> Call {
        Call {
            tables: Vec::new(),
            table_index: HashMap::new(),
            entries: Cmd::default(),
            changes: Vec::new(),
        }
    }

    fn table(&mut self, vh: &str) -> usize {
        if let Some(&i) = self.table_index.get(vh) {
            return i;
        }
        self.tables.push(vh.to_string());
        let i = self.tables.len();
        self.table_index.insert(vh.to_string(), i);
        i
    }
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

impl RedisSink {
    /// Applies `changes` (a prefix of the batch that the plan allows), keeping `cuts`;
    /// returns the refused changes.
    pub(super) async fn apply(
        &mut self,
        changes: &[Change],
        cuts: &[usize],
    ) -> Result<Vec<(usize, String)>, SinkError> {
        let calls = self.build_calls(changes, cuts);
        let mut truncates: Vec<(String, u64)> = Vec::new();
        for c in changes.iter().filter(|c| c.op == Op::Truncate) {
            let vh = versions_key(&self.cfg.prefix, c);
            match truncates.iter_mut().find(|(k, _)| *k == vh) {
                Some((_, v)) => *v = (*v).max(c.version()),
                None => truncates.push((vh, c.version())),
            }
        }
        let mut rejected = Vec::new();
        let mut todo: Vec<usize> = (0..calls.len()).collect();
        let mut reloads = 0;
        while !todo.is_empty() {
            let addr = self.cfg.address.clone();
            let flags = self.flags();
            let ttl = self.cfg.ttl_ms.unwrap_or(0);
            let c = self.connected().await?;
            let cmds: Vec<Cmd> = todo
                .iter()
                .map(|&i| {
                    let call = &calls[i];
                    let mut cmd = Cmd::new("EVALSHA");
                    cmd.arg(c.apply_sha.as_bytes())
                        .arg(b"0")
                        .arg(flags.as_bytes());
                    cmd.arg_u64(ttl).arg_u64(call.tables.len() as u64);
                    for t in &call.tables {
                        cmd.arg(t.as_bytes());
                    }
                    cmd.append(&call.entries);
                    cmd
                })
                .collect();
            let replies = c
                .conn
                .pipeline(&cmds)
                .await
                .map_err(|e| e.into_sink_error(&addr))?;
            self.metrics.calls.add(cmds.len() as u64);
            let mut again = Vec::new();
            for (&i, reply) in todo.iter().zip(replies) {
                match reply {
                    Reply::Array(Some(items)) => {
                        let stale = match items.get(1) {
                            Some(Reply::Int(n)) => *n as u64,
                            _ => 0,
                        };
                        self.metrics.stale.add(stale);
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
            if !again.is_empty() {
                // The script cache was flushed (SCRIPT FLUSH, a restart between calls).
                reloads += 1;
                if reloads > 3 {
                    return Err(SinkError::transient(
                        "applying changes in Redis",
                        "the server keeps forgetting the sink's scripts (NOSCRIPT)",
                    ));
                }
                let c = self.conn.as_mut().expect("connected");
                let (a, s) = super::load_scripts(&mut c.conn, &addr).await?;
                c.apply_sha = a;
                c.sweep_sha = s;
                tracing::info!(sink = %self.name, "sink: Redis lost the scripts (NOSCRIPT); reloaded them");
            }
            todo = again;
        }
        for (vh, tv) in truncates {
            self.sweep(&vh, tv).await?;
        }
        rejected.sort_by_key(|(i, _)| *i);
        Ok(rejected)
    }

    fn flags(&self) -> String {
        let v = match self.cfg.value {
            ValueKind::Json => 'j',
            ValueKind::Hash => 'h',
        };
        let m = match self.cfg.mode {
            Mode::Upsert => 'u',
            Mode::Invalidate => 'i',
        };
        format!("{v}{m}")
    }

    fn build_calls(&self, changes: &[Change], cuts: &[usize]) -> Vec<Call> {
        let mut calls = Vec::new();
        let mut call = Call::new();
        let mut key = String::new();
        let mut json = Vec::new();
        let mut field = Vec::new();
        let mut start = 0;
        for &end in cuts {
            for (i, c) in changes.iter().enumerate().take(end).skip(start) {
                if c.op == Op::TxEnd {
                    continue;
                }
                let vh = versions_key(&self.cfg.prefix, c);
                let t = call.table(&vh);
                call.changes.push(i);
                let e = &mut call.entries;
                e.arg_u64(t as u64);
                match (c.op, &c.after) {
                    (Op::Truncate, _) => {
                        e.arg(b"t").arg_u64(c.version()).arg(b"");
                    }
                    (op, Some(after)) if op.upserts() && self.cfg.mode == Mode::Upsert => {
                        self.cfg.template.render(c, &mut key);
                        e.arg(b"u").arg_u64(c.version()).arg(key.as_bytes());
                        match self.cfg.value {
                            ValueKind::Json => {
                                json.clear();
                                let _ = serde_json::to_writer(&mut json, after);
                                e.arg(&json);
                            }
                            ValueKind::Hash => {
                                let n = after.values().filter(|v| !v.is_null()).count();
                                e.arg_u64(n as u64);
                                for (k, v) in after.iter().filter(|(_, v)| !v.is_null()) {
                                    field_text(v, &mut field);
                                    e.arg(k.as_bytes()).arg(&field);
                                }
                            }
                        }
                    }
                    _ => {
                        // A delete, or any change of an invalidating sink.
                        self.cfg.template.render(c, &mut key);
                        e.arg(b"d").arg_u64(c.version()).arg(key.as_bytes());
                    }
                }
            }
            start = end;
            if call.changes.len() >= CALL_CHANGES || call.entries.len() >= CALL_BYTES {
                calls.push(std::mem::replace(&mut call, Call::new()));
            }
        }
        if !call.changes.is_empty() {
            calls.push(call);
        }
        calls
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

fn unexpected(what: &str, got: &str) -> SinkError {
    SinkError::definite(
        "truncating a table's rows in Redis",
        format!("unexpected reply to {what}: {got}"),
        "check that the server is Redis ≥ 6.2 or Valkey",
    )
}
