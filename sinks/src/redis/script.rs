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
//! ARGV[3]  T, the number of versions hashes; ARGV[4 .. 3+T] their names
//! then per change:
//!   table index (1-based), op, version, key, payload
//!   op 'u' (upsert): payload = JSON text ('j') | field count n, then n field/value pairs ('h')
//!   op 'd' (delete): no payload
//!   op 't' (truncate: set the table's marker; the key is ignored): no payload
//! ```
//!
//! It returns `{applied, stale, i1, err1, i2, err2, …}`: changes applied, changes ignored
//! as older than what the view holds, and for each refused change its 1-based index in
//! the call and the error (a key that holds another type: `WRONGTYPE`). An error about
//! the server's state (OOM, READONLY, …) aborts the call with that error: the client
//! retries the whole call (what the call applied before it is then ignored as stale).
//!
//! A key that holds a type the sink does not write (a JSON sink finding a hash) is never
//! touched: the change is refused and the rest of the call goes on.
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
local nt = tonumber(ARGV[3])
local want = hash and 'hash' or 'string'
local vh, trunc, seen, pend = {}, {}, {}, {}
for t = 1, nt do
  vh[t] = ARGV[3 + t]
  trunc[t] = tonumber(redis.call('HGET', vh[t], '__truncated') or '0')
  seen[t] = {}
  pend[t] = {}
end
local transient = { OOM = true, READONLY = true, LOADING = true, BUSY = true,
  MASTERDOWN = true, TRYAGAIN = true, CLUSTERDOWN = true, NOREPLICAS = true, MISCONF = true }
local applied, stale = 0, 0
local out = { 0, 0 }
-- An error of one change: refused, unless it is about the server (then the call fails).
local function failed(n, r)
  local e = r.err or tostring(r)
  local code = string.match(e, '^(%u+)')
  if code and transient[code] then
    return redis.error_reply(e)
  end
  out[#out + 1] = n
  out[#out + 1] = e
  return nil
end
local i = 4 + nt
local n = 0
local last = #ARGV
while i <= last do
  n = n + 1
  local t = tonumber(ARGV[i])
  local op = ARGV[i + 1]
  local vs = ARGV[i + 2]
  local v = tonumber(vs)
  local k = ARGV[i + 3]
  i = i + 4
  local ps, pe = i, i - 1
  if op == 'u' then
    if hash then
      local c = tonumber(ARGV[i])
      ps, pe = i + 1, i + 2 * c
      i = i + 1 + 2 * c
    else
      ps, pe = i, i
      i = i + 1
    end
  end
  if op == 't' then
    if v > trunc[t] then
      trunc[t] = v
      redis.call('HSET', vh[t], '__truncated', vs)
    end
    applied = applied + 1
  else
    local cur = seen[t][k]
    if cur == nil then
      cur = tonumber(redis.call('HGET', vh[t], k) or '0')
    end
    if v <= cur or v <= trunc[t] then
      stale = stale + 1
    else
      local ok = true
      if not invalidate then
        local ty = redis.call('TYPE', k)['ok']
        if ty ~= 'none' and ty ~= want then
          ok = false
          out[#out + 1] = n
          out[#out + 1] = 'WRONGTYPE the key holds a ' .. ty .. ', this sink writes a ' .. want .. ': change not applied'
        end
      end
      if ok then
        local r
        if op == 'u' and not invalidate then
          if hash then
            redis.call('DEL', k)
            if pe >= ps then
              r = redis.pcall('HSET', k, unpack(ARGV, ps, pe))
              if not (type(r) == 'table' and r.err) and has_ttl then
                r = redis.pcall('PEXPIRE', k, ttl)
              end
            end
          elseif has_ttl then
            r = redis.pcall('SET', k, ARGV[ps], 'PX', ttl)
          else
            r = redis.pcall('SET', k, ARGV[ps])
          end
        else
          r = redis.pcall('DEL', k)
        end
        if type(r) == 'table' and r.err then
          local e = failed(n, r)
          if e then
            return e
          end
        else
          seen[t][k] = v
          local p = pend[t]
          p[#p + 1] = k
          p[#p + 1] = vs
          applied = applied + 1
        end
      end
    end
  end
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
