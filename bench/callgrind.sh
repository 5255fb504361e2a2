#!/usr/bin/env bash
# Instructions per request of mannerly builds, counted by callgrind: the
# same count for the same build and requests whatever else the machine is
# doing, so two builds can be compared on a shared machine where req/s and
# CPU time move by 20% between runs.
#
#   bench/callgrind.sh [BINARY ...]     (default: target/release/mannerly)
#
# For each binary and path, mannerly runs under `valgrind --tool=callgrind`
# in front of an nginx origin on loopback, and curl asks for
# BENCH_CG_REQUESTS pages (default 1500, 8 at a time):
#   plain    /plain, no validators: forwarded every time
#   reval    one page with an ETag, again and again: a 304 each time
#   fresh    BENCH_CG_REQUESTS new pages with an ETag, each stored
#   recrawl  BENCH_CG_REQUESTS new pages stored by a first crawl through the
#            same binary run natively, then asked again from a proxy
#            started afresh, so that every page is read from disk and
#            revalidated
#   https    reval's page over TLS: curl through CONNECT and mannerly's
#            interception (its CA trusted by curl, the origin's throwaway
#            CA by mannerly), 8 tunnels kept alive; not in the default
#            list (needs openssl)
# Counting starts after the proxy answered its first request. BENCH_CG_PATHS
# picks paths (default "plain reval fresh recrawl"); BENCH_CG_TOP lists that many
# of the proxy's functions by inclusive count (default 0); BENCH_KEEP=1
# keeps the work directory and its callgrind files. BENCH_CG_STACK=1 adds a
# row per path (plain, reval, https) for examples/stack_relay, the relay
# made of mannerly's own parts with no policy (bench/README, `stack`):
# mannerly's count less the stack's is what mannerly's own work costs.
# BENCH_CG_VARY=1 has the origin send `Vary: Accept-Encoding` with the
# /etag/ pages (reval, fresh, recrawl, https), as most sites do, so their
# cache keys carry a variant hash. BENCH_CG_PAGE_BYTES (default 1024) is
# the size of the /etag/ page, to see what mannerly costs per byte of a
# real site's 50-100 KiB pages; /plain stays 1 KiB.
#
# Two of valgrind's limits inflate some counts, the same way for every
# build: it does not offer the CPU's SHA extensions, so SHA-256 runs its
# portable code (about ten times the instructions), and `rep stosb` counts
# an instruction per byte, so a memset weighs more than it costs.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "callgrind.sh: $*" >&2; exit 1; }
for t in valgrind callgrind_control callgrind_annotate nginx curl python3; do
  command -v "$t" >/dev/null || [[ -x /usr/sbin/$t ]] || die "$t not found (apt-get install -y valgrind nginx-light curl)"
done
[[ " ${BENCH_CG_PATHS:-} " != *" https "* ]] || command -v openssl >/dev/null || die "openssl not found (apt-get install -y openssl)"
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
BINARIES=("$@")
if [[ ${#BINARIES[@]} == 0 ]]; then
  (cd "$ROOT" && cargo build --release --bin mannerly >/dev/null)
  BINARIES=("$ROOT/target/release/mannerly")
fi
for b in "${BINARIES[@]}"; do [[ -x $b ]] || die "$b is not an executable"; done
STACK_RELAY=
if [[ ${BENCH_CG_STACK:-0} == 1 ]]; then
  (cd "$ROOT" && cargo build --release --example stack_relay >/dev/null)
  STACK_RELAY=${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/stack_relay
fi
N=${BENCH_CG_REQUESTS:-1500}
PATHS=${BENCH_CG_PATHS:-plain reval fresh recrawl}
WORK=$(mktemp -d /tmp/mannerly-callgrind.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [[ -n ${BENCH_KEEP:-} ]] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

ORIGIN_PORT=$(free_port)
TLS_PORT=$(free_port)
mkdir -p "$WORK/www/etag"
ETAG_LOCATION="location /etag/ { root $WORK/www; }"
[[ ${BENCH_CG_VARY:-0} == 1 ]] && ETAG_LOCATION="location /etag/ { root $WORK/www; add_header Vary Accept-Encoding; }"
# The TLS origin's certificate, from a throwaway CA mannerly is told to trust.
if [[ " $PATHS " == *" https "* ]]; then
  source "$ROOT/bench/origin_cert.sh"
  origin_cert "$WORK" callgrind-origin-ca
  # TLS 1.3, as current sites speak it (nginx before 1.23.4 offers 1.2 at most).
  TLS_SERVER="server {
    listen 127.0.0.1:$TLS_PORT ssl; ssl_protocols TLSv1.2 TLSv1.3;
    ssl_certificate $WORK/origin.pem; ssl_certificate_key $WORK/origin.key;
    keepalive_requests 100000;
    location = /robots.txt { return 404; }
    $ETAG_LOCATION
  }"
fi
PAGE_BYTES=${BENCH_CG_PAGE_BYTES:-1024}
[[ $PAGE_BYTES =~ ^[1-9][0-9]*$ ]] || die "BENCH_CG_PAGE_BYTES=$PAGE_BYTES is not a number of bytes above 0"
head -c "$PAGE_BYTES" /dev/zero | tr '\0' 'x' >"$WORK/www/etag/page.html"
BODY=$(head -c 1024 /dev/zero | tr '\0' 'y')
cat >"$WORK/nginx.conf" <<CONF
daemon off; master_process off; worker_processes 1;
pid $WORK/nginx.pid; error_log $WORK/nginx-error.log crit;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $WORK/b; proxy_temp_path $WORK/p;
  fastcgi_temp_path $WORK/f; uwsgi_temp_path $WORK/u; scgi_temp_path $WORK/s;
  server {
    listen 127.0.0.1:$ORIGIN_PORT;
    location = /robots.txt { return 404; }
    location = /plain { default_type text/plain; return 200 "$BODY"; }
    $ETAG_LOCATION
  }
  ${TLS_SERVER:-}
}
CONF
"$NGINX" -c "$WORK/nginx.conf" -p "$WORK" 2>/dev/null &
PIDS+=($!)
ORIGIN=http://127.0.0.1:$ORIGIN_PORT

# curl's list of URLs: $1 file, $2 path, $3 unique (1: one page each),
# $4 origin (default: the plain one).
urls() {
  local i origin=${4:-$ORIGIN}
  for ((i = 1; i <= N; i++)); do
    if [[ $3 == 1 ]]; then printf 'url = "%s%s?p=%d"\n' "$origin" "$2" "$i"; else printf 'url = "%s%s"\n' "$origin" "$2"; fi
    printf 'output = "/dev/null"\n'
  done >"$1"
}
# Asks for every URL of list $2 through the proxy on port $1 (HTTPS ones
# trusting the CA file $3); prints how many answers were not 200.
crawl() {
  local trust=()
  [[ -n ${3:-} ]] && trust=(--cacert "$3")
  curl -s --parallel --parallel-max 8 -x "http://127.0.0.1:$1" "${trust[@]}" -K "$2" -w "%{http_code}\n" 2>/dev/null \
    | awk '$1 != 200 {b++} END {print b + 0}'
}
# Waits until the proxy on port $1 answers.
up() {
  local i
  for ((i = 0; i < 300; i++)); do
    curl -s -o /dev/null -x "http://127.0.0.1:$1" "$ORIGIN/plain" && return 0
    sleep 0.2
  done
  die "the proxy on port $1 did not answer"
}
# Runs mannerly ($1) with data dir $2 on port $3, under valgrind when
# $4 is a callgrind output file; prints its pid.
start() {
  local bin=$1 data=$2 port=$3 out=${4:-}
  local env=(MANNERLY_DATA_DIR="$data" MANNERLY_PROXY__LISTEN=127.0.0.1:$port MANNERLY_ADMIN__LISTEN=
    MANNERLY_UPSTREAM__ALLOW_PRIVATE=true MANNERLY_POLICY__ENFORCE=false)
  [[ -f $WORK/origin-ca.pem ]] && env+=(MANNERLY_UPSTREAM__EXTRA_ROOTS="$WORK/origin-ca.pem"
    MANNERLY_PROXY__CONNECT_PORTS=$TLS_PORT)
  if [[ -n $out ]]; then
    env "${env[@]}" valgrind --tool=callgrind --callgrind-out-file="$out" --dump-instr=no "$bin" run \
      >"$data.out" 2>"$data.log" &
  else
    env "${env[@]}" "$bin" run >"$data.out" 2>"$data.log" &
  fi
  echo $!
}

# Heap allocations a request: the calls into mimalloc's allocating entry
# points (malloc, zalloc, realloc, each plain or aligned) from outside
# mimalloc in a callgrind file, divided by $2; counted there because the
# release build's LTO inlines Rust's `__rust_alloc` shims away. Each costs
# the allocator's work twice (and its free) beside the instructions of
# whoever fills it.
allocs() {
  python3 - "$1" "$2" <<'PY'
import re, sys
names, total, fn, cfn = {}, 0, None, None
want = {f"mi_{k}{a}" for k in ("malloc", "zalloc", "realloc") for a in ("", "_aligned")}
for line in open(sys.argv[1], errors="replace"):
    # A name is given once, with its number, wherever it first appears.
    m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
    if m:
        if m.group(2) is not None:
            names[m.group(1)] = m.group(2)
        if line.startswith("cfn="):
            cfn = names.get(m.group(1))
        else:
            fn = names.get(m.group(1)) or ""
    elif line.startswith("calls=") and cfn in want and not fn.lstrip("_").startswith("mi_"):
        total += int(line[6:].split()[0])
print(f"{total / float(sys.argv[2]):.1f}")
PY
}

# Stops pid $1 with signal $2 and waits until it is gone (it is not this
# shell's child: `start` ran in a subshell).
stop() {
  kill "-$2" "$1" 2>/dev/null || true
  while kill -0 "$1" 2>/dev/null; do sleep 0.1; done
}

printf '%-8s %-40s %14s %8s %12s\n' path binary instr/request failed allocs/request
for path in $PATHS; do
  case $path in
    plain) url=/plain unique=0 ;;
    reval) url=/etag/page.html unique=0 ;;
    fresh) url=/etag/page.html unique=1 ;;
    recrawl) url=/etag/page.html unique=1 ;;
    https) url=/etag/page.html unique=0 ;;
    *) die "unknown path $path (plain, reval, fresh, recrawl, https)" ;;
  esac
  origin= trust=
  [[ $path == https ]] && origin=https://localhost:$TLS_PORT
  for bin in "${BINARIES[@]}"; do
    tag=$path-$(echo "$bin" | tr '/' '_')
    data=$WORK/data-$tag
    mkdir -m 700 "$data"
    urls "$WORK/urls-$tag" "$url" "$unique" "$origin"
    port=$(free_port)
    if [[ $path == recrawl ]]; then
      pid=$(start "$bin" "$data" "$port")
      up "$port"
      fill_bad=$(crawl "$port" "$WORK/urls-$tag")
      [[ $fill_bad == 0 ]] || die "$fill_bad pages of the fill were not 200"
      stop "$pid" TERM
      port=$(free_port)
    fi
    out=$WORK/cg-$tag.out
    pid=$(start "$bin" "$data" "$port" "$out")
    PIDS+=("$pid")
    up "$port"
    if [[ $path == https ]]; then
      # mannerly's CA, written at its first start, for curl to trust; one
      # request first, so that the leaf for the origin's name is made
      # before counting. The 8 tunnels' handshakes are counted.
      trust=$data/ca.pem
      curl -s -o /dev/null -x "http://127.0.0.1:$port" --cacert "$trust" "$origin$url" \
        || die "no HTTPS answer through the proxy on port $port"
    fi
    callgrind_control -z "$pid" >/dev/null 2>&1
    bad=$(crawl "$port" "$WORK/urls-$tag" "$trust")
    callgrind_control -d "$pid" >/dev/null 2>&1
    stop "$pid" INT
    # The dump made after the crawl: the counts of the crawl alone.
    total=$(callgrind_annotate "$out.1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    printf '%-8s %-40s %14s %8s %12s\n' "$path" "$bin" "$(awk -v t="$total" -v n="$N" 'BEGIN{printf "%.0f", t / n}')" "$bad" "$(allocs "$out.1" "$N")"
    if [[ ${BENCH_CG_TOP:-0} -gt 0 ]]; then
      # The proxy's own steps and the libraries it calls for them, not
      # the runtime's and hyper's frames that hold them.
      { callgrind_annotate --inclusive=yes "$out.1" 2>/dev/null | grep -E '^ *[0-9,]+ \(' \
        | grep -E 'mannerly_(policy|state)|mannerly_proxy::(pipeline|audit|cache|clients)|http_cache_semantics|redb::|postcard|sha2::' \
        | grep -vE 'drop_in_place|\{\{closure\}\}$' \
        | sed -E 's/ \[[^]]*\]$//; s#^( *[0-9,]+ \( *[0-9.]+%\)) +[^:]*:#\1  #' | head -"$BENCH_CG_TOP"; } || true
    fi
    if [[ $path == recrawl ]]; then
      revalidated=$(grep -c '"outcome":"revalidated"' "$data"/audit*.jsonl || true)
      [[ $revalidated -ge $N ]] || echo "recrawl: only $revalidated of $N pages revalidated from the store" >&2
    fi
  done
  if [[ -n $STACK_RELAY && $path =~ ^(plain|reval|https)$ ]]; then
    # The stack relay is a reverse proxy: curl asks it for the page, it asks
    # the origin. No robots.txt, no store: on reval it forwards each 200.
    port=$(free_port) tag=$path-stack out=$WORK/cg-$path-stack.out
    args=(--listen "127.0.0.1:$port" --origin "$ORIGIN")
    front=http://127.0.0.1:$port trust=()
    if [[ $path == https ]]; then
      args=(--tls-listen "127.0.0.1:$port" --cert "$WORK/origin.pem" --key "$WORK/origin.key"
        --tls-origin "$origin" --cacert "$WORK/origin-ca.pem")
      front=https://localhost:$port trust=(--cacert "$WORK/origin-ca.pem")
    fi
    valgrind --tool=callgrind --callgrind-out-file="$out" --dump-instr=no "$STACK_RELAY" "${args[@]}" \
      >"$WORK/$tag.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    for ((i = 0; i < 300; i++)); do
      curl -s -o /dev/null "${trust[@]}" "$front$url" && break
      sleep 0.2
    done
    urls "$WORK/urls-$tag" "$url" "$unique" "$front"
    callgrind_control -z "$pid" >/dev/null 2>&1
    bad=$(curl -s --parallel --parallel-max 8 "${trust[@]}" -K "$WORK/urls-$tag" -w "%{http_code}\n" 2>/dev/null \
      | awk '$1 != 200 {b++} END {print b + 0}')
    callgrind_control -d "$pid" >/dev/null 2>&1
    # TERM: a background job of a script starts with SIGINT ignored, and
    # the relay, unlike mannerly, does not set its own handler.
    stop "$pid" TERM
    total=$(callgrind_annotate "$out.1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    printf '%-8s %-40s %14s %8s %12s\n' "$path" "stack ($STACK_RELAY)" "$(awk -v t="$total" -v n="$N" 'BEGIN{printf "%.0f", t / n}')" "$bad" "$(allocs "$out.1" "$N")"
  fi
done
