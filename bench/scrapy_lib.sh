# Shared by the Scrapy benches (bench/scrapy.sh, bench/scrapy_pause.sh):
# the checks, a work dir removed at exit with every process started, and
# loopback ports. Sourced after MANNERLY is set.
command -v scrapy >/dev/null || { echo "scrapy not installed: pip install scrapy" >&2; exit 2; }
[[ -x $MANNERLY ]] || { echo "build first: cargo build --release --bin mannerly" >&2; exit 2; }
WORK=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return; sleep 0.1; done; echo "port $1 never opened" >&2; exit 1; }
