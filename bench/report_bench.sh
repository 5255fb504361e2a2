#!/usr/bin/env bash
# Times `mannerly report` on one core over a generated, correctly chained
# audit log of SIZE_MB megabytes (default 1024) spread over HOSTS hosts.
#   bash bench/report_bench.sh            # 1 GB, 2000 hosts
#   SIZE_MB=100 bash bench/report_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE_MB="${SIZE_MB:-1024}"
HOSTS="${HOSTS:-2000}"
OUT="${OUT:-${TMPDIR:-/tmp}/mannerly-bench-audit.jsonl}"
cargo build --release --quiet --bin mannerly --example gen_audit
BIN="${CARGO_TARGET_DIR:-target}/release"
if [ ! -s "$OUT" ] || [ "$(stat -c %s "$OUT")" -lt $((SIZE_MB * 1000000)) ]; then
  "$BIN/examples/gen_audit" "$OUT" "$SIZE_MB" "$HOSTS"
fi
ls -l "$OUT"
# One core, as the issue asks; /usr/bin/time for the peak memory.
taskset -c 0 /usr/bin/time -f "wall %e s, user %U s, max RSS %M KiB" \
  "$BIN/mannerly" report "$OUT" >/tmp/mannerly-bench-report.txt
head -4 /tmp/mannerly-bench-report.txt
