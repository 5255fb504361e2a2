#!/usr/bin/env bash
# Scrapy (CONCURRENT_REQUESTS = 16) through mannerly over 20 hosts of one
# local origin, one of them paused by a 429 + Retry-After: 60 (issue 50,
# scrapy#2638). Three runs, each with a fresh proxy and origin:
#   without  the 19 other hosts alone, with the scrapy-mannerly middleware;
#   with     the 20 hosts, the middleware on;
#   bare     the 20 hosts, the middleware off (Scrapy's own retries).
# Prints the 19 other hosts' pages/s in each and the paused host's pages
# and upstream 429s. Needs scrapy and `pip install ./clients/scrapy-mannerly`.
# MANNERLY=path (else target/release/mannerly, else target/debug/mannerly),
# BENCH_PAGES per host (30), BENCH_RETRY_AFTER (60), BENCH_KEEP=DIR keeps logs.
set -euo pipefail
cd "$(dirname "$0")/.."
PAGES=${BENCH_PAGES:-30}
RA=${BENCH_RETRY_AFTER:-60}
MANNERLY=${MANNERLY:-target/release/mannerly}
[[ -x $MANNERLY ]] || MANNERLY=target/debug/mannerly
. bench/scrapy_lib.sh
python3 -c 'import scrapy_mannerly' 2>/dev/null ||
  { echo "pip install ./clients/scrapy-mannerly first" >&2; exit 2; }

run() { # name first-host middleware(1|0)
  local name=$1 first=$2 mw=$3 port pport log hosts="" i
  port=$(free_port); pport=$(free_port); log=$WORK/origin-$name.log; : >"$log"
  python3 bench/scrapy_pause.py origin "$port" "$log" h00.test "$RA" & PIDS+=($!)
  wait_port "$port"
  {
    echo "data_dir = \"$WORK/data-$name\""
    echo "[proxy]"; echo "listen = \"127.0.0.1:$pport\""
    echo "[admin]"; echo "listen = \"\""
    echo "[audit]"; echo "path = \"$WORK/audit-$name.jsonl\""
    echo "[upstream]"; echo "allow_private = true"
    echo "[upstream.resolve]"
    for i in $(seq -w 0 19); do echo "\"h$i.test:$port\" = \"127.0.0.1:$port\""; done
  } >"$WORK/$name.toml"
  "$MANNERLY" run -c "$WORK/$name.toml" >/dev/null 2>"$WORK/proxy-$name.log" & PIDS+=($!)
  wait_port "$pport"
  for i in $(seq -w "$first" 19); do hosts+="h$i.test:$port,"; done
  out=$(http_proxy=http://127.0.0.1:$pport scrapy runspider bench/scrapy_pause.py \
    -s MANNERLY_ON="$mw" -a hosts="$hosts" -a pages="$PAGES" -a paused=h00.test \
    2>"$WORK/scrapy-$name.log" | grep '^scrapy:')
  echo "$name: ${out#scrapy: }"
  echo "$name: origin: h00.test 429s $(grep -c ' h00.test /page/[0-9]* 429$' "$log" || true)," \
    "h00.test pages $(grep -c ' h00.test /page/[0-9]* 200$' "$log" || true)"
  if [[ -n ${BENCH_KEEP:-} ]]; then mkdir -p "$BENCH_KEEP"; cp "$WORK"/*-"$name".* "$BENCH_KEEP/"; fi
}
run without 01 1
run with 00 1
run bare 00 0
