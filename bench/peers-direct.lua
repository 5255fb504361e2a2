-- wrk script for bench/peers.sh, straight to the origin: with BENCH_UNIQUE=1
-- every request gets a new query string.
local counter = 0
function request()
  counter = counter + 1
  return wrk.format("GET", wrk.path .. "?d=" .. tostring(counter))
end
