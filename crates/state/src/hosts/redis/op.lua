-- One operation on one host's shared budget, atomically: compare-and-set of
-- the encoded budget, and the host's concurrency leases.
--
-- KEYS[1]  budget: the encoded HostBudget (a string)
-- KEYS[2]  leases: sorted set, lease id -> expiry (Redis server ms)
-- KEYS[3]  callers: the instance id of the only proxy that called within
--          ARGV[11], or '*' once another one did too (a string)
-- ARGV[1]  budget bytes the caller decided on ('' = no budget yet)
-- ARGV[2]  live leases the caller decided on (after its own release);
--          '' when its decision does not depend on them
-- ARGV[3]  new budget bytes ('' = unchanged, nothing to write)
-- ARGV[4]  budget TTL, ms
-- ARGV[5]  lease action: '+' take ARGV[6], '-' release ARGV[6], '' none
-- ARGV[6]  lease id
-- ARGV[7]  lease TTL, ms
-- ARGV[8]  the host's channel: told of every change (see below)
-- ARGV[9]  the caller's instance id, named in what it tells
-- ARGV[10] 'r' when the decision ends a pause early (an operator's reset),
--          else ''
-- ARGV[11] how long a caller counts as sharing the host, ms
-- ARGV[12] 's' on a Redis Cluster: sharded pub/sub (SPUBLISH), else ''
-- ARGV[13] '1' when the caller itself listens on ARGV[8], else '0'
--
-- Returns {1, leases, version, shared} when the caller's view was current
-- and its decision is now stored, else {0, leases, current budget, version,
-- shared} for the caller to decide again; shared is 1 when another proxy
-- called the host within ARGV[11]. `version` is the server's time in microseconds
-- (a string): the copy answered is at least that new. Expiry uses the
-- server's clock, the one clock all proxies share.
--
-- Every change (a write, a lease taken or given back) of a host that
-- more than one proxy called since it last went ARGV[11] without a call
-- is published on ARGV[8] as
-- "<kind> <version> <leases> <instance>\n<budget bytes>", so that the
-- proxies sharing it keep a current copy without asking: kind holds '-'
-- when a lease was given back (a concurrency waiter may go), 'r' as
-- ARGV[10], '.' for neither. A release and an early end of a pause are
-- published whoever called: a waiter elsewhere may sleep longer than
-- ARGV[11]. A host one proxy drives alone publishes nothing else.
-- Nothing is published unless another proxy listens on the channel (a
-- proxy listens only while it waits on the host, or shares it): the
-- message would reach no one. A proxy of the earlier scheme listens by
-- pattern on a single node; while one does (NUMPAT), every change is
-- published plainly as before, so a rolling upgrade loses no wake-up.
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
local function tell(kind)
  local msg = kind .. ' ' .. version .. ' ' .. n .. ' ' .. ARGV[9] .. '\n' .. cur
  local me = tonumber(ARGV[13]) or 0
  if ARGV[12] == 's' then
    if redis.call('PUBSUB', 'SHARDNUMSUB', ARGV[8])[2] > me then
      redis.call('SPUBLISH', ARGV[8], msg)
    end
  elseif redis.call('PUBSUB', 'NUMSUB', ARGV[8])[2] > me
      or redis.call('PUBSUB', 'NUMPAT') > 0 then
    redis.call('PUBLISH', ARGV[8], msg)
  end
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
local kind = (released and '-' or '') .. ARGV[10]
if kind ~= '' or (shared and (wrote or took)) then
  if kind == '' then kind = '.' end
  tell(kind)
end
return {1, n, version, others}
