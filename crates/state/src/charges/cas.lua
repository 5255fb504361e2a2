-- One change of the cluster's payment ledger: compare-and-set.
--
-- KEYS[1]  the ledger (JSON)
-- ARGV[1]  the ledger bytes the caller changed ('' = none yet)
-- ARGV[2]  the changed ledger
-- ARGV[3]  TTL, seconds
--
-- Returns {1} when the caller's copy was current and the change is stored,
-- else {0, current} for the caller to apply its change to again.
local cur = redis.call('GET', KEYS[1])
if not cur then cur = '' end
if cur ~= ARGV[1] then
  return {0, cur}
end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
return {1}
