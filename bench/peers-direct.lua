-- wrk script for bench/peers.sh, straight to the origin: with BENCH_UNIQUE=1
-- every request gets a new query string, tagged with BENCH_RUN.
local run = os.getenv("BENCH_RUN") or ""
local counter = 0
function request()
  counter = counter + 1
  return wrk.format("GET", wrk.path .. "?d=" .. run .. "-" .. tostring(counter))
end
