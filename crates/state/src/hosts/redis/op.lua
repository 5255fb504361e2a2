-- One operation on one host's shared budget, atomically: compare-and-set of
-- the encoded budget, and the host's concurrency leases.
--
-- KEYS[1]  budget: the encoded HostBudget (a string)
-- KEYS[2]  leases: sorted set, lease id -> expiry (Redis server ms)
-- KEYS[3]  callers: the instance id of the only proxy that called within
--          ARGV[11], or '*' once another one did too (a string)
-- KEYS[4]  slot waiters: sorted set, instance id -> server ms, of the
--          proxies waiting for a concurrency slot of the host
-- KEYS[5]  time waiters: sorted set, instance id -> server ms at which
--          the proxy's next request's slot comes (it acts then)
-- ARGV[1]  budget bytes the caller decided on ('' = no budget yet)
-- ARGV[2]  live leases the caller decided on (after its own release);
--          '' when its decision does not depend on them
-- ARGV[3]  new budget bytes ('' = unchanged, nothing to write)
-- ARGV[4]  budget TTL, ms
-- ARGV[5]  lease action: '+' take ARGV[6], '-' release ARGV[6], '' none
-- ARGV[6]  lease id
-- ARGV[7]  lease TTL, ms
-- ARGV[8]  the host's channel, where proxies of the earlier schemes listen
-- ARGV[9]  the caller's instance id, named in what it tells
-- ARGV[10] 'r' when the decision ends a pause early (an operator's reset),
--          else ''
-- ARGV[11] how long a caller counts as sharing the host, ms
-- ARGV[12] 's' on a Redis Cluster: sharded pub/sub (SPUBLISH), else ''
-- ARGV[13] the start of each proxy's own channel for the host: the
--          instance id appended names it
-- ARGV[14] what the caller's request at the head of its line does now:
--          'c' waits for a concurrency slot, 't<ms>' waits ms for its
--          slot's time, 'x' neither (it went, or gave up), '' unchanged
--          (a response: the request in line is another one)
--
-- Returns {1, leases, version, shared} when the caller's view was current
-- and its decision is now stored, else {0, leases, current budget, version,
-- shared} for the caller to decide again; shared is 1 when another proxy
-- called the host within ARGV[11]. `version` is the server's time in microseconds
-- (a string): the copy answered is at least that new. Expiry uses the
-- server's clock, the one clock all proxies share.
--
-- A change is told, as "<kind> <version> <leases> <instance>\n<budget
-- bytes>", to one proxy only: the one that acts on it next. A waiter
-- registers in the call that told it to wait (ARGV[14], no round trip of
-- its own), on the budget's slot as its other keys. A lease given back
-- (kind '-') goes to the earliest slot waiter, taken out of KEYS[4] as it
-- goes to look (it registers again if it still has to wait). Any other
-- change (a write, a lease taken) of a host another proxy called within
-- ARGV[11] goes, kind '.', to the waiter that acts first (slot waiters
-- before time waiters, then by time), which keeps it registered: its copy
-- stays current until its step, which is then stored in one round. A
-- lease given back with no slot waiter is such a change. The other
-- proxies' copies fall behind: their next step loses one compare-and-set
-- and decides again on the copy it is answered. An early end of a pause
-- (kind 'r') goes to every waiter: each may go sooner (rare, an operator's
-- reset). Nothing is told to the caller, nor to a waiter that does not
-- listen on its channel now: that one is dropped from the set (it looks
-- again by itself) and the next is tried. A waiter that went away stays
-- in its set until 3 s after its time and no longer: slot waiters look
-- again, and register again, every second. (One that went away while
-- its proxy still listens, for up to the subscriber's linger, may take a
-- release with it: the next waiter finds the slot at its own look.)
--
-- Proxies of the earlier schemes listen on the host's channel (ARGV[8]):
-- while one does (NUMSUB there, or NUMPAT for the first scheme's pattern
-- on a single node), every change is also published there as that scheme
-- did, so a rolling upgrade leaves them waking as before. A proxy of this
-- scheme hears an earlier proxy's release by its next look (see
-- docs/cluster.md, "Upgrading").
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local version = t[1] .. string.format('%06d', tonumber(t[2]))
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local caller = redis.call('GET', KEYS[3])
local shared = caller and caller ~= ARGV[9]
redis.call('SET', KEYS[3], shared and '*' or ARGV[9], 'PX', ARGV[11])
-- A release stands even when the decision must be made again.
local released = ARGV[5] == '-' and redis.call('ZREM', KEYS[2], ARGV[6]) == 1
local n = redis.call('ZCARD', KEYS[2])
local cur = redis.call('GET', KEYS[1])
if not cur then cur = '' end
local sharded = ARGV[12] == 's'
local function listened(chan)
  if sharded then
    return redis.call('PUBSUB', 'SHARDNUMSUB', chan)[2] > 0
  end
  return redis.call('PUBSUB', 'NUMSUB', chan)[2] > 0
end
local function publish(chan, msg)
  if sharded then
    redis.call('SPUBLISH', chan, msg)
  else
    redis.call('PUBLISH', chan, msg)
  end
end
-- The earliest waiter of `set` other than the caller that listens, and
-- its time; those that do not listen are dropped on the way (a few).
local function earliest(set)
  redis.call('ZREMRANGEBYSCORE', set, '-inf', now - 3000)
  for _ = 1, 3 do
    local head = redis.call('ZRANGE', set, 0, 1, 'WITHSCORES')
    local who, at = head[1], head[2]
    if who == ARGV[9] then who, at = head[3], head[4] end
    if not who then return nil end
    if listened(ARGV[13] .. who) then return who, tonumber(at) end
    redis.call('ZREM', set, who)
  end
  return nil
end
local function message(kind)
  return kind .. ' ' .. version .. ' ' .. n .. ' ' .. ARGV[9] .. '\n' .. cur
end
-- The earlier schemes' listeners, on the host's channel.
local function tell_earlier(kind)
  if sharded then
    if listened(ARGV[8]) then redis.call('SPUBLISH', ARGV[8], message(kind)) end
  elseif listened(ARGV[8]) or redis.call('PUBSUB', 'NUMPAT') > 0 then
    redis.call('PUBLISH', ARGV[8], message(kind))
  end
end
local function tell(kind)
  if kind ~= '.' or shared then tell_earlier(kind) end
  if string.find(kind, 'r', 1, true) then
    for _, set in ipairs({KEYS[4], KEYS[5]}) do
      redis.call('ZREMRANGEBYSCORE', set, '-inf', now - 3000)
      for _, who in ipairs(redis.call('ZRANGE', set, 0, -1)) do
        if who ~= ARGV[9] and listened(ARGV[13] .. who) then
          publish(ARGV[13] .. who, message(kind))
        end
      end
    end
    return
  end
  if kind == '-' then
    local who = earliest(KEYS[4])
    if who then
      redis.call('ZREM', KEYS[4], who)
      publish(ARGV[13] .. who, message(kind))
      return
    end
  end
  if not shared then return end
  local who = earliest(KEYS[4])
  if not who then who = earliest(KEYS[5]) end
  if who then publish(ARGV[13] .. who, message('.')) end
end
-- The caller's request at the head of its line waits (or no longer does).
local function register(wait)
  if wait == '' then return end
  local first = string.sub(wait, 1, 1)
  if first == 'x' then
    redis.call('ZREM', KEYS[4], ARGV[9])
    redis.call('ZREM', KEYS[5], ARGV[9])
    return
  end
  local set, other, at = KEYS[4], KEYS[5], now
  if first == 't' then
    set, other, at = KEYS[5], KEYS[4], now + (tonumber(string.sub(wait, 2)) or 0)
  end
  redis.call('ZADD', set, at, ARGV[9])
  redis.call('ZREM', other, ARGV[9])
  local keep = at - now + 3000
  if redis.call('PTTL', set) < keep then redis.call('PEXPIRE', set, keep) end
end
local others = shared and 1 or 0
if cur ~= ARGV[1] or (ARGV[2] ~= '' and n ~= tonumber(ARGV[2])) then
  if released then tell('-') end
  return {0, n, cur, version, others}
end
local wrote = ARGV[3] ~= ''
if wrote then
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
  cur = ARGV[3]
end
local took = ARGV[5] == '+'
if took then
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[7]), ARGV[6])
  redis.call('PEXPIRE', KEYS[2], ARGV[7])
  n = n + 1
end
register(ARGV[14])
local kind = (released and '-' or '') .. ARGV[10]
if kind ~= '' or wrote or took then
  if kind == '' then kind = '.' end
  tell(kind)
end
return {1, n, version, others}
