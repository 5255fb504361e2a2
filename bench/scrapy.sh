#!/usr/bin/env bash
# Scrapy 2.19 through mannerly against the seed's sliding-window origin
# (2 requests per second, robots.txt counted, Retry-After: 2), then the
# same spider straight to the origin. Prints pages/s and the upstream 429s
# the origin logged. Needs scrapy (pip install scrapy) and a release build
# (cargo build --release --bin mannerly). BENCH_PAGES (60); BENCH_KEEP=DIR
# keeps the audit log and the origins' logs there.
set -euo pipefail
cd "$(dirname "$0")/.."
PAGES=${BENCH_PAGES:-60}
MANNERLY=target/release/mannerly
. bench/scrapy_lib.sh

run() { # route
  local route=$1 port log
  port=$(free_port); log=$WORK/$route.log; : >"$log"
  python3 bench/scrapy_limit.py origin "$port" "$log" & PIDS+=($!)
  wait_port "$port"
  if [[ $route == mannerly ]]; then
    local pport; pport=$(free_port)
    MANNERLY_DATA_DIR=$WORK/data-$route MANNERLY_PROXY__LISTEN=127.0.0.1:$pport \
    MANNERLY_ADMIN__LISTEN= MANNERLY_UPSTREAM__ALLOW_PRIVATE=true \
    MANNERLY_AUDIT__PATH=$WORK/audit.jsonl "$MANNERLY" run >/dev/null 2>"$WORK/proxy.log" & PIDS+=($!)
    wait_port "$pport"
    out=$(http_proxy=http://127.0.0.1:$pport scrapy runspider bench/scrapy_limit.py \
      -a base="http://127.0.0.1:$port" -a pages="$PAGES" 2>/dev/null | grep '^scrapy:')
  else
    out=$(scrapy runspider bench/scrapy_limit.py -a base="http://127.0.0.1:$port" \
      -a pages="$PAGES" 2>/dev/null | grep '^scrapy:')
  fi
  printf '%-9s %s, upstream 429s %s, robots.txt %s\n' "$route" "${out#scrapy: }" \
    "$(grep -c ' 429$' "$log" || true)" "$(grep -c '^/robots.txt ' "$log" || true)"
  if [[ -n ${BENCH_KEEP:-} ]]; then
    mkdir -p "$BENCH_KEEP"; cp "$log" "$BENCH_KEEP/origin-$route.log"
    [[ -f $WORK/audit.jsonl ]] && cp "$WORK/audit.jsonl" "$BENCH_KEEP/"
  fi
}
run mannerly
run direct
