-- wrk script for bench/peers.sh: absolute-form requests through a forward
-- proxy. BENCH_TARGET is the URL; with BENCH_UNIQUE=1 every request gets a
-- new query string (every URL new to the proxy), tagged with BENCH_RUN so
-- that runs with different tags share no URL and a run with the same tag
-- asks for the same URLs in the same order.
local target = os.getenv("BENCH_TARGET")
if target == nil or target == "" then
  error("peers.lua: set BENCH_TARGET to an absolute http:// URL")
end
local authority = target:match("^http://([^/]+)")
local unique = os.getenv("BENCH_UNIQUE") == "1"
local run = os.getenv("BENCH_RUN") or ""
local counter = 0
local thread_id = 0

function setup(thread)
  thread_id = thread_id + 1
  thread:set("id", thread_id)
end

function request()
  local path = target
  if unique then
    counter = counter + 1
    path = target .. "?t=" .. run .. "-" .. tostring(id) .. "-" .. tostring(counter)
  end
  return wrk.format("GET", path, { ["Host"] = authority })
end
