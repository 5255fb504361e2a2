#!/usr/bin/env bash
# Conditional-request benchmark: crawl 500 distinct pages (4-64 KiB, with
# ETag and Last-Modified) through the proxy twice, from a client that sends
# no validators (curl). Reports the bytes the origin wrote on its sockets in
# pass 2 / pass 1 (goal: at most 5 %), and checks that every pass-2 answer is
# a 200 with exactly the bytes of pass 1.
#
#   bench/cache.sh
#
# Builds release binaries, starts examples/cache_origin and `mannerly run`
# (enforce mode, budget opened wide so that it does not pace the crawl) on
# loopback with a fresh data dir, runs both passes with one curl process
# each (keep-alive, sequential), and prints the figures. Exit 0 only if every
# check passes.
#
# Environment (all optional):
#   BENCH_ORIGIN_PORT  origin port on 127.0.0.1        (default 18090)
#   BENCH_STATS_PORT   origin stats port on 127.0.0.1  (default 18091)
#   BENCH_PROXY_PORT   proxy port on 127.0.0.1         (default 18129)
#   BENCH_SKIP_BUILD=1 use the binaries already in the target dir
#   BENCH_KEEP=1       keep the work dir (bodies, audit log, proxy log)
#
# Installs nothing. Needs curl >= 7.84 (for %header{} in --write-out).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
ORIGIN_PORT=${BENCH_ORIGIN_PORT:-18090}
STATS_PORT=${BENCH_STATS_PORT:-18091}
PROXY_PORT=${BENCH_PROXY_PORT:-18129}
ORIGIN=127.0.0.1:$ORIGIN_PORT
STATS=127.0.0.1:$STATS_PORT
PROXY=127.0.0.1:$PROXY_PORT
PAGES=500

die() { echo "cache.sh: $*" >&2; exit 1; }
command -v curl >/dev/null || die "curl not found; install it: apt-get install -y curl"

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in "$ORIGIN_PORT" "$STATS_PORT" "$PROXY_PORT"; do
  port_in_use "$p" && die "127.0.0.1:$p is in use; set the BENCH_*_PORT variables"
done

if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
  echo "== building (release)"
  (cd "$ROOT" && cargo build --release --bin mannerly --example cache_origin)
fi
MANNERLY=$TARGET_DIR/release/mannerly
ORIGIN_BIN=$TARGET_DIR/release/examples/cache_origin
[[ -x $MANNERLY && -x $ORIGIN_BIN ]] || die "binaries missing under $TARGET_DIR/release"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/mannerly-cache-bench.XXXXXX")
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

echo "== origin on $ORIGIN (stats $STATS), proxy on $PROXY, work dir $WORK"
"$ORIGIN_BIN" "$ORIGIN" "$STATS" 2>"$WORK/origin.log" &
ORIGIN_PID=$!
mkdir "$WORK/data" "$WORK/pass1" "$WORK/pass2"
AUDIT=$WORK/audit.jsonl
MANNERLY_DATA_DIR=$WORK/data \
MANNERLY_PROXY__LISTEN=$PROXY \
MANNERLY_UPSTREAM__ALLOW_PRIVATE=true \
MANNERLY_AUDIT__PATH=$AUDIT \
MANNERLY_BUDGET__START_RATE=1000 MANNERLY_BUDGET__MAX_RATE=1000 \
MANNERLY_BUDGET__BURST=1000 MANNERLY_BUDGET__CONCURRENCY=1000 \
  "$MANNERLY" run 2>"$WORK/proxy.log" &
PROXY_PID=$!
wait_for "origin" curl -fsS -o /dev/null "http://$STATS/stats"
wait_for "proxy" port_in_use "$PROXY_PORT"

origin_bytes() { curl -fsS "http://$STATS/stats" | sed -n 's/^bytes=\([0-9]*\).*/\1/p'; }

# One curl process per pass: a config file with a url/output pair per page.
for pass in 1 2; do
  for i in $(seq 0 $((PAGES - 1))); do
    echo "url = \"http://$ORIGIN/page/$i\""
    echo "output = \"$WORK/pass$pass/$i\""
  done >"$WORK/pass$pass.curl"
done

crawl() { # pass number; prints the origin's bytes written during the pass
  local pass=$1 before after
  before=$(origin_bytes)
  curl -sS -x "http://$PROXY" --max-time 600 -K "$WORK/pass$pass.curl" \
    -w '%{http_code} %header{mannerly-decision}\n' >"$WORK/pass$pass.status" \
    || die "pass $pass: curl failed; see $WORK/proxy.log"
  after=$(origin_bytes)
  echo $((after - before))
}

echo "== pass 1: $PAGES pages, no validators from the client"
start=$(date +%s.%N)
BYTES1=$(crawl 1)
t1=$(echo "$(date +%s.%N) - $start" | bc)
# Store writes finish after each response; wait until every page is stored
# (the audit line of a stored page is written once its copy is on disk).
for i in $(seq 300); do
  stored=$(grep -c '"cache":"stored"' "$AUDIT" 2>/dev/null || true)
  [[ ${stored:-0} -ge $PAGES ]] && break
  sleep 0.1
done
echo "   stored: ${stored:-0} of $PAGES"

echo "== pass 2: the same $PAGES pages, again without validators"
start=$(date +%s.%N)
BYTES2=$(crawl 2)
t2=$(echo "$(date +%s.%N) - $start" | bc)

stop "$PROXY_PID"
PROXY_PID=

# Checks.
fail=0
ok1=$(grep -c '^200 fetched' "$WORK/pass1.status" || true)
ok2=$(grep -c '^200 revalidated' "$WORK/pass2.status" || true)
not200=$(grep -vc '^200 ' "$WORK/pass2.status" || true)
[[ $ok1 -eq $PAGES ]] || { echo "FAIL: pass 1 has $ok1 of $PAGES '200 fetched'"; fail=1; }
[[ $not200 -eq 0 ]] || { echo "FAIL: pass 2 has $not200 answers that are not 200"; fail=1; }
differ=0
for i in $(seq 0 $((PAGES - 1))); do
  cmp -s "$WORK/pass1/$i" "$WORK/pass2/$i" || differ=$((differ + 1))
done
[[ $differ -eq 0 ]] || { echo "FAIL: $differ pass-2 bodies differ from pass 1"; fail=1; }
sizes=$(cat "$WORK"/pass1/* | wc -c)

ratio=$(printf "%.2f" "$(echo "scale=4; 100 * $BYTES2 / $BYTES1" | bc)")
echo
echo "pages:                         $PAGES (bodies total $sizes bytes)"
echo "pass 1 upstream bytes:         $BYTES1 (${t1%???????} s)"
echo "pass 2 upstream bytes:         $BYTES2 (${t2%???????} s)"
echo "pass 2 / pass 1:               ${ratio} %  (goal <= 5 %)"
echo "pass 2 answered 200 revalidated: $ok2 of $PAGES; bodies identical to pass 1: $((PAGES - differ)) of $PAGES"
if (($(echo "$ratio > 5" | bc))); then
  echo "FAIL: pass 2 / pass 1 above 5 %"
  fail=1
fi
[[ $fail -eq 0 ]] && echo "all checks passed"
exit $fail
