//! How a chunk of changes is applied: what is read from Redis first (under WATCH), which
//! change wins per key, and the MULTI/EXEC block that applies the winners together with
//! the position they bring the view to. Pure: commands out, replies in; the I/O is in
//! [`super::deliver`].
//!
//! # The sink's own keys
//!
//! - **Offsets**, one hash per topic: `<prefix>:__cdc:o:<topic>` ([`push_offsets_key`]),
//!   field `<partition>` = the version ([`Change::version`], the record's offset + 1) of
//!   the last change of that partition the view has taken. It is the consumer position
//!   stored in the target, written in the same `MULTI`/`EXEC` as the effects it covers,
//!   so the two never disagree.
//! - **Rows**, one set per table and partition of its topic: `<prefix>:__cdc:k:<schema>.<table>`
//!   (`…#<p>` for partition `p` > 0, [`push_rows_key`]): the Redis keys of the rows the
//!   sink holds. Only inserts and deletes change it (an update's key is already there).
//!   It is what a truncate deletes and what `cdc verify --sink` reads.
//! - **Truncated rows** (`<prefix>:__cdc:t:…`, same suffix): the rows set of a truncate
//!   whose sweep is not finished, listed in `<prefix>:__cdc:sweeps` until it is.
//!
//! # Exactly once: a change is applied when its version is above its partition's offset
//!
//! A key's changes are all in one partition of one topic, read in offset order, and a
//! chunk's effects and its new offsets are one atomic `EXEC`. So a change at or below its
//! partition's stored offset has been applied (or superseded): it is stale, and a replay
//! (a restart from an older group offset, a group reset, a duplicate) changes nothing.
//! A change above it is newer than every change the view holds of its key: an older
//! change never overwrites a newer one. This is the per-key version check, with one
//! version per partition instead of one per key: a key's version is at or below its
//! partition's offset, and nothing else is needed to decide. (An earlier design stored a
//! version per key in a hash: it cost Redis a hash write per change, more than the
//! change's own write; see BENCHMARKS.md.)
//!
//! # One chunk
//!
//! 1. `WATCH` the offsets hashes of the chunk's topics, read their partitions' offsets,
//!    ask the rows sets which of the keys the chunk updates or deletes are the sink's
//!    (`SMISMEMBER`), and whether the keys it inserts exist (`EXISTS`, a count per
//!    thousand keys): one round trip.
//! 2. Per key, the winner is the newest change above its partition's offset and above a
//!    truncate of its table in the chunk; the others are stale (a replay) or superseded
//!    within the chunk (the chunk is applied atomically, so they could never be seen).
//! 3. The guard: a winner's key that is neither in the rows set nor known to be absent
//!    (an insert of a group where some key exists, an update of a row the sink does not
//!    know) is looked up with `EXISTS`, and `TYPE` for each that exists. A key that holds
//!    a type the sink does not write (another application's key) is refused (the change
//!    goes to the dead-letter topic) and left alone. In the steady state (inserts of new
//!    rows, updates and deletes of the sink's rows) this step sends nothing. These keys
//!    are not watched (watching thousands of keys costs Redis quadratic time): another
//!    client creating one of them in the instant between the read and the EXEC is not
//!    guarded against, nor is another client replacing a key that is in the rows set.
//! 4. `MULTI`; for a truncated table, `RENAME` of its rows set to the truncated rows set
//!    (and the latter listed in the sweeps); the effects in bulk (`DEL`, `MSET` of JSON
//!    rows, or `SET … PX` with a TTL, `HSET` per hash row); `SADD`/`SREM` of the rows
//!    sets; the new offsets; `EXEC`. If an offsets hash changed meanwhile (another
//!    writer), EXEC does nothing and the chunk is planned again from 1.
//!
//! # Truncates
//!
//! After its EXEC, a truncate's sweep deletes the keys of the truncated rows set, a
//! thousand at a time, except those the rows set holds again (rows written after the
//! truncate, in the same chunk or later), each step one `MULTI`/`EXEC` that deletes the
//! keys and removes them from the set; it ends when the set is empty (Redis then drops
//! it) and the sweeps list forgets it. A sweep cut short (a crash, a lost connection) is
//! finished when the sink next connects, before it applies anything; and a chunk that
//! truncates a table whose sweep is still listed finishes that sweep first. Several
//! partitions: the connector writes a truncate to every partition, each partition's
//! copy truncates that partition's rows set.
//!
//! # Refusals and crashes
//!
//! A change refused at step 3 (its key holds another type) is recorded in the refused
//! hash (`<prefix>:__cdc:refused`, field `<topic>/<partition>/<version>`, the reason as
//! value) by the same EXEC that moves its partition's offset past it. The driver writes
//! its dead letter once `deliver` reported it, and calls `deliver` again only after that
//! write is durable, so the next call's first chunk deletes the field (`HDEL` in its
//! block). A crash in between leaves the field: a replay finds the change stale, asks the
//! hash (`HLEN` in step 1, then one `HMGET` of the chunk's stale changes, only when the
//! hash is not empty) and refuses it again, so its dead letter is written (at least
//! once). Not covered: a command refused by Redis inside the EXEC (a key that changed
//! type after step 3), reported from the EXEC's replies only.
//!
//! Why not a Lua script: measured on Redis 7, a script doing the same work spends ~2.7 µs
//! per change converting arguments between Redis and Lua, against ~0.8 µs for these
//! plain commands (`redis-cli --pipe` of SETs: ~1 µs per SET all told).

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::{DefaultHashBuilder, HashTable};

use serde_json::Value;

use super::config::{Mode, Resolved, ValueKind};
use super::conn::{Cmd, Reply};
use crate::change::{Change, Op};

/// Keys per SMISMEMBER / EXISTS / MSET / DEL / SADD / SREM command.
const CHUNK: usize = 1000;

/// Appends the name of the hash of `topic`'s offsets in the view: `<prefix>:__cdc:o:<topic>`.
pub fn push_offsets_key(out: &mut String, prefix: &str, topic: &str) {
    out.push_str(prefix);
    out.push_str(":__cdc:o:");
    out.push_str(topic);
}

/// Appends the name suffix shared by a table's rows set and truncated rows set:
/// `<schema>.<table>` for partition 0 (the only one by default), `…#<partition>` for the
/// others. One set per partition: a key's changes are all in one partition, and a
/// truncate is written to every partition, so each partition's sweep is exact on its own.
pub fn push_table_suffix(out: &mut String, schema: &str, table: &str, partition: u32) {
    use std::fmt::Write;
    out.push_str(schema);
    out.push('.');
    out.push_str(table);
    if partition > 0 {
        let _ = write!(out, "#{partition}");
    }
}

/// Appends the name of the set of the Redis keys of `schema.table`'s rows in `partition`.
pub fn push_rows_key(out: &mut String, prefix: &str, schema: &str, table: &str, partition: u32) {
    out.push_str(prefix);
    out.push_str(":__cdc:k:");
    push_table_suffix(out, schema, table, partition);
}

/// The rows set of a table suffix ([`push_table_suffix`]).
pub fn rows_key(prefix: &str, suffix: &str) -> String {
    format!("{prefix}:__cdc:k:{suffix}")
}

/// The truncated rows set of a table suffix: the rows a truncate's sweep still has to
/// delete.
pub fn truncated_key(prefix: &str, suffix: &str) -> String {
    format!("{prefix}:__cdc:t:{suffix}")
}

/// The hash of the changes the sink refused whose dead letters may not be durable yet:
/// field `<topic>/<partition>/<version>`, value the reason.
pub fn refused_key(prefix: &str) -> String {
    format!("{prefix}:__cdc:refused")
}

/// The set of table suffixes whose truncate sweep is not finished.
pub fn sweeps_key(prefix: &str) -> String {
    format!("{prefix}:__cdc:sweeps")
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
    /// The change is an insert (`c`): its key is not asked of the rows set.
    create: bool,
    /// The change is a delete (`d`): the row leaves the rows set.
    delete: bool,
}

/// What a key holds, as far as the plan needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Unknown,
    /// Nothing is there.
    Nothing,
    /// The sink's row: in the rows set, or of the type the sink writes.
    Mine,
    /// In the rows set (known from step 1).
    Member,
    /// Another type: another application's key.
    Other(&'static str),
}

/// What the EXEC replies mean, one entry per queued command.
enum Role {
    /// A per-change effect: an error reply refuses change `usize` (batch index).
    Change(usize),
    /// An error reply fails the chunk.
    Bulk,
    /// The rows set's RENAME: "no such key" (an empty table) is fine.
    Rename,
}

/// A table (and partition) of the chunk.
struct Table {
    /// `<schema>.<table>[#p]`.
    suffix: String,
    rows: String,
    /// Index into [`ChunkPlan::offsets`].
    slot: usize,
    /// Distinct keys (ranges of the plan's `text`), and for each whether it is in the
    /// rows set (step 1).
    keys: Vec<(u32, u32)>,
    /// Indices into `keys`, by the key's hash.
    index: HashTable<u32>,
    member: Vec<bool>,
    /// Keys asked of the rows set (step 1), in order.
    asked: Vec<usize>,
    /// Keys of inserts only, whose existence was asked (step 1), in order.
    created: Vec<usize>,
    /// Per key: known not to exist (an EXISTS group of step 1 found none).
    absent: Vec<bool>,
    /// The chunk's newest truncate of the table (0: none).
    truncate: u64,
    /// Per key: the item that wins.
    winners: Vec<Option<usize>>,
}

/// A topic partition of the chunk: its offset in the view.
struct Slot {
    /// The offsets hash's name.
    hash: String,
    topic: Arc<str>,
    partition: u32,
    /// As read (0: none yet).
    applied: u64,
    /// The chunk's highest version.
    high: u64,
}

/// One chunk's way through the steps of the module doc.
pub struct ChunkPlan {
    /// The text of every distinct key of the chunk, one after the other.
    text: String,
    hasher: DefaultHashBuilder,
    items: Vec<Item>,
    tables: Vec<Table>,
    offsets: Vec<Slot>,
    /// Distinct offsets hashes (watched).
    hashes: Vec<String>,
    /// Per item index, what its key holds (winners that need to know).
    held: Vec<Held>,
    /// Items whose key's existence is asked (EXISTS, in groups of [`CHUNK`]).
    fresh: Vec<usize>,
    /// Items whose TYPE replies come next.
    pending_typed: Vec<usize>,
    /// Refused at planning: batch index and why.
    pub rejected: Vec<(usize, String)>,
    /// The refused hash's fields of this chunk's refusals (new, or found again on a
    /// replay): forgotten once their dead letters are durable.
    pub refused_fields: Vec<String>,
    /// New refusals to record in the refused hash: field and reason.
    refusing: Vec<(String, String)>,
    /// Fields of earlier refusals whose dead letters are durable: deleted by this chunk.
    forget: Vec<String>,
    /// Entries in the refused hash (step 1).
    refused_waiting: i64,
    /// Items stale by their partition's offset (a replay), and of those the ones whose
    /// refusal is being looked up.
    stale_items: Vec<usize>,
    checking_refused: Vec<usize>,
    pub stale: u64,
    roles: Vec<Role>,
    prefix: String,
    hash: bool,
    invalidate: bool,
    ttl_ms: Option<u64>,
}

impl ChunkPlan {
    /// Renders `idx` (batch indices into `changes`, in order; no END records).
    pub fn new(cfg: &Resolved, changes: &[Change], idx: &[usize]) -> ChunkPlan {
        let mut plan = ChunkPlan {
            text: String::with_capacity(idx.len() * 24),
            hasher: DefaultHashBuilder::default(),
            items: Vec::with_capacity(idx.len()),
            tables: Vec::new(),
            offsets: Vec::new(),
            hashes: Vec::new(),
            held: Vec::new(),
            fresh: Vec::new(),
            pending_typed: Vec::new(),
            rejected: Vec::new(),
            refused_fields: Vec::new(),
            refusing: Vec::new(),
            forget: Vec::new(),
            refused_waiting: 0,
            stale_items: Vec::new(),
            checking_refused: Vec::new(),
            stale: 0,
            roles: Vec::new(),
            prefix: cfg.prefix.clone(),
            hash: cfg.value == ValueKind::Hash,
            invalidate: cfg.mode == Mode::Invalidate,
            ttl_ms: cfg.ttl_ms,
        };
        let mut suffix = String::new();
        // The last change's table: runs of one table are the common case, and the decoder
        // shares one copy of each name, so comparing pointers finds them.
        let mut last: Option<(usize, &Change)> = None;
        for &i in idx {
            let c = &changes[i];
            let t = match last {
                Some((t, l))
                    if Arc::ptr_eq(&l.table, &c.table)
                        && Arc::ptr_eq(&l.schema, &c.schema)
                        && Arc::ptr_eq(&l.topic, &c.topic)
                        && l.partition == c.partition =>
                {
                    t
                }
                _ => plan.table_of(c, &mut suffix),
            };
            last = Some((t, c));
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
            let version = c.version();
            let slot = &mut plan.offsets[plan.tables[t].slot];
            slot.high = slot.high.max(version);
            let key = if matches!(what, What::Truncate) {
                let table = &mut plan.tables[t];
                table.truncate = table.truncate.max(version);
                usize::MAX
            } else {
                plan.key_index(t, |text| cfg.template.render_append(c, text))
            };
            plan.items.push(Item {
                change: i,
                table: t,
                key,
                version,
                what,
                create: c.op == Op::Create,
                delete: c.op == Op::Delete,
            });
        }
        for t in &mut plan.tables {
            t.member = vec![false; t.keys.len()];
            t.absent = vec![false; t.keys.len()];
            t.winners = vec![None; t.keys.len()];
        }
        plan.held = vec![Held::Unknown; plan.items.len()];
        plan
    }

    /// The index among table `t`'s keys of the key `render` appends to the text, added
    /// if new (else the text is cut back).
    fn key_index(&mut self, t: usize, render: impl FnOnce(&mut String)) -> usize {
        let start = self.text.len();
        render(&mut self.text);
        let text = &self.text;
        let Table { keys, index, .. } = &mut self.tables[t];
        let key = &text[start..];
        let hash = self.hasher.hash_one(key);
        let at = |&(s, l): &(u32, u32)| &text[s as usize..(s + l) as usize];
        if let Some(&k) = index.find(hash, |&k| at(&keys[k as usize]) == key) {
            self.text.truncate(start);
            return k as usize;
        }
        let k = keys.len();
        keys.push((start as u32, key.len() as u32));
        let hasher = &self.hasher;
        index.insert_unique(hash, k as u32, |&k| hasher.hash_one(at(&keys[k as usize])));
        k
    }

    /// The index of `c`'s table (and partition), added if new.
    fn table_of(&mut self, c: &Change, suffix: &mut String) -> usize {
        suffix.clear();
        push_table_suffix(suffix, &c.schema, &c.table, c.partition);
        let mut hash = String::new();
        push_offsets_key(&mut hash, &self.prefix, &c.topic);
        if let Some(t) = self
            .tables
            .iter()
            .position(|t| t.suffix == *suffix && self.offsets[t.slot].hash == hash)
        {
            return t;
        }
        let slot = match self
            .offsets
            .iter()
            .position(|s| s.partition == c.partition && s.hash == hash)
        {
            Some(s) => s,
            None => {
                if !self.hashes.contains(&hash) {
                    self.hashes.push(hash.clone());
                }
                self.offsets.push(Slot {
                    hash,
                    topic: c.topic.clone(),
                    partition: c.partition,
                    applied: 0,
                    high: 0,
                });
                self.offsets.len() - 1
            }
        };
        self.tables.push(Table {
            suffix: suffix.clone(),
            rows: rows_key(&self.prefix, suffix),
            slot,
            keys: Vec::new(),
            index: HashTable::new(),
            member: Vec::new(),
            asked: Vec::new(),
            created: Vec::new(),
            absent: Vec::new(),
            truncate: 0,
            winners: Vec::new(),
        });
        self.tables.len() - 1
    }

    /// The table suffixes this chunk truncates (their sweeps must not be pending when the
    /// chunk renames their rows sets: the caller finishes any that is first).
    pub fn truncated_suffixes(&self) -> impl Iterator<Item = &str> {
        self.tables
            .iter()
            .filter(|t| t.truncate > 0)
            .map(|t| t.suffix.as_str())
    }

    /// Step 1: WATCH the offsets hashes, read the offsets, ask the rows sets about the
    /// keys of updates and deletes, and whether the keys of inserts exist (in groups:
    /// EXISTS counts).
    pub fn reads(&mut self) -> Vec<Cmd> {
        let mut out = Vec::new();
        let mut w = Cmd::new("WATCH");
        for h in &self.hashes {
            w.arg(h.as_bytes());
        }
        out.push(w);
        for s in &self.offsets {
            let mut c = Cmd::new("HGET");
            c.arg(s.hash.as_bytes()).arg_u64(s.partition as u64);
            out.push(c);
        }
        let mut c = Cmd::new("HLEN");
        c.arg(refused_key(&self.prefix).as_bytes());
        out.push(c);
        if self.invalidate {
            return out;
        }
        // Per key: 1 asked of the rows set, 2 of EXISTS.
        let mut ask: Vec<Vec<u8>> = self.tables.iter().map(|t| vec![0; t.keys.len()]).collect();
        for it in &self.items {
            if !matches!(it.what, What::Truncate) {
                ask[it.table][it.key] |= if it.create { 2 } else { 1 };
            }
        }
        for (t, table) in self.tables.iter_mut().enumerate() {
            table.asked = (0..table.keys.len())
                .filter(|&k| ask[t][k] & 1 != 0)
                .collect();
            table.created = (0..table.keys.len()).filter(|&k| ask[t][k] == 2).collect();
            for chunk in table.asked.chunks(CHUNK) {
                let mut c = Cmd::new("SMISMEMBER");
                c.arg(table.rows.as_bytes());
                for &k in chunk {
                    let (s, l) = table.keys[k];
                    c.arg(&self.text.as_bytes()[s as usize..(s + l) as usize]);
                }
                out.push(c);
            }
            for chunk in table.created.chunks(CHUNK) {
                let mut c = Cmd::new("EXISTS");
                for &k in chunk {
                    let (s, l) = table.keys[k];
                    c.arg(&self.text.as_bytes()[s as usize..(s + l) as usize]);
                }
                out.push(c);
            }
        }
        out
    }

    /// Takes step 1's replies, then decides the winners (step 2). `Err` on a reply that
    /// makes no sense (the caller says what it got).
    pub fn take_reads(&mut self, replies: &[Reply]) -> Result<(), String> {
        let mut r = replies.iter();
        expect_ok(r.next())?;
        for s in &mut self.offsets {
            s.applied = match r.next() {
                Some(v) => version_of(v)?,
                None => return Err("HGET of an offset: no reply".into()),
            };
        }
        self.refused_waiting = match r.next() {
            Some(Reply::Int(n)) => *n,
            other => return Err(format!("HLEN of the refused hash: {other:?}")),
        };
        // A replayed truncate is as stale as any change.
        for table in &mut self.tables {
            if table.truncate > 0 && table.truncate <= self.offsets[table.slot].applied {
                table.truncate = 0;
            }
        }
        if !self.invalidate {
            for table in &mut self.tables {
                for chunk in table.asked.chunks(CHUNK) {
                    let Some(Reply::Array(Some(flags))) = r.next() else {
                        return Err("SMISMEMBER: not an array".into());
                    };
                    if flags.len() != chunk.len() {
                        return Err("SMISMEMBER: as many flags as members".into());
                    }
                    for (&k, f) in chunk.iter().zip(flags) {
                        table.member[k] = matches!(f, Reply::Int(1));
                    }
                }
                for chunk in table.created.chunks(CHUNK) {
                    match r.next() {
                        Some(Reply::Int(0)) => {
                            for &k in chunk {
                                table.absent[k] = true;
                            }
                        }
                        // Some exist: each is asked again (TYPE, in step 3).
                        Some(Reply::Int(_)) => {}
                        other => return Err(format!("EXISTS: {other:?}")),
                    }
                }
            }
        }
        self.decide();
        Ok(())
    }

    /// Step 2: the winners.
    fn decide(&mut self) {
        for (n, it) in self.items.iter().enumerate() {
            if matches!(it.what, What::Truncate) {
                continue;
            }
            let table = &mut self.tables[it.table];
            let applied = self.offsets[table.slot].applied;
            if it.version <= applied || it.version <= table.truncate {
                self.stale += 1;
                if it.version <= applied {
                    self.stale_items.push(n);
                }
                continue;
            }
            // Items come in offset order per partition: a later item of the key is newer.
            if table.winners[it.key].replace(n).is_some() {
                self.stale += 1; // superseded within the chunk
            }
        }
    }

    fn winning(&self) -> impl Iterator<Item = (usize, &Item)> {
        self.items.iter().enumerate().filter(|(n, it)| {
            !matches!(it.what, What::Truncate) && self.tables[it.table].winners[it.key] == Some(*n)
        })
    }

    fn key_of(&self, it: &Item) -> &str {
        self.key_text(it.table, it.key)
    }

    fn key_text(&self, t: usize, k: usize) -> &str {
        let (s, l) = self.tables[t].keys[k];
        &self.text[s as usize..(s + l) as usize]
    }

    /// The refused hash's field of item `n`.
    fn field_of(&self, n: usize) -> String {
        let it = &self.items[n];
        let slot = &self.offsets[self.tables[it.table].slot];
        format!("{}/{}/{}", slot.topic, slot.partition, it.version)
    }

    /// After step 1, on a replay: the refusals recorded for the chunk's stale changes
    /// (their dead letters may have been lost in a crash), asked with one HMGET; `None`
    /// when there is nothing to ask (the hash is empty, or nothing is stale).
    pub fn reads_refused(&mut self) -> Option<Cmd> {
        if self.refused_waiting <= 0 || self.stale_items.is_empty() {
            return None;
        }
        self.checking_refused = self.stale_items.clone();
        let mut c = Cmd::new("HMGET");
        c.arg(refused_key(&self.prefix).as_bytes());
        for &n in &self.checking_refused {
            c.arg(self.field_of(n).as_bytes());
        }
        Some(c)
    }

    /// Takes the HMGET's reply: a stale change found there is refused again (its dead
    /// letter is written again: at least once).
    pub fn take_refused(&mut self, reply: &Reply) -> Result<(), String> {
        let checking = std::mem::take(&mut self.checking_refused);
        let Reply::Array(Some(reasons)) = reply else {
            return Err(format!("HMGET of the refused hash: {reply:?}"));
        };
        if reasons.len() != checking.len() {
            return Err("HMGET of the refused hash: as many values as fields".into());
        }
        for (&n, r) in checking.iter().zip(reasons) {
            if let Some(why) = r.as_bytes() {
                self.rejected.push((
                    self.items[n].change,
                    String::from_utf8_lossy(why).into_owned(),
                ));
                self.refused_fields.push(self.field_of(n));
            }
        }
        Ok(())
    }

    /// Fields of refusals whose dead letters are durable: this chunk's block deletes them.
    pub fn set_forget(&mut self, fields: Vec<String>) {
        self.forget = fields;
    }

    /// Step 3: EXISTS of the winners' keys that are neither in the rows set nor known to
    /// be absent (TYPE follows for those that exist). Empty when nothing needs checking
    /// (the steady state: updates of the sink's rows, inserts of new ones).
    pub fn reads_types(&mut self) -> Vec<Cmd> {
        if self.invalidate {
            return Vec::new();
        }
        let mut fresh = Vec::new();
        for (n, it) in self.items.iter().enumerate() {
            if matches!(it.what, What::Truncate) {
                continue;
            }
            let table = &self.tables[it.table];
            if table.winners[it.key] != Some(n) {
                continue;
            }
            if table.member[it.key] {
                self.held[n] = Held::Member;
            } else if table.absent[it.key] {
                self.held[n] = Held::Nothing;
            } else {
                fresh.push(n);
            }
        }
        self.fresh = fresh;
        let mut out = Vec::new();
        for chunk in self.fresh.chunks(CHUNK) {
            let mut c = Cmd::new("EXISTS");
            for &n in chunk {
                c.arg(self.key_of(&self.items[n]).as_bytes());
            }
            out.push(c);
        }
        out
    }

    /// Takes step 3's replies; returns the TYPE commands still needed (the keys of EXISTS
    /// groups where some key exists), to be sent and given to
    /// [`ChunkPlan::take_fresh_types`].
    pub fn take_types(&mut self, replies: &[Reply]) -> Result<Vec<Cmd>, String> {
        let mut r = replies.iter();
        let mut again = Vec::new();
        let fresh = std::mem::take(&mut self.fresh);
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
        if replies.len() != again.len() {
            return Err("TYPE: as many replies as keys".into());
        }
        for (&n, r) in again.iter().zip(replies) {
            self.held[n] = held_of(Some(r), self.hash)?;
        }
        Ok(())
    }

    /// Step 4: MULTI, truncated rows sets set aside, effects, rows sets, offsets, EXEC.
    pub fn writes(&mut self) -> Vec<Cmd> {
        let mut out = vec![Cmd::new("MULTI")];
        let mut roles = Vec::new();
        let sweeps = sweeps_key(&self.prefix);
        for t in self.tables.iter().filter(|t| t.truncate > 0) {
            let mut c = Cmd::new("RENAME");
            c.arg(t.rows.as_bytes())
                .arg(truncated_key(&self.prefix, &t.suffix).as_bytes());
            out.push(c);
            roles.push(Role::Rename);
            let mut c = Cmd::new("SADD");
            c.arg(sweeps.as_bytes()).arg(t.suffix.as_bytes());
            out.push(c);
            roles.push(Role::Bulk);
        }
        let mut dels: Vec<usize> = Vec::new();
        let mut mset: Vec<usize> = Vec::new();
        // Per table: keys that join the rows set, keys that leave it.
        let mut adds: Vec<Vec<usize>> = vec![Vec::new(); self.tables.len()];
        let mut rems: Vec<Vec<usize>> = vec![Vec::new(); self.tables.len()];
        let mut singles = Vec::new();
        let winners: Vec<usize> = self.winning().map(|(n, _)| n).collect();
        for n in winners {
            let it = &self.items[n];
            let held = self.held[n];
            if let Held::Other(ty) = held {
                let why = format!(
                    "WRONGTYPE the key holds a {ty}; this sink writes a {}",
                    if self.hash { "hash" } else { "string" }
                );
                let field = self.field_of(n);
                self.rejected.push((self.items[n].change, why.clone()));
                self.refused_fields.push(field.clone());
                self.refusing.push((field, why));
                continue;
            }
            let table = &self.tables[it.table];
            // After a truncate in this chunk the rows set starts empty: every row written
            // joins it again.
            let known = held == Held::Member && table.truncate == 0;
            if self.invalidate {
                // The rows set holds the keys of the rows that exist (that the application
                // may have cached), for a truncate to invalidate.
                dels.push(n);
                if it.delete {
                    rems[it.table].push(n);
                } else {
                    adds[it.table].push(n);
                }
                continue;
            }
            match &it.what {
                What::Json(v) => {
                    if let Some(ms) = self.ttl_ms {
                        let mut c = Cmd::new("SET");
                        c.arg(self.key_of(it).as_bytes())
                            .arg(v)
                            .arg(b"PX")
                            .arg_u64(ms);
                        singles.push((c, it.change));
                    } else {
                        mset.push(n);
                    }
                    if !known {
                        adds[it.table].push(n);
                    }
                }
                What::Hash(fields) => {
                    if matches!(held, Held::Member | Held::Mine) {
                        dels.push(n);
                    }
                    if !fields.is_empty() {
                        let key = self.key_of(it).as_bytes();
                        let mut c = Cmd::new("HSET");
                        c.arg(key);
                        for (f, v) in fields {
                            c.arg(f.as_bytes()).arg(v);
                        }
                        singles.push((c, it.change));
                        if let Some(ms) = self.ttl_ms {
                            let mut c = Cmd::new("PEXPIRE");
                            c.arg(key).arg_u64(ms);
                            singles.push((c, it.change));
                        }
                        if !known {
                            adds[it.table].push(n);
                        }
                    } else if known {
                        // A row of only NULLs has no hash: it leaves the set.
                        rems[it.table].push(n);
                    }
                }
                What::Delete => {
                    if matches!(held, Held::Member | Held::Mine) {
                        dels.push(n);
                    }
                    if held == Held::Member {
                        rems[it.table].push(n);
                    }
                }
                What::Truncate => {}
            }
        }
        // Deletes first: a hash row is deleted before its new fields are set.
        for chunk in dels.chunks(CHUNK) {
            let mut c = Cmd::new("DEL");
            for &n in chunk {
                c.arg(self.key_of(&self.items[n]).as_bytes());
            }
            out.push(c);
            roles.push(Role::Bulk);
        }
        for chunk in mset.chunks(CHUNK) {
            let bytes = chunk
                .iter()
                .map(|&n| match &self.items[n].what {
                    What::Json(v) => v.len() + self.key_of(&self.items[n]).len() + 24,
                    _ => 0,
                })
                .sum();
            let mut c = Cmd::with_capacity("MSET", bytes);
            for &n in chunk {
                let it = &self.items[n];
                if let What::Json(v) = &it.what {
                    c.arg(self.key_of(it).as_bytes()).arg(v);
                }
            }
            out.push(c);
            roles.push(Role::Bulk);
        }
        for (c, change) in singles {
            out.push(c);
            roles.push(Role::Change(change));
        }
        for (t, table) in self.tables.iter().enumerate() {
            for (name, list) in [("SADD", &adds[t]), ("SREM", &rems[t])] {
                for chunk in list.chunks(CHUNK) {
                    let mut c = Cmd::new(name);
                    c.arg(table.rows.as_bytes());
                    for &n in chunk {
                        c.arg(self.key_of(&self.items[n]).as_bytes());
                    }
                    out.push(c);
                    roles.push(Role::Bulk);
                }
            }
        }
        // The refusals: recorded with the offsets that pass them, forgotten once their
        // dead letters are durable (see the module doc).
        let refused = refused_key(&self.prefix);
        if !self.forget.is_empty() {
            let mut c = Cmd::new("HDEL");
            c.arg(refused.as_bytes());
            for f in &self.forget {
                c.arg(f.as_bytes());
            }
            out.push(c);
            roles.push(Role::Bulk);
        }
        if !self.refusing.is_empty() {
            let mut c = Cmd::new("HSET");
            c.arg(refused.as_bytes());
            for (f, why) in &self.refusing {
                c.arg(f.as_bytes()).arg(why.as_bytes());
            }
            out.push(c);
            roles.push(Role::Bulk);
        }
        for hash in &self.hashes {
            let mut c = Cmd::new("HSET");
            c.arg(hash.as_bytes());
            for s in self.offsets.iter().filter(|s| s.hash == *hash) {
                if s.high > s.applied {
                    c.arg_u64(s.partition as u64).arg_u64(s.high);
                }
            }
            if c.args() > 2 {
                out.push(c);
                roles.push(Role::Bulk);
            }
        }
        out.push(Cmd::new("EXEC"));
        self.roles = roles;
        out
    }

    /// The truncated tables' suffixes, for their sweeps after the EXEC.
    pub fn truncates(&self) -> Vec<String> {
        self.truncated_suffixes().map(str::to_string).collect()
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
                            Role::Rename if e.contains("no such key") => {}
                            Role::Bulk | Role::Rename => return Exec::Failed(e.clone()),
                        }
                    }
                }
                Exec::Done
            }
            Some(Reply::Error(e)) => Exec::Failed(e.clone()),
            other => Exec::Failed(format!("EXEC: {other:?}")),
        }
    }

    /// Back to step 1 (the EXEC found a watched key changed).
    pub fn reset_for_retry(&mut self) {
        for t in &mut self.tables {
            t.member.iter_mut().for_each(|m| *m = false);
            t.absent.iter_mut().for_each(|m| *m = false);
            t.winners.iter_mut().for_each(|w| *w = None);
        }
        for h in &mut self.held {
            *h = Held::Unknown;
        }
        self.fresh.clear();
        self.pending_typed.clear();
        self.rejected.clear();
        self.refused_fields.clear();
        self.refusing.clear();
        self.stale_items.clear();
        self.checking_refused.clear();
        self.refused_waiting = 0;
        self.stale = 0;
        self.roles.clear();
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
            .ok_or_else(|| "an offset that is not a number".to_string()),
        Reply::Error(e) => Err(e.clone()),
        other => Err(format!("an offset: {other:?}")),
    }
}

fn held_of(r: Option<&Reply>, hash: bool) -> Result<Held, String> {
    match r {
        Some(Reply::Status(t)) => Ok(match t.as_str() {
            "none" => Held::Nothing,
            "hash" if hash => Held::Mine,
            "string" if !hash => Held::Mine,
            "string" => Held::Other("string"),
            "hash" => Held::Other("hash"),
            "list" => Held::Other("list"),
            "set" => Held::Other("set"),
            "zset" => Held::Other("zset"),
            "stream" => Held::Other("stream"),
            _ => Held::Other("value of another type"),
        }),
        Some(Reply::Error(e)) => Err(e.clone()),
        other => Err(format!("TYPE: {other:?}")),
    }
}
