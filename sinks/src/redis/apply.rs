//! How a chunk of changes is applied: what is read from Redis first (under WATCH), which
//! change wins per key, and the MULTI/EXEC block that applies the winners and their
//! versions together. Pure: commands out, replies in; the I/O is in [`super::deliver`].
//!
//! # The versions hash
//!
//! Per table and partition of its topic, `<prefix>:__cdc:v:<schema>.<table>` (partition
//! 0; `…#<p>` for partition `p`, see [`push_versions_key`]) maps each row's Redis key (the
//! field) to the version ([`Change::version`]) of the last change applied to it. A delete keeps
//! its entry (a tombstone), so a replayed older insert cannot bring the row back. Field
//! `__truncated` holds the version of the table's latest truncate: every change at or
//! below it is ignored. A change is applied only when its version is above both.
//! Field `__applied` holds the highest version of any change of the table (in that
//! partition) the sink has taken: every field's version is at or below it.
//!
//! # One chunk, exactly once
//!
//! 1. `WATCH` the chunk's versions hashes, read their markers (`HMGET` of `__truncated`
//!    and `__applied`, `HLEN`) and the versions of the chunk's keys (`HMGET`). When all of
//!    a table's changes in the chunk are above the `__applied` the sink last wrote (the
//!    steady state: the log is read forward), the keys' versions are not read: they are
//!    all below. If the marker read says otherwise (another writer, a replay), they are
//!    read then, still under the WATCH.
//! 2. Per key, the winner is the newest change above the key's version and the table's
//!    truncate (this chunk's truncates included); the others are stale (a replay) or
//!    superseded within the chunk (the chunk is applied atomically, so they could never
//!    be seen).
//! 3. Where the winner must not clobber a key of another type: ask `TYPE` (hash rows and
//!    deletes), or `EXISTS` in bulk (new JSON rows; `TYPE` each only when some exist).
//!    A table whose keys' versions were not read (step 1) takes its inserts for the new
//!    rows (EXISTS as above); its other JSON rows are written with `SET … GET` and its
//!    deletes are `GETDEL`, both of which refuse a key of another type by themselves
//!    (JSON values only; a hash-valued sink reads the versions).
//!    These keys are not watched (watching thousands of keys costs Redis quadratic time):
//!    another client creating one of the sink's keys in the instant between this read and
//!    the EXEC is not guarded against. A key holding a type the sink does not write is refused
//!    (`WRONGTYPE`, the change goes to the dead-letter topic) and left alone.
//! 4. `MULTI`, the effects (`MSET` of new JSON rows, `SET … GET` of known ones — which
//!    refuses another type —, `DEL`+`HSET` of hash rows, `DEL`, `PEXPIRE`), the versions
//!    (`HSET` of the hash, per table), the markers, `EXEC`. If anything watched changed
//!    meanwhile (a versions hash), EXEC does nothing and the chunk is tried again from 1; so the check and
//!    the write are one atomic step, and effect and version never disagree.
//!
//! Why not a Lua script: measured on Redis 7, a script doing the same work spends ~2.7 µs
//! per change converting arguments between Redis and Lua, against ~0.8 µs for these
//! plain commands (`redis-cli --pipe` of SETs: ~1 µs per SET all told).

use std::collections::HashMap;

use serde_json::Value;

use super::config::{Mode, Resolved, ValueKind};
use super::conn::{Cmd, Reply};
use crate::change::{Change, Op};

/// Field of the versions hash holding the table's truncate version.
pub const TRUNCATED: &str = "__truncated";

/// Field of the versions hash holding the highest version taken for the table (every
/// field's version is at or below it).
pub const APPLIED: &str = "__applied";

/// Whether a versions hash's field is one of its markers, not a row's key.
pub fn is_marker(field: &[u8]) -> bool {
    field == TRUNCATED.as_bytes() || field == APPLIED.as_bytes()
}

/// Keys per HMGET / EXISTS / MSET / HSET command.
const CHUNK: usize = 1000;

/// The versions hash of a change's table and partition ([`push_versions_key`]).
pub fn versions_key(prefix: &str, c: &Change) -> String {
    let mut out = String::new();
    push_versions_key(&mut out, prefix, &c.schema, &c.table, c.partition);
    out
}

/// Appends the name of the versions hash of `schema.table`'s rows in `partition` of its
/// topic: `<prefix>:__cdc:v:<schema>.<table>` for partition 0 (the only one by default),
/// `…#<partition>` for the others. One hash per partition because versions are offsets,
/// comparable within a partition only: a key's changes are all in one partition, and a
/// truncate is written to every partition, so each partition's hash, marker and sweep are
/// exact on their own.
pub fn push_versions_key(
    out: &mut String,
    prefix: &str,
    schema: &str,
    table: &str,
    partition: u32,
) {
    use std::fmt::Write;
    out.push_str(prefix);
    out.push_str(":__cdc:v:");
    out.push_str(schema);
    out.push('.');
    out.push_str(table);
    if partition > 0 {
        let _ = write!(out, "#{partition}");
    }
}

/// A column's value in a hash field: strings as they are, anything else as JSON.
pub(crate) fn field_text(v: &Value) -> Vec<u8> {
    match v {
        Value::String(s) => s.as_bytes().to_vec(),
        other => serde_json::to_vec(other).unwrap_or_default(),
    }
}

enum What {
    /// The row's JSON text (shared with the change, not copied).
    Json(bytes::Bytes),
    Hash(Vec<(String, Vec<u8>)>),
    Delete,
    Truncate,
}

struct Item {
    /// Index in the batch.
    change: usize,
    table: usize,
    /// Index into the table's keys (unused for a truncate).
    key: usize,
    version: u64,
    what: What,
    /// The change is an insert (`c`).
    create: bool,
}

/// What a key holds, as far as the plan needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Held {
    Unknown,
    Nothing,
    Mine,
    Other(String),
}

/// What the EXEC replies mean, one entry per queued command.
enum Role {
    /// A per-change effect: an error reply refuses change `usize` (batch index).
    Change(usize),
    Bulk,
}

/// One chunk's way through the steps of the module doc.
pub struct ChunkPlan {
    items: Vec<Item>,
    /// Versions hash names.
    tables: Vec<String>,
    /// Per table, its distinct keys and their versions.
    keys: Vec<Vec<String>>,
    versions: Vec<Vec<u64>>,
    markers: Vec<u64>,
    /// Per table: the chunk's lowest and highest versions.
    low: Vec<u64>,
    high: Vec<u64>,
    /// Per table: `__applied` as read (`None`: not trusted: a hash of an older sink that
    /// has rows but no `__applied`).
    applied: Vec<Option<u64>>,
    /// Per table: whether the keys' versions were read (else all are below the chunk).
    read_keys: Vec<bool>,
    /// Per table and key: the item that wins.
    winners: Vec<Vec<Option<usize>>>,
    /// Per item index, what its key holds (winners that need to know).
    held: Vec<Held>,
    /// Items whose key is new (JSON rows), checked in groups by EXISTS.
    fresh: Vec<usize>,
    /// Refused at planning: batch index and why.
    pub rejected: Vec<(usize, String)>,
    pub stale: u64,
    roles: Vec<Role>,
    /// Items whose TYPE replies come next.
    pending_typed: Vec<usize>,
    /// Tables whose keys' versions [`ChunkPlan::take_more_versions`] takes next.
    pending_more: Vec<usize>,
    hash: bool,
    invalidate: bool,
    ttl_ms: Option<u64>,
}

impl ChunkPlan {
    /// Renders `idx` (batch indices into `changes`, in order; no END records).
    pub fn new(cfg: &Resolved, changes: &[Change], idx: &[usize]) -> ChunkPlan {
        let mut tables: Vec<String> = Vec::new();
        let mut keys: Vec<Vec<String>> = Vec::new();
        let mut key_index: Vec<HashMap<String, usize>> = Vec::new();
        let mut items = Vec::with_capacity(idx.len());
        let mut name = String::new();
        let mut vh = String::new();
        for &i in idx {
            let c = &changes[i];
            vh.clear();
            push_versions_key(&mut vh, &cfg.prefix, &c.schema, &c.table, c.partition);
            let t = match tables.iter().position(|x| *x == vh) {
                Some(t) => t,
                None => {
                    tables.push(vh.clone());
                    keys.push(Vec::new());
                    key_index.push(HashMap::new());
                    tables.len() - 1
                }
            };
            let what = match (c.op, &c.after, &c.after_json) {
                (Op::Truncate, _, _) => What::Truncate,
                // The record's own JSON text (the decoder kept it: a JSON value sink).
                (op, _, Some(text)) if op.upserts() && cfg.mode == Mode::Upsert => {
                    What::Json(text.clone())
                }
                (op, Some(after), _) if op.upserts() && cfg.mode == Mode::Upsert => {
                    match cfg.value {
                        ValueKind::Json => {
                            What::Json(serde_json::to_vec(after).unwrap_or_default().into())
                        }
                        ValueKind::Hash => What::Hash(
                            after
                                .iter()
                                .filter(|(_, v)| !v.is_null())
                                .map(|(k, v)| (k.clone(), field_text(v)))
                                .collect(),
                        ),
                    }
                }
                // A delete, or any change of an invalidating sink.
                _ => What::Delete,
            };
            let key = if matches!(what, What::Truncate) {
                usize::MAX
            } else {
                cfg.template.render(c, &mut name);
                match key_index[t].get(name.as_str()) {
                    Some(&k) => k,
                    None => {
                        keys[t].push(name.clone());
                        key_index[t].insert(name.clone(), keys[t].len() - 1);
                        keys[t].len() - 1
                    }
                }
            };
            items.push(Item {
                change: i,
                table: t,
                key,
                version: c.version(),
                what,
                create: c.op == Op::Create,
            });
        }
        let n = items.len();
        let mut low = vec![u64::MAX; tables.len()];
        let mut high = vec![0; tables.len()];
        for it in &items {
            low[it.table] = low[it.table].min(it.version);
            high[it.table] = high[it.table].max(it.version);
        }
        ChunkPlan {
            low,
            high,
            applied: vec![None; tables.len()],
            read_keys: vec![true; tables.len()],
            items,
            versions: keys.iter().map(|k| vec![0; k.len()]).collect(),
            winners: keys.iter().map(|k| vec![None; k.len()]).collect(),
            markers: vec![0; tables.len()],
            tables,
            keys,
            held: vec![Held::Unknown; n],
            fresh: Vec::new(),
            rejected: Vec::new(),
            stale: 0,
            roles: Vec::new(),
            pending_typed: Vec::new(),
            pending_more: Vec::new(),
            hash: cfg.value == ValueKind::Hash,
            invalidate: cfg.mode == Mode::Invalidate,
            ttl_ms: cfg.ttl_ms,
        }
    }

    /// Step 1: WATCH the versions hashes, read markers and versions. `applied`: per
    /// versions hash, the `__applied` this sink last wrote; a table whose changes are all
    /// above it has its keys' versions left unread (a hash-valued sink reads them: it
    /// needs to know which rows it holds).
    pub fn reads_versions(&mut self, applied: &HashMap<String, u64>) -> Vec<Cmd> {
        let mut out = Vec::new();
        let mut w = Cmd::new("WATCH");
        for t in &self.tables {
            w.arg(t.as_bytes());
        }
        out.push(w);
        for (t, name) in self.tables.iter().enumerate() {
            let mut c = Cmd::new("HMGET");
            c.arg(name.as_bytes())
                .arg(TRUNCATED.as_bytes())
                .arg(APPLIED.as_bytes());
            out.push(c);
            let mut c = Cmd::new("HLEN");
            c.arg(name.as_bytes());
            out.push(c);
            self.read_keys[t] = self.hash || applied.get(name).is_none_or(|&a| self.low[t] <= a);
            if self.read_keys[t] {
                self.push_key_reads(t, &mut out);
            }
        }
        out
    }

    fn push_key_reads(&self, t: usize, out: &mut Vec<Cmd>) {
        for chunk in self.keys[t].chunks(CHUNK) {
            let mut c = Cmd::new("HMGET");
            c.arg(self.tables[t].as_bytes());
            for k in chunk {
                c.arg(k.as_bytes());
            }
            out.push(c);
        }
    }

    fn take_key_versions<'r>(
        &mut self,
        t: usize,
        r: &mut impl Iterator<Item = &'r Reply>,
    ) -> Result<(), String> {
        let mut at = 0;
        while at < self.keys[t].len() {
            let Some(Reply::Array(Some(vs))) = r.next() else {
                return Err("HMGET: not an array".into());
            };
            for v in vs {
                *self.versions[t]
                    .get_mut(at)
                    .ok_or("HMGET: too many values")? = version_of(v)?;
                at += 1;
            }
        }
        Ok(())
    }

    /// Takes step 1's replies. Returns the reads still needed (keys' versions left
    /// unread on a guess that the markers did not bear out), to be sent and given to
    /// [`ChunkPlan::take_more_versions`]; then [`ChunkPlan::decide`]. `Err` on a reply
    /// that makes no sense (the caller says what it got).
    pub fn take_versions(&mut self, replies: &[Reply]) -> Result<Vec<Cmd>, String> {
        let mut r = replies.iter();
        expect_ok(r.next())?;
        let mut more = Vec::new();
        for t in 0..self.tables.len() {
            let Some(Reply::Array(Some(m))) = r.next() else {
                return Err(format!("HMGET of the markers: {replies:?}"));
            };
            let [truncated, applied] = m.as_slice() else {
                return Err(format!("HMGET of the markers: {m:?}"));
            };
            self.markers[t] = version_of(truncated)?;
            let hlen = match r.next() {
                Some(Reply::Int(n)) => *n,
                other => return Err(format!("HLEN: {other:?}")),
            };
            self.applied[t] = match applied {
                Reply::Bulk(None) if hlen > 0 => None,
                a => Some(version_of(a)?),
            };
            if self.read_keys[t] {
                self.take_key_versions(t, &mut r)?;
            } else if self.applied[t].is_none_or(|a| self.low[t] <= a) {
                self.read_keys[t] = true;
                self.pending_more.push(t);
                self.push_key_reads(t, &mut more);
            }
        }
        Ok(more)
    }

    /// Takes the replies of the reads [`ChunkPlan::take_versions`] returned.
    pub fn take_more_versions(&mut self, replies: &[Reply]) -> Result<(), String> {
        let mut r = replies.iter();
        for t in std::mem::take(&mut self.pending_more) {
            self.take_key_versions(t, &mut r)?;
        }
        Ok(())
    }

    /// Step 2: the winners.
    pub fn decide(&mut self) {
        // The chunk's own truncates count for every change of it.
        for it in &self.items {
            if matches!(it.what, What::Truncate) {
                self.markers[it.table] = self.markers[it.table].max(it.version);
            }
        }
        let mut floor: Vec<Vec<u64>> = self.versions.clone();
        for (n, it) in self.items.iter().enumerate() {
            if matches!(it.what, What::Truncate) {
                continue;
            }
            let f = &mut floor[it.table][it.key];
            if it.version > *f && it.version > self.markers[it.table] {
                *f = it.version;
                if self.winners[it.table][it.key].is_some() {
                    self.stale += 1; // superseded within the chunk
                }
                self.winners[it.table][it.key] = Some(n);
            } else {
                self.stale += 1;
            }
        }
    }

    fn winning(&self) -> impl Iterator<Item = (usize, &Item)> {
        self.items.iter().enumerate().filter(|(n, it)| {
            !matches!(it.what, What::Truncate) && self.winners[it.table][it.key] == Some(*n)
        })
    }

    fn key_of(&self, it: &Item) -> &str {
        &self.keys[it.table][it.key]
    }

    /// Step 3: TYPE of the keys whose type matters, EXISTS for new JSON rows.
    /// Empty when nothing needs checking.
    pub fn reads_types(&mut self) -> Vec<Cmd> {
        let mut typed = Vec::new();
        let mut fresh = Vec::new();
        for (n, it) in self.winning() {
            if self.invalidate {
                continue;
            }
            let read = self.read_keys[it.table];
            match it.what {
                // A new row: without its version, an insert is taken to be one (MSET
                // then, far cheaper than a SET each, once EXISTS says none is there).
                What::Json(_) if read && self.versions[it.table][it.key] == 0 => fresh.push(n),
                What::Json(_) if !read && it.create => fresh.push(n),
                What::Json(_) => {}
                // Unread keys' deletes check the type themselves (GETDEL).
                _ if !read => {}
                _ => typed.push(n),
            }
        }
        self.fresh = fresh;
        if typed.is_empty() && self.fresh.is_empty() {
            return Vec::new();
        }
        // Not WATCHed: Redis checks a new watched key against all the client watches, so
        // watching thousands costs quadratic time. The sink owns its key space; another
        // client creating one of its keys between this read and the EXEC is not guarded.
        let mut out = Vec::new();
        for &n in &typed {
            let mut c = Cmd::new("TYPE");
            c.arg(self.key_of(&self.items[n]).as_bytes());
            out.push(c);
        }
        for chunk in self.fresh.chunks(CHUNK) {
            let mut c = Cmd::new("EXISTS");
            for &n in chunk {
                c.arg(self.key_of(&self.items[n]).as_bytes());
            }
            out.push(c);
        }
        self.pending_typed = typed;
        out
    }

    /// Takes step 3's replies; returns the TYPE commands still needed (new JSON rows of
    /// EXISTS groups where some key exists), to be sent and given to
    /// [`ChunkPlan::take_fresh_types`].
    pub fn take_types(&mut self, replies: &[Reply]) -> Result<Vec<Cmd>, String> {
        let mut r = replies.iter();
        let typed = std::mem::take(&mut self.pending_typed);
        for &n in &typed {
            self.held[n] = held_of(r.next(), self.hash)?;
        }
        let mut again = Vec::new();
        let fresh = self.fresh.clone();
        for chunk in fresh.chunks(CHUNK) {
            match r.next() {
                Some(Reply::Int(0)) => {
                    for &n in chunk {
                        self.held[n] = Held::Nothing;
                    }
                }
                Some(Reply::Int(_)) => again.extend_from_slice(chunk),
                other => return Err(format!("EXISTS: {other:?}")),
            }
        }
        let cmds = again
            .iter()
            .map(|&n| {
                let mut c = Cmd::new("TYPE");
                c.arg(self.key_of(&self.items[n]).as_bytes());
                c
            })
            .collect();
        self.pending_typed = again;
        Ok(cmds)
    }

    /// Takes the replies of the commands [`ChunkPlan::take_types`] returned.
    pub fn take_fresh_types(&mut self, replies: &[Reply]) -> Result<(), String> {
        let again = std::mem::take(&mut self.pending_typed);
        for (&n, r) in again.iter().zip(replies) {
            self.held[n] = held_of(Some(r), self.hash)?;
        }
        Ok(())
    }

    /// Step 4: MULTI, effects, versions, markers, EXEC.
    pub fn writes(&mut self) -> Vec<Cmd> {
        let mut out = vec![Cmd::new("MULTI")];
        let mut roles = Vec::new();
        let mut refused: Vec<(usize, String)> = Vec::new();
        let mut mset: Vec<usize> = Vec::new();
        let mut dels: Vec<usize> = Vec::new();
        let mut applied: Vec<usize> = Vec::new();
        let winners: Vec<usize> = self.winning().map(|(n, _)| n).collect();
        let ttl = self.ttl_ms;
        for n in winners {
            let it = &self.items[n];
            let key = self.key_of(it).as_bytes();
            if let Held::Other(ty) = &self.held[n] {
                refused.push((
                    it.change,
                    format!(
                        "WRONGTYPE the key holds a {ty}; this sink writes a {}",
                        if self.hash { "hash" } else { "string" }
                    ),
                ));
                continue;
            }
            applied.push(n);
            if self.invalidate {
                dels.push(n);
                continue;
            }
            match &it.what {
                What::Json(v) => {
                    let known = self.held[n] == Held::Unknown;
                    if !known && ttl.is_none() {
                        mset.push(n);
                    } else {
                        let mut c = Cmd::new("SET");
                        c.arg(key).arg(v);
                        if let Some(ms) = ttl {
                            c.arg(b"PX").arg_u64(ms);
                        }
                        if known {
                            // A key the sink wrote before: GET makes SET refuse another
                            // type (WRONGTYPE) instead of replacing it.
                            c.arg(b"GET");
                        }
                        out.push(c);
                        roles.push(Role::Change(it.change));
                    }
                }
                What::Hash(fields) => {
                    if self.held[n] == Held::Mine {
                        dels.push(n);
                    }
                    if !fields.is_empty() {
                        let mut c = Cmd::new("HSET");
                        c.arg(key);
                        for (f, v) in fields {
                            c.arg(f.as_bytes()).arg(v);
                        }
                        out.push(c);
                        roles.push(Role::Change(it.change));
                        if let Some(ms) = ttl {
                            let mut c = Cmd::new("PEXPIRE");
                            c.arg(key).arg_u64(ms);
                            out.push(c);
                            roles.push(Role::Change(it.change));
                        }
                    }
                }
                What::Delete if !self.read_keys[it.table] => {
                    // Refuses a key of another type (WRONGTYPE), as the read would have.
                    let mut c = Cmd::new("GETDEL");
                    c.arg(key);
                    out.push(c);
                    roles.push(Role::Change(it.change));
                }
                What::Delete => {
                    if self.held[n] == Held::Mine {
                        dels.push(n);
                    }
                }
                What::Truncate => {}
            }
        }
        // Deletes first: a hash row is deleted before its new fields are set. (The MULTI
        // block is atomic, so the order inside it is not visible otherwise.)
        if !dels.is_empty() {
            for (i, chunk) in dels.chunks(CHUNK).enumerate() {
                let mut c = Cmd::new("DEL");
                for &n in chunk {
                    c.arg(self.key_of(&self.items[n]).as_bytes());
                }
                // After MULTI (index 0), in chunk order.
                out.insert(i + 1, c);
                roles.insert(i, Role::Bulk);
            }
        }
        for chunk in mset.chunks(CHUNK) {
            let mut c = Cmd::new("MSET");
            for &n in chunk {
                let it = &self.items[n];
                if let What::Json(v) = &it.what {
                    c.arg(self.key_of(it).as_bytes()).arg(v);
                }
            }
            out.push(c);
            roles.push(Role::Bulk);
        }
        for (t, name) in self.tables.iter().enumerate() {
            let mine: Vec<usize> = applied
                .iter()
                .copied()
                .filter(|&n| self.items[n].table == t)
                .collect();
            for chunk in mine.chunks(CHUNK) {
                let mut c = Cmd::new("HSET");
                c.arg(name.as_bytes());
                for &n in chunk {
                    let it = &self.items[n];
                    c.arg(self.key_of(it).as_bytes()).arg_u64(it.version);
                }
                out.push(c);
                roles.push(Role::Bulk);
            }
            let truncate = self
                .items
                .iter()
                .filter(|it| it.table == t && matches!(it.what, What::Truncate))
                .map(|it| it.version)
                .max();
            let mut c = Cmd::new("HSET");
            c.arg(name.as_bytes());
            if let Some(tv) = truncate.filter(|&tv| tv >= self.markers[t]) {
                c.arg(TRUNCATED.as_bytes()).arg_u64(tv);
            }
            // Every change of the table up to the chunk's highest is taken. Left unset
            // in a hash an older sink wrote without it: its fields may be above.
            if let Some(a) = self.next_applied(t) {
                c.arg(APPLIED.as_bytes()).arg_u64(a);
            }
            if c.args() > 2 {
                out.push(c);
                roles.push(Role::Bulk);
            }
        }
        out.push(Cmd::new("EXEC"));
        self.rejected.extend(refused);
        self.roles = roles;
        out
    }

    /// The `__applied` of table `t` once the chunk is applied (`None`: not kept, see
    /// [`ChunkPlan::applied`]).
    fn next_applied(&self, t: usize) -> Option<u64> {
        self.applied[t].map(|a| a.max(self.high[t]))
    }

    /// Per versions hash, its `__applied` once the chunk is applied: for the caller to
    /// give to the next chunk's [`ChunkPlan::reads_versions`].
    pub fn applied_after(&self) -> impl Iterator<Item = (&str, u64)> {
        (0..self.tables.len())
            .filter_map(|t| Some((self.tables[t].as_str(), self.next_applied(t)?)))
    }

    /// The truncates of the chunk: versions hash and version, for the sweeps.
    pub fn truncates(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = Vec::new();
        for it in self
            .items
            .iter()
            .filter(|it| matches!(it.what, What::Truncate))
        {
            let name = &self.tables[it.table];
            match out.iter_mut().find(|(t, _)| t == name) {
                Some((_, v)) => *v = (*v).max(it.version),
                None => out.push((name.clone(), it.version)),
            }
        }
        out
    }

    /// Takes the replies of [`ChunkPlan::writes`] (MULTI's, each QUEUED, EXEC's).
    pub fn take_exec(&mut self, replies: &[Reply]) -> Exec {
        // A command refused while queuing (OOM, a read-only replica) aborts the block.
        for r in &replies[..replies.len().saturating_sub(1)] {
            if let Reply::Error(e) = r {
                return Exec::Failed(e.clone());
            }
        }
        match replies.last() {
            Some(Reply::Array(None)) => Exec::Conflict,
            Some(Reply::Array(Some(results))) => {
                for (role, r) in self.roles.iter().zip(results) {
                    if let Reply::Error(e) = r {
                        match role {
                            Role::Change(i) => self.rejected.push((*i, e.clone())),
                            Role::Bulk => return Exec::Failed(e.clone()),
                        }
                    }
                }
                Exec::Done
            }
            Some(Reply::Error(e)) => Exec::Failed(e.clone()),
            other => Exec::Failed(format!("EXEC: {other:?}")),
        }
    }

    pub fn reset_for_retry(&mut self) {
        for v in &mut self.versions {
            v.iter_mut().for_each(|x| *x = 0);
        }
        self.pending_more.clear();
        for w in &mut self.winners {
            w.iter_mut().for_each(|x| *x = None);
        }
        for h in &mut self.held {
            *h = Held::Unknown;
        }
        self.fresh.clear();
        self.rejected.clear();
        self.stale = 0;
        self.roles.clear();
        self.pending_typed.clear();
    }
}

/// How an EXEC went.
#[derive(Debug, PartialEq, Eq)]
pub enum Exec {
    Done,
    /// Something watched changed meanwhile: nothing was applied; plan again.
    Conflict,
    /// An error reply for the whole block.
    Failed(String),
}

fn expect_ok(r: Option<&Reply>) -> Result<(), String> {
    match r {
        Some(Reply::Status(s)) if s == "OK" => Ok(()),
        other => Err(format!("WATCH: {other:?}")),
    }
}

fn version_of(r: &Reply) -> Result<u64, String> {
    match r {
        Reply::Bulk(None) => Ok(0),
        Reply::Bulk(Some(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| "a version that is not a number".to_string()),
        Reply::Error(e) => Err(e.clone()),
        other => Err(format!("a version: {other:?}")),
    }
}

fn held_of(r: Option<&Reply>, hash: bool) -> Result<Held, String> {
    match r {
        Some(Reply::Status(t)) => Ok(match t.as_str() {
            "none" => Held::Nothing,
            "hash" if hash => Held::Mine,
            "string" if !hash => Held::Mine,
            other => Held::Other(other.to_string()),
        }),
        Some(Reply::Error(e)) => Err(e.clone()),
        other => Err(format!("TYPE: {other:?}")),
    }
}
