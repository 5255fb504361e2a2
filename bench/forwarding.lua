-- wrk script for bench/forwarding.sh: send absolute-form requests
-- ("GET http://origin/page HTTP/1.1"), as a client does to a forward proxy.
-- wrk itself connects to the address on its command line (the proxy).
--
--   BENCH_TARGET=http://127.0.0.1:18080/page wrk -s bench/forwarding.lua http://127.0.0.1:18128

local target = os.getenv("BENCH_TARGET")
if target == nil or target == "" then
  error("forwarding.lua: set BENCH_TARGET to an absolute URL, e.g. http://127.0.0.1:18080/page")
end
local authority = target:match("^http://([^/]+)")
if authority == nil then
  error("forwarding.lua: BENCH_TARGET must be an http:// URL, got " .. target)
end

wrk.method = "GET"
wrk.path = target
-- Host names the origin, not the proxy (wrk would default it to the proxy).
wrk.headers["Host"] = authority
