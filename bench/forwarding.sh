#!/usr/bin/env bash
# Plain-HTTP forwarding benchmark: throughput and p99 latency through the
# proxy vs straight to the origin, 1 KiB bodies, 32 connections (wrk).
#
#   bench/forwarding.sh
#
# Builds release binaries, starts bench_origin and `mannerly run` on loopback,
# runs wrk against each, prints req/s, p99 and the proxied/direct ratios, then
# checks the proxied run: no non-2xx responses, no socket errors, one `fetched`
# audit line per request, audit chain intact. Exit 0 only if all checks pass.
#
# Environment (all optional):
#   BENCH_ORIGIN_PORT  origin port on 127.0.0.1 (default 18080)
#   BENCH_PROXY_PORT   proxy port on 127.0.0.1  (default 18128)
#   BENCH_DURATION     seconds per wrk run       (default 15)
#   BENCH_CONNECTIONS  wrk connections           (default 32)
#   BENCH_THREADS      wrk threads               (default 2)
#   BENCH_SKIP_BUILD=1 use the binaries already in the target dir
#   BENCH_KEEP=1       keep the work dir (wrk output, audit log, proxy log)
#   BENCH_ENFORCE=1    run the proxy in enforce mode with the per-host budget
#                      opened to its limits instead of observe mode (see below)
#
# Mode. By default the proxy runs in observe mode (MANNERLY_POLICY__ENFORCE=
# false): every step of the forwarding path runs (intake, target guard,
# robots.txt lookup, upstream pool, hash-chained audit line per request) but
# the per-host budget does not hold requests. That is on purpose: the budget
# exists to keep one host at a polite rate (8 requests/s by default), so with
# it enforced this benchmark would measure the budget, not forwarding.
# BENCH_ENFORCE=1 measures enforce mode with the budget at its most generous
# settings; the rate slots are whole milliseconds, so one host then tops out
# near 1000 requests/s.
#
# Installs nothing. Needs wrk (Debian: apt-get install -y wrk) and curl.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
ORIGIN_PORT=${BENCH_ORIGIN_PORT:-18080}
PROXY_PORT=${BENCH_PROXY_PORT:-18128}
DURATION=${BENCH_DURATION:-15}
CONNS=${BENCH_CONNECTIONS:-32}
THREADS=${BENCH_THREADS:-2}
ORIGIN=127.0.0.1:$ORIGIN_PORT
PROXY=127.0.0.1:$PROXY_PORT
TARGET_URL=http://$ORIGIN/page

die() { echo "forwarding.sh: $*" >&2; exit 1; }

command -v wrk >/dev/null || die "wrk not found; install it: apt-get install -y wrk"
command -v curl >/dev/null || die "curl not found; install it: apt-get install -y curl"
[[ $DURATION =~ ^[0-9]+$ && $DURATION -ge 1 && $DURATION -le 300 ]] \
  || die "BENCH_DURATION must be 1..300 seconds, got $DURATION"
[[ $CONNS =~ ^[0-9]+$ && $CONNS -ge 1 && $THREADS =~ ^[0-9]+$ && $THREADS -ge 1 && $CONNS -ge $THREADS ]] \
  || die "need BENCH_CONNECTIONS >= BENCH_THREADS >= 1"

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port_in_use "$ORIGIN_PORT" && die "127.0.0.1:$ORIGIN_PORT is in use; set BENCH_ORIGIN_PORT"
port_in_use "$PROXY_PORT" && die "127.0.0.1:$PROXY_PORT is in use; set BENCH_PROXY_PORT"

if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
  echo "== building (release)"
  (cd "$ROOT" && cargo build --release --bin mannerly --example bench_origin)
fi
MANNERLY=$TARGET_DIR/release/mannerly
ORIGIN_BIN=$TARGET_DIR/release/examples/bench_origin
[[ -x $MANNERLY && -x $ORIGIN_BIN ]] || die "binaries missing under $TARGET_DIR/release"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/mannerly-bench.XXXXXX")
ORIGIN_PID=
PROXY_PID=
stop() { # pid: SIGTERM, wait up to 15 s, then SIGKILL
  local pid=$1 i
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  stop "$PROXY_PID"
  stop "$ORIGIN_PID"
  [[ -n ${BENCH_KEEP:-} ]] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_for() { # description, command...: retry for up to 10 s
  local what=$1 i; shift
  for i in $(seq 100); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "$what did not come up; logs in $WORK"
}

echo "== origin on $ORIGIN, proxy on $PROXY, work dir $WORK"
"$ORIGIN_BIN" "$ORIGIN" 2>"$WORK/origin.log" &
ORIGIN_PID=$!
mkdir "$WORK/data"
AUDIT=$WORK/audit.jsonl
if [[ ${BENCH_ENFORCE:-0} == 1 ]]; then
  MODE="enforce, budget opened wide"
  export MANNERLY_POLICY__ENFORCE=true MANNERLY_BUDGET__START_RATE=4000 \
    MANNERLY_BUDGET__MAX_RATE=4000 MANNERLY_BUDGET__BURST=1000 \
    MANNERLY_BUDGET__CONCURRENCY=10000 MANNERLY_BUDGET__QUEUE_LIMIT=100000
else
  MODE="observe (budget not applied)"
  export MANNERLY_POLICY__ENFORCE=false
fi
echo "== proxy mode: $MODE"
MANNERLY_DATA_DIR=$WORK/data \
MANNERLY_PROXY__LISTEN=$PROXY \
MANNERLY_UPSTREAM__ALLOW_PRIVATE=true \
MANNERLY_AUDIT__PATH=$AUDIT \
  "$MANNERLY" run 2>"$WORK/proxy.log" &
PROXY_PID=$!

wait_for "origin" curl -fsS -o /dev/null "http://$ORIGIN/page"
wait_for "proxy" port_in_use "$PROXY_PORT"
# One request through the proxy before timing: it must be 200 with the 1 KiB
# body (this also fetches robots.txt, outside the measured run).
check=$(curl -sS --max-time 10 -x "http://$PROXY" -o "$WORK/check.body" -w '%{http_code}' "$TARGET_URL") \
  || die "request through the proxy failed; see $WORK/proxy.log"
[[ $check == 200 ]] || die "request through the proxy answered $check, not 200"
[[ $(wc -c <"$WORK/check.body") -eq 1024 ]] || die "proxied body is not 1024 bytes"

run_wrk() { # name, extra wrk args...
  local name=$1; shift
  echo "== wrk $name: -t$THREADS -c$CONNS -d${DURATION}s"
  timeout $((DURATION + 60)) wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --timeout 10s --latency "$@" \
    | tee "$WORK/wrk-$name.txt"
}
run_wrk direct "$TARGET_URL"
BENCH_TARGET=$TARGET_URL run_wrk proxied -s "$ROOT/bench/forwarding.lua" "http://$PROXY"

# Stop the proxy now so the audit writer flushes before we count.
stop "$PROXY_PID"
PROXY_PID=

# Figures from wrk output. Latencies normalised to milliseconds.
rps()   { awk '/^Requests\/sec:/ {print $2}' "$WORK/wrk-$1.txt"; }
p99ms() { awk '$1 == "99%" {
            v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
            m = (u == "us") ? 0.001 : (u == "ms") ? 1 : (u == "s") ? 1000 : (u == "m") ? 60000 : -1
            if (m < 0) { print "?"; exit } printf "%.3f\n", v * m }' "$WORK/wrk-$1.txt"; }
reqs()  { awk '/ requests in / {print $1}' "$WORK/wrk-$1.txt"; }
non2xx(){ awk -F: '/Non-2xx or 3xx responses/ {gsub(/ /, "", $2); print $2}' "$WORK/wrk-$1.txt" | grep . || echo 0; }
sockerr(){ grep -q 'Socket errors' "$WORK/wrk-$1.txt" && grep 'Socket errors' "$WORK/wrk-$1.txt" | sed 's/^ *//' || echo none; }

D_RPS=$(rps direct);  P_RPS=$(rps proxied)
D_P99=$(p99ms direct); P_P99=$(p99ms proxied)
[[ -n $D_RPS && -n $P_RPS && -n $D_P99 && -n $P_P99 ]] || die "could not parse wrk output (in $WORK)"
P_REQS=$(reqs proxied)
P_NON2XX=$(non2xx proxied)
D_NON2XX=$(non2xx direct)
FETCHED=$(grep -c '"outcome":"fetched"' "$AUDIT" || true)
ROBOTS=$(grep -c '"outcome":"robots_fetched"' "$AUDIT" || true)
TOTAL_LINES=$(wc -l <"$AUDIT")

echo
echo "== results ($CONNS connections, $THREADS wrk threads, ${DURATION}s, 1 KiB bodies, $(nproc) CPUs, proxy: $MODE)"
printf '%-9s %12s %10s\n' "" "req/s" "p99 (ms)"
printf '%-9s %12s %10s\n' direct "$D_RPS" "$D_P99"
printf '%-9s %12s %10s\n' proxied "$P_RPS" "$P_P99"
awk -v dr="$D_RPS" -v pr="$P_RPS" -v dl="$D_P99" -v pl="$P_P99" 'BEGIN {
  printf "ratio     throughput proxied/direct = %.3f, p99 proxied/direct = %.2fx\n", pr / dr, pl / dl }'
echo
echo "proxied: $P_REQS requests completed, non-2xx/3xx: $P_NON2XX, socket errors: $(sockerr proxied)"
echo "direct:  $(reqs direct) requests completed, non-2xx/3xx: $D_NON2XX, socket errors: $(sockerr direct)"
# wrk counts completed responses; requests still in flight when it stops were
# forwarded (and audited) but not counted, so up to $CONNS extra are expected.
# The +1 is the curl check above.
echo "audit:   $TOTAL_LINES lines, fetched: $FETCHED (expected $((P_REQS + 1))..$((P_REQS + 1 + CONNS))), robots_fetched: $ROBOTS"

fail=0
[[ $P_NON2XX == 0 ]] || { echo "FAIL: $P_NON2XX non-2xx/3xx responses through the proxy"; fail=1; }
[[ $(sockerr proxied) == none ]] || { echo "FAIL: socket errors through the proxy"; fail=1; }
if (( FETCHED < P_REQS + 1 || FETCHED > P_REQS + 1 + CONNS )); then
  echo "FAIL: fetched audit lines ($FETCHED) do not match proxied requests ($P_REQS + 1)"; fail=1
fi
if ! "$MANNERLY" audit verify "$AUDIT"; then echo "FAIL: audit chain"; fail=1; fi
if grep -qi panick "$WORK/proxy.log"; then echo "FAIL: proxy panicked:"; grep -i -A3 panick "$WORK/proxy.log"; fail=1; fi
exit $fail
