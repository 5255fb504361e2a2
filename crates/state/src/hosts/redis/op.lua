-- One operation on one host's shared budget, atomically: compare-and-set of
-- the encoded budget, and the host's concurrency leases.
--
-- KEYS[1]  budget: the encoded HostBudget (a string)
-- KEYS[2]  leases: sorted set, lease id -> expiry (Redis server ms)
-- ARGV[1]  budget bytes the caller decided on ('' = no budget yet)
-- ARGV[2]  live leases the caller decided on (after its own release)
-- ARGV[3]  new budget bytes ('' = unchanged, nothing to write)
-- ARGV[4]  budget TTL, ms
-- ARGV[5]  lease action: '+' take ARGV[6], '-' release ARGV[6], '' none
-- ARGV[6]  lease id
-- ARGV[7]  lease TTL, ms
-- ARGV[8]  the host's wake-up channel: told when a lease is given back
--
-- Returns {1, leases} when the caller's view was current and its decision
-- is now stored, else {0, leases, current budget} for the caller to decide
-- again. Expiry uses the server's clock, the one clock all proxies share.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if ARGV[5] == '-' then
  -- A release stands even when the decision must be made again. Only the
  -- round that removes the lease tells the other proxies' waiters.
  if redis.call('ZREM', KEYS[2], ARGV[6]) == 1 then
    redis.call('PUBLISH', ARGV[8], '')
  end
end
local n = redis.call('ZCARD', KEYS[2])
local cur = redis.call('GET', KEYS[1])
if not cur then cur = '' end
if cur ~= ARGV[1] or n ~= tonumber(ARGV[2]) then
  return {0, n, cur}
end
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
end
if ARGV[5] == '+' then
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[7]), ARGV[6])
  redis.call('PEXPIRE', KEYS[2], ARGV[7])
  n = n + 1
end
return {1, n}
