//! The Lua scripts that apply changes in Redis, conditionally on their versions, and the
//! encoding of their arguments.
//!
//! # The versions hash
//!
//! Per table, `<prefix>:__cdc:v:<schema>.<table>` maps each row's Redis key (the field)
//! to the version ([`Change::version`](crate::Change::version)) of the last change applied
//! to it. A delete keeps its entry (a tombstone), so a replayed older insert cannot bring
//! the row back. Field `__truncated` holds the version of the table's latest truncate:
//! every change at or below it is ignored. A change is applied only when its version is
//! above both; the effect and the version entry are written by the same script call,
//! which Redis runs atomically, so they never disagree.
//!
//! # `APPLY` arguments (no KEYS; a standalone Redis or Valkey, not a cluster)
//!
//! ```text
//! ARGV[1]  flags: value kind 'j' (JSON string) | 'h' (hash), then mode 'u' (upsert) | 'i' (invalidate)
//! ARGV[2]  TTL in ms, "0" for none
//! then one section per table: its versions hash, the number of its changes, the changes:
//!   upsert:    "<version>", key, payload: JSON text ('j') | field count n, n field/value pairs ('h')
//!   delete:    "d<version>", key
//!   truncate:  "t<version>"  (sets the table's marker)
//! ```
//!
//! The changes are numbered 1, 2, … in argument order (the client keeps the map to its
//! batch). Within a call only the newest change of a key takes effect (the call is
//! atomic, so the others could never be seen; they count as stale). It returns
//! `{applied, stale, i1, err1, i2, err2, …}`: changes applied, changes ignored as older
//! than what the view holds or superseded in the call, and for each refused change its
//! number and the error (a key that holds another type: `WRONGTYPE`). An error about the
//! server's state (OOM, READONLY, …) aborts the call with that error: the client retries
//! the whole call (what the call applied before it is then ignored as stale).
//!
//! A key that holds a type the sink does not write (a JSON sink finding a hash) is never
//! touched: the change is refused and the rest of the call goes on. New JSON rows go in
//! one `MSETNX` per chunk (which sets nothing if any of its keys exists: then each row
//! goes on its own), known ones with `SET … GET` (which refuses another type); hashes and
//! deletes ask TYPE. An invalidating sink deletes whatever the key holds.
//!
//! Why the script looks the way it does: Redis spends most of a call converting
//! arguments between Redis and Lua, so versions are read with one HMGET and written with
//! one HSET per table and chunk, new rows are set with one MSETNX per chunk, and a change
//! costs three or four arguments.
//!
//! # `SWEEP` arguments (the second half of a truncate)
//!
//! `ARGV[1]` the versions hash, `ARGV[2]` the truncate's version, `ARGV[3..]` fields of
//! the hash (read by the client with HSCAN). Each row whose version is below the
//! truncate's is deleted with its entry (the marker covers it from now on).

/// Applies a batch of changes; see the module doc.
pub const APPLY: &str = r#"
local flags = ARGV[1]
local hash = string.sub(flags, 1, 1) == 'h'
local invalidate = string.sub(flags, 2, 2) == 'i'
local ttl = ARGV[2]
local has_ttl = ttl ~= '0'
local want = hash and 'hash' or 'string'
local transient = { OOM = true, READONLY = true, LOADING = true, BUSY = true,
  MASTERDOWN = true, TRYAGAIN = true, CLUSTERDOWN = true, NOREPLICAS = true, MISCONF = true }
local last = #ARGV
local vh, trunc = {}, {}
-- Per change: table, op (0 upsert, 1 delete, 2 truncate), version, its text, key,
-- payload start and end.
local ct, cop, cv, cvs, ck, cps, cpe = {}, {}, {}, {}, {}, {}, {}
local cur, known, win = {}, {}, {}
local n = 0
local i = 3
local nt = 0
-- Pass 1, per section: read the table's marker and its keys' versions (one HMGET per
-- chunk); set the marker from the section's truncates first, so that a change at or
-- below a truncate is ignored wherever it is in the call.
while i <= last do
  nt = nt + 1
  local t = nt
  vh[t] = ARGV[i]
  local cnt = tonumber(ARGV[i + 1])
  i = i + 2
  local tr = tonumber(redis.call('HGET', vh[t], '__truncated') or '0')
  local keys = {}
  for _ = 1, cnt do
    n = n + 1
    ct[n] = t
    local vs = ARGV[i]
    local b = string.byte(vs)
    if b == 116 then
      cop[n] = 2
      vs = string.sub(vs, 2)
      local v = tonumber(vs)
      cv[n], cvs[n] = v, vs
      if v > tr then
        tr = v
        redis.call('HSET', vh[t], '__truncated', vs)
      end
      i = i + 1
    else
      if b == 100 then
        cop[n] = 1
        vs = string.sub(vs, 2)
      else
        cop[n] = 0
      end
      cv[n], cvs[n] = tonumber(vs), vs
      local k = ARGV[i + 1]
      ck[n] = k
      keys[#keys + 1] = k
      i = i + 2
      if cop[n] == 0 then
        if hash then
          local c = tonumber(ARGV[i])
          cps[n], cpe[n] = i + 1, i + 2 * c
          i = i + 1 + 2 * c
        else
          cps[n] = i
          i = i + 1
        end
      end
    end
  end
  trunc[t] = tr
  local c, kn = {}, {}
  local at = 1
  while at <= #keys do
    local e = math.min(at + 999, #keys)
    local vs = redis.call('HMGET', vh[t], unpack(keys, at, e))
    for j = at, e do
      local v = vs[j - at + 1]
      if v then
        c[keys[j]] = tonumber(v)
        kn[keys[j]] = true
      else
        c[keys[j]] = 0
      end
    end
    at = e + 1
  end
  cur[t], known[t], win[t] = c, kn, {}
end
-- Pass 2: the change that wins per key (the newest above the key's version and the
-- table's truncate); the others are stale or superseded within the call (the call is
-- atomic, so only the winner's effect can be seen).
local applied, stale = 0, 0
for m = 1, n do
  local t = ct[m]
  if cop[m] == 2 then
    applied = applied + 1
  else
    local k, v = ck[m], cv[m]
    if v <= cur[t][k] or v <= trunc[t] then
      stale = stale + 1
    else
      cur[t][k] = v
      win[t][k] = m
    end
  end
end
-- Pass 3: the winners' effects. A failed command refuses its change, unless the error
-- is about the server (then the whole call fails and is retried).
local out = { 0, 0 }
local pend = {}
for t = 1, nt do pend[t] = {} end
local function done(m, r)
  if type(r) == 'table' and r.err then
    local code = string.match(r.err, '^(%u+)')
    if code and transient[code] then
      return redis.error_reply(r.err)
    end
    out[#out + 1] = m
    out[#out + 1] = r.err
  else
    local p = pend[ct[m]]
    p[#p + 1] = ck[m]
    p[#p + 1] = cvs[m]
    applied = applied + 1
  end
  return nil
end
local fresh = {}
for m = 1, n do
  local t, k = ct[m], ck[m]
  if cop[m] ~= 2 and win[t][k] == m then
    local r
    local later = false
    if invalidate then
      r = redis.pcall('DEL', k)
    elseif cop[m] == 0 and not hash then
      if not known[t][k] and not has_ttl then
        -- A key the sink never wrote: set in bulk below.
        fresh[#fresh + 1] = m
        later = true
      elseif has_ttl then
        -- SET … GET refuses (WRONGTYPE) a key that holds another type, and sets nothing.
        r = redis.pcall('SET', k, ARGV[cps[m]], 'PX', ttl, 'GET')
      else
        r = redis.pcall('SET', k, ARGV[cps[m]], 'GET')
      end
    else
      local ty = redis.call('TYPE', k)['ok']
      if ty ~= 'none' and ty ~= want then
        r = { err = 'WRONGTYPE the key holds a ' .. ty .. '; this sink writes a ' .. want }
      elseif cop[m] == 0 then
        if ty ~= 'none' then redis.call('DEL', k) end
        if cpe[m] >= cps[m] then
          r = redis.pcall('HSET', k, unpack(ARGV, cps[m], cpe[m]))
          if not (type(r) == 'table' and r.err) and has_ttl then
            r = redis.pcall('PEXPIRE', k, ttl)
          end
        end
      else
        r = redis.pcall('DEL', k)
      end
    end
    if not later then
      local e = done(m, r)
      if e then return e end
    end
  end
end
-- New JSON rows: MSETNX sets a chunk when none of its keys exists (the usual case);
-- otherwise each goes on its own, refused if its key holds another type.
local at = 1
while at <= #fresh do
  local e = math.min(at + 499, #fresh)
  local kv = {}
  for j = at, e do
    local m = fresh[j]
    kv[#kv + 1] = ck[m]
    kv[#kv + 1] = ARGV[cps[m]]
  end
  if redis.call('MSETNX', unpack(kv)) == 1 then
    for j = at, e do done(fresh[j], nil) end
  else
    for j = at, e do
      local m = fresh[j]
      local err = done(m, redis.pcall('SET', ck[m], ARGV[cps[m]], 'GET'))
      if err then return err end
    end
  end
  at = e + 1
end
for t = 1, nt do
  local p = pend[t]
  local at = 1
  while at <= #p do
    local e = math.min(at + 999, #p)
    redis.call('HSET', vh[t], unpack(p, at, e))
    at = e + 1
  end
end
out[1] = applied
out[2] = stale
return out
"#;

/// Deletes a truncated table's rows older than the truncate; see the module doc.
pub const SWEEP: &str = r#"
local vh = ARGV[1]
local tv = tonumber(ARGV[2])
local deleted = 0
for i = 3, #ARGV do
  local f = ARGV[i]
  if f ~= '__truncated' then
    local v = tonumber(redis.call('HGET', vh, f) or 'nil')
    if v and v < tv then
      redis.call('DEL', f)
      redis.call('HDEL', vh, f)
      deleted = deleted + 1
    end
  end
end
return deleted
"#;
