#!/usr/bin/env bash
# Peers benchmark: mannerly beside squid and tinyproxy (caching and logging
# off), squid storing every response in a disk cache ("squiddisk": the same
# work as mannerly's store on the fresh and recrawl paths), straight to the
# origin, through "relay" (nginx as a reverse proxy: forwarding alone, no
# policy, a floor measurement for any proxy on this machine) and through
# "stack" (examples/stack_relay: the same relay built from mannerly's own
# parts, hyper, hyper-util's client, rustls and tokio, with no policy: what
# forwarding costs on the stack mannerly is made of), in one run, on the
# paths crawls take:
#
#   plain    the origin sends no validators (nothing to store or revalidate)
#   reval    the origin sends ETag/Last-Modified and the same page is asked
#            again and again (mannerly: 304 from the origin -> stored 200)
#   fresh    every URL is new and the origin sends validators (mannerly
#            stores every response)
#   recrawl  every URL was stored by mannerly earlier (a fill run before
#            each round, untimed, held on disk and not in memory) and is
#            asked once: a re-crawl (mannerly: read from disk, 304 -> stored
#            200); the other peers forward it as they do fresh URLs
#   https    HTTPS through interception, keep-alive, the same page again
#            (origin: nginx with TLS; validators on, so mannerly revalidates):
#            direct, relay, stack, squidbump (squid-openssl bumping every
#            CONNECT with its own CA, storing as squiddisk does), mannerly
#            and mitmproxy, with
#            examples/https_load (16 connections, HTTP/1.1) as the client,
#            since wrk cannot tunnel
#
#   bench/peers.sh
#
# The origin is Debian's nginx (static 1 KiB file with ETag for reval/fresh,
# a `return 200` 1 KiB body without validators for plain). wrk -t2 -c32, 1
# KiB pages. Prints req/s, p50, p99 and CPU µs per request per path and peer,
# and each peer's ratio to squid and to squiddisk (squidbump on https); then
# the goals of issue 52 round by round (each ratio taken within a round, its
# median and range, and in how many rounds it held). mannerly runs with the whole pipeline (robots.txt cached,
# audit on, store on) in observe mode, so its per-host budget does not pace
# the one host (the point of the budget is to pace it).
#
# Installs nothing: needs nginx, squid, tinyproxy, wrk, curl, openssl (Debian:
# apt-get install -y nginx-light squid-openssl tinyproxy wrk curl openssl; a
# squid without OpenSSL runs every row but squidbump), and for
# the https path mitmdump (pip install mitmproxy; MITMDUMP=/path/to/mitmdump
# if it is not on PATH; without it the mitmproxy row is skipped).
# BENCH_ROUNDS (default 3: every HTTP path runs each peer this many times,
# the peers in turn, and reports the median run; all rounds' req/s shown),
# BENCH_HTTPS_REQUESTS (default 20000; mitmproxy gets a tenth),
# BENCH_HTTPS_CLIENT (load, the default: examples/https_load, 16
# keep-alive connections; curl: curl --parallel, the client before),
# BENCH_MANNERLY_ENV="MANNERLY_CACHE__SYNC=none ..." (extra settings). BENCH_DURATION
# (default 6 s per run), BENCH_SKIP_BUILD=1, BENCH_KEEP=1,
# BENCH_PATHS="plain reval fresh https" and BENCH_PEERS="direct relay stack
# squid squiddisk squidbump tinyproxy mannerly" (subsets run fewer; squid,
# squiddisk and squidbump are the ratios' bases), BENCH_BEFORE=/path/to/mannerly
# (an older build as the peer "before", run as mannerly is: "no path slower
# than before", round by round), BENCH_STACK=/path/to/stack_relay (another
# build of the stack peer), BENCH_SQUID_STORE (squiddisk's cache_dir type: aufs,
# the default, ufs or rock), BENCH_SQUID_LOG=1 (squiddisk writes an access
# log, to check its result codes; off for figures), BENCH_PIN=1 (the proxy under test on CPU 0,
# wrk, curl and the origin on CPU 1, with taskset; each row also says how
# idle CPU 1 was during its run), BENCH_PERF=1
# (perf record on mannerly, or on the peer BENCH_PERF_PEER, during its first
# round, or round BENCH_PERF_ROUND,
# at BENCH_PERF_FREQ samples a second, default 499;
# prints each path's top symbols;
# needs perf: apt-get install -y linux-perf), BENCH_SYSCALLS=1 (perf stat
# counts each proxy's system calls per request, beside its CPU time),
# BENCH_SCHED=1 (perf stat counts, on the whole machine during each run,
# the loader and the origin included, wake-ups, context switches and the
# interrupts that wake or preempt another CPU, per request). BENCH_CONNS
# (wrk's connections, default 32) and BENCH_HTTPS_CONNS (https_load's,
# default 16): fewer hold a faster peer to a slower one's rate, to compare
# CPU per request at equal load (bench/README, "sixteenth round");
# BENCH_HTTPS_RATE (requests a second https_load offers every peer, on a
# schedule, instead of as fast as each answers); BENCH_VARY=1 (the origin
# sends `Vary: Accept-Encoding` with the pages of reval, fresh, re-crawl
# and https, as most sites do); BENCH_PAGE_BYTES (default 1024: the size
# of the stored page of reval, fresh, re-crawl and https; real sites'
# pages are 50-100 KiB; plain's stays 1 KiB).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
DURATION=${BENCH_DURATION:-6}
CONNS=${BENCH_CONNS:-32}
HTTPS_CONNS=${BENCH_HTTPS_CONNS:-16}
HTTPS_RATE=${BENCH_HTTPS_RATE:-}
ROUNDS=${BENCH_ROUNDS:-3}
PEERS=${BENCH_PEERS:-direct relay stack squid squiddisk squidbump tinyproxy mannerly${BENCH_BEFORE:+ before}}
# The peers of the plain-HTTP paths (squidbump is squiddisk there: it runs
# on https alone).
HTTP_PEERS=$(echo " $PEERS " | sed 's/ squidbump / /; s/^ //; s/ $//')
THREADS=2
die() { echo "peers.sh: $*" >&2; exit 1; }
[[ $CONNS =~ ^[1-9][0-9]*$ ]] || die "BENCH_CONNS=$CONNS: a number of connections above 0"
[[ $HTTPS_CONNS =~ ^[1-9][0-9]*$ ]] || die "BENCH_HTTPS_CONNS=$HTTPS_CONNS: a number of connections above 0"
[[ -z $HTTPS_RATE || ( $HTTPS_RATE =~ ^[0-9]*[.]?[0-9]+$ && $HTTPS_RATE =~ [1-9] ) ]] ||
  die "BENCH_HTTPS_RATE=$HTTPS_RATE: requests a second above 0"
for t in nginx squid tinyproxy wrk curl; do
  command -v "$t" >/dev/null || [[ -x /usr/sbin/$t ]] || die "$t not found (apt-get install -y nginx-light squid tinyproxy wrk curl)"
done
SQUID=$(command -v squid || echo /usr/sbin/squid)
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
TINYPROXY=$(command -v tinyproxy || echo /usr/bin/tinyproxy)

# Pinned mode: the proxies on CPU 0, the load generator and the origin on
# CPU 1, so that a ratio compares proxies and not how the scheduler shares
# two CPUs among three busy programs. Each peer is alone on CPU 0 while it
# is measured (the others idle there). mannerly sizes its runtime threads
# to the CPUs it may use, so it runs one there.
if [[ ${BENCH_PIN:-0} == 1 ]]; then
  command -v taskset >/dev/null || die "taskset not found (apt-get install -y util-linux)"
  taskset -c 0,1 true 2>/dev/null || die "BENCH_PIN=1 needs CPUs 0 and 1"
  ON_PROXY_CPU=(taskset -c 0) ON_LOAD_CPU=(taskset -c 1) RELAY_WORKERS=1
else
  ON_PROXY_CPU=() ON_LOAD_CPU=() RELAY_WORKERS=2
fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ORIGIN_PORT=$(free_port); SQUID_PORT=$(free_port); TINY_PORT=$(free_port); MANNERLY_PORT=$(free_port)
TLS_PORT=$(free_port); MITM_PORT=$(free_port); RELAY_PORT=$(free_port); RELAY_TLS_PORT=$(free_port)
SQUIDDISK_PORT=$(free_port); STACK_PORT=$(free_port); STACK_TLS_PORT=$(free_port); BUMP_PORT=$(free_port)
BEFORE_PORT=$(free_port)
MITMDUMP=${MITMDUMP:-$(command -v mitmdump || true)}

# Profiles want line tables: the profiling build has them, release not.
if [[ ${BENCH_PERF:-0} == 1 ]]; then PROFILE=profiling; else PROFILE=release; fi
HTTPS_CLIENT=${BENCH_HTTPS_CLIENT:-load}
[[ $HTTPS_CLIENT == load || $HTTPS_CLIENT == curl ]] || die "BENCH_HTTPS_CLIENT is load or curl, not $HTTPS_CLIENT"
if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
  (cd "$ROOT" && cargo build --profile "$PROFILE" --bin mannerly)
  if [[ $HTTPS_CLIENT == load && " ${BENCH_PATHS:-https} " == *" https "* ]]; then
    (cd "$ROOT" && cargo build --release --example https_load)
  fi
  (cd "$ROOT" && cargo build --release --example stack_relay)
fi
MANNERLY=${BENCH_MANNERLY:-$TARGET_DIR/$PROFILE/mannerly}
[[ -x $MANNERLY ]] || die "$MANNERLY missing"
HTTPS_LOAD=$TARGET_DIR/release/examples/https_load
if [[ $HTTPS_CLIENT == load && " ${BENCH_PATHS:-https} " == *" https "* ]]; then
  [[ -x $HTTPS_LOAD ]] || die "$HTTPS_LOAD missing (cargo build --release --example https_load)"
fi
STACK_RELAY=${BENCH_STACK:-$TARGET_DIR/release/examples/stack_relay}
[[ -x $STACK_RELAY ]] || die "$STACK_RELAY missing (cargo build --release --example stack_relay)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/mannerly-peers.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  [[ -n ${BENCH_KEEP:-} ]] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
wait_port() { local i; for i in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; die "port $1 did not open (logs in $WORK)"; }

# --- origin: nginx --------------------------------------------------------
mkdir -p "$WORK/www/etag"
# The origin's TLS certificate, from a throwaway CA that mannerly and
# mitmproxy are told to trust.
source "$ROOT/bench/origin_cert.sh"
origin_cert "$WORK" peers-origin-ca
PAGE_BYTES=${BENCH_PAGE_BYTES:-1024}
[[ $PAGE_BYTES =~ ^[1-9][0-9]*$ ]] || die "BENCH_PAGE_BYTES=$PAGE_BYTES is not a number of bytes above 0"
head -c "$PAGE_BYTES" /dev/zero | tr '\0' 'x' > "$WORK/www/etag/page.html"
BODY=$(head -c 1024 /dev/zero | tr '\0' 'y')
# The top of an nginx config: name, worker processes; no logs, temp
# paths in $WORK.
nginx_head() {
  cat <<CONF
daemon off; master_process $([[ $2 == 1 ]] && echo off || echo on); worker_processes $2;
pid $WORK/$1.pid; error_log $WORK/$1-error.log crit;
events { worker_connections 1024; }
http {
  access_log off;
  # TLS 1.3 as a current site and client speak it: nginx before 1.23.4
  # (Debian 12 has 1.22) offers at most TLS 1.2 unless told, which left the
  # relay on 1.2 with the client and the origin, and mannerly on 1.2 with
  # the origin.
  ssl_protocols TLSv1.2 TLSv1.3; proxy_ssl_protocols TLSv1.2 TLSv1.3;
  client_body_temp_path $WORK/$1-b; proxy_temp_path $WORK/$1-p;
  fastcgi_temp_path $WORK/$1-f; uwsgi_temp_path $WORK/$1-u; scgi_temp_path $WORK/$1-s;
CONF
}
# BENCH_VARY=1: the stored pages say `Vary: Accept-Encoding`, as most sites'.
ETAG_EXTRA=
[[ ${BENCH_VARY:-0} == 1 ]] && ETAG_EXTRA="add_header Vary Accept-Encoding;"
{ nginx_head nginx 1; cat <<CONF
  server {
    listen 127.0.0.1:$ORIGIN_PORT;
    location = /robots.txt { return 404; }
    location = /plain { default_type text/plain; return 200 "$BODY"; }
    location /etag/ { root $WORK/www; $ETAG_EXTRA }
  }
  server {
    listen 127.0.0.1:$TLS_PORT ssl;
    ssl_certificate $WORK/origin.pem; ssl_certificate_key $WORK/origin.key;
    keepalive_requests 100000;
    location = /robots.txt { return 404; }
    location /etag/ { root $WORK/www; $ETAG_EXTRA }
  }
}
CONF
} > "$WORK/nginx.conf"
"${ON_LOAD_CPU[@]}" "$NGINX" -c "$WORK/nginx.conf" -p "$WORK" 2>/dev/null & PIDS+=($!)
wait_port "$ORIGIN_PORT"

# --- relay: nginx as a reverse proxy in front of the origin -----------------
# Not a forward proxy and no policy at all: it does the socket and TLS work
# every proxy must do per request (read the client's request, send it on a
# kept-alive upstream connection, relay the answer), in C with nginx's
# event loop. Its req/s is a floor measurement of what forwarding alone
# costs on this machine, to read the other ratios against.
{ nginx_head relay "$RELAY_WORKERS"; cat <<CONF
  upstream origin { server 127.0.0.1:$ORIGIN_PORT; keepalive 64; }
  upstream origin_tls { server 127.0.0.1:$TLS_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$RELAY_PORT;
    location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }
  }
  server {
    listen 127.0.0.1:$RELAY_TLS_PORT ssl;
    ssl_certificate $WORK/origin.pem; ssl_certificate_key $WORK/origin.key;
    keepalive_requests 100000;
    location / {
      proxy_pass https://origin_tls; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_ssl_session_reuse on; proxy_ssl_server_name on; proxy_ssl_name localhost;
      proxy_ssl_verify on; proxy_ssl_trusted_certificate $WORK/origin-ca.pem; proxy_buffering off;
    }
  }
}
CONF
} > "$WORK/relay.conf"
"${ON_PROXY_CPU[@]}" "$NGINX" -c "$WORK/relay.conf" -p "$WORK" 2>/dev/null & PIDS+=($!)
RELAY_PID=$!

# --- stack: the relay above, made of mannerly's parts ------------------------
"${ON_PROXY_CPU[@]}" "$STACK_RELAY" --listen "127.0.0.1:$STACK_PORT" --origin "http://127.0.0.1:$ORIGIN_PORT" \
  --tls-listen "127.0.0.1:$STACK_TLS_PORT" --cert "$WORK/origin.pem" --key "$WORK/origin.key" \
  --tls-origin "https://localhost:$TLS_PORT" --cacert "$WORK/origin-ca.pem" 2>"$WORK/stack.err" & PIDS+=($!)
STACK_PID=$!

# --- squid: no cache, no logs ----------------------------------------------
cat > "$WORK/squid.conf" <<CONF
http_port 127.0.0.1:$SQUID_PORT
acl localnet src 127.0.0.1/32
http_access allow localnet
http_access deny all
cache deny all
cache_mem 0 MB
access_log none
cache_store_log none
cache_log /dev/null
logfile_rotate 0
pid_filename $WORK/squid.pid
coredump_dir $WORK
shutdown_lifetime 0 seconds
CONF
"${ON_PROXY_CPU[@]}" "$SQUID" -N -f "$WORK/squid.conf" 2>"$WORK/squid.err" & PIDS+=($!)
SQUID_PID=$!

# --- squiddisk: squid storing every response on disk ------------------------
# The peer doing mannerly's work on fresh and recrawl: every response with a
# validator is stored on disk (no memory cache, as mannerly's store keeps
# pages on disk), and refresh_pattern makes every stored page stale at once,
# so each later request is revalidated with the origin (If-None-Match /
# If-Modified-Since) and a 304 is answered from the disk copy. No access log
# (mannerly's audit line is the one piece of work it does not share); the
# script reads squid's cache manager counters instead.
SQUID_STORE=${BENCH_SQUID_STORE:-aufs}
mkdir -p "$WORK/squiddisk-cache"
# squid started as root works as cache_effective_user (Debian: proxy), which
# must reach its cache directory inside $WORK.
SQUID_USER=
if [[ $(id -u) == 0 ]]; then
  SQUID_USER=$(id -un proxy 2>/dev/null || echo nobody)
  chmod 711 "$WORK"; chown "$SQUID_USER" "$WORK/squiddisk-cache"
fi
# The part of a storing squid's configuration both storing peers share:
# loopback clients only, a disk store in $WORK/$1 where every page is stale
# at once, logs off, $WORK/$2.pid.
squid_store_conf() {
  cat <<CONF
acl localnet src 127.0.0.1/32
http_access allow localnet
http_access deny all
cache_mem 0 MB
memory_cache_mode disk
cache_dir $SQUID_STORE $WORK/$1 4096$([[ $SQUID_STORE == rock ]] || echo " 16 256")
maximum_object_size 1 MB
refresh_pattern . 0 0% 0
access_log $([[ ${BENCH_SQUID_LOG:-0} == 1 ]] && echo "stdio:$WORK/$1/access.log" || echo none)
cache_store_log none
cache_log $WORK/$1/cache.log
$([[ -n $SQUID_USER ]] && echo "cache_effective_user $SQUID_USER")
logfile_rotate 0
pid_filename $WORK/$2.pid
coredump_dir $WORK
shutdown_lifetime 0 seconds
CONF
}
{ echo "http_port 127.0.0.1:$SQUIDDISK_PORT"; squid_store_conf squiddisk-cache squiddisk; } > "$WORK/squiddisk.conf"
# A squid killed by an earlier run leaves its shared memory behind
# (/dev/shm/squid-*); -z failed then, and passed once they were removed.
"$SQUID" -N -z -f "$WORK/squiddisk.conf" >"$WORK/squiddisk-z.err" 2>&1 ||
  die "squid -z failed: $(tail -n 3 "$WORK/squiddisk-z.err") (after a squid was killed, removing its /dev/shm/squid-* let -z run again)"
"${ON_PROXY_CPU[@]}" "$SQUID" -N -f "$WORK/squiddisk.conf" 2>"$WORK/squiddisk.err" & PIDS+=($!)
SQUIDDISK_PID=$!

# --- squidbump: squid intercepting TLS as mannerly does (ssl-bump) -----------
# The peer of the https path: every CONNECT is bumped with squid's own CA
# (a leaf per host made by security_file_certgen, as mannerly makes its
# own), and the requests inside are stored and revalidated as squiddisk
# does (disk cache, every page stale at once, a 304 answered from disk).
# Needs squid built with OpenSSL (Debian: squid-openssl, which replaces
# squid); without it the row is skipped.
BUMP_PID=
SQUID_CERTGEN=${SQUID_CERTGEN:-/usr/lib/squid/security_file_certgen}
if [[ " ${BENCH_PATHS:-https} " == *" https "* && " $PEERS " == *" squidbump "* ]]; then
  if ! "$SQUID" -v | grep -q -- --with-openssl || [[ ! -x $SQUID_CERTGEN ]]; then
    echo "peers.sh: squid without OpenSSL (apt-get install -y squid-openssl): no squidbump row" >&2
  else
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=peers-squid-bump-ca \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
      -keyout "$WORK/bump-ca.key" -out "$WORK/bump-ca.pem" 2>/dev/null
    mkdir -p "$WORK/bump-cache"
    "$SQUID_CERTGEN" -c -s "$WORK/bump-certs" -M 16MB >/dev/null
    [[ -n $SQUID_USER ]] && chown -R "$SQUID_USER" "$WORK/bump-cache" "$WORK/bump-certs"
    {
      cat <<CONF
http_port 127.0.0.1:$BUMP_PORT ssl-bump generate-host-certificates=on dynamic_cert_mem_cache_size=16MB tls-cert=$WORK/bump-ca.pem tls-key=$WORK/bump-ca.key
sslcrtd_program $SQUID_CERTGEN -s $WORK/bump-certs -M 16MB
sslcrtd_children 2 startup=1 idle=1
acl step1 at_step SslBump1
ssl_bump peek step1
ssl_bump bump all
tls_outgoing_options cafile=$WORK/origin-ca.pem
CONF
      squid_store_conf bump-cache squidbump
    } > "$WORK/squidbump.conf"
    "$SQUID" -N -z -f "$WORK/squidbump.conf" >"$WORK/squidbump-z.err" 2>&1 ||
      die "squid -z (squidbump) failed: $(tail -n 3 "$WORK/squidbump-z.err")"
    "${ON_PROXY_CPU[@]}" "$SQUID" -N -f "$WORK/squidbump.conf" 2>"$WORK/squidbump.err" & PIDS+=($!)
    BUMP_PID=$!
  fi
fi

# --- tinyproxy: logging down to criticals --------------------------------
cat > "$WORK/tinyproxy.conf" <<CONF
Port $TINY_PORT
Listen 127.0.0.1
Timeout 600
MaxClients 200
LogLevel Critical
Allow 127.0.0.1
CONF
"${ON_PROXY_CPU[@]}" "$TINYPROXY" -d -c "$WORK/tinyproxy.conf" 2>"$WORK/tinyproxy.err" >/dev/null & PIDS+=($!)
TINY_PID=$!

# --- mannerly ------------------------------------------------------------
mkdir -m 700 "$WORK/data"
MANNERLY_DATA_DIR=$WORK/data MANNERLY_PROXY__LISTEN=127.0.0.1:$MANNERLY_PORT \
MANNERLY_ADMIN__LISTEN= MANNERLY_UPSTREAM__ALLOW_PRIVATE=true \
MANNERLY_UPSTREAM__EXTRA_ROOTS=$WORK/origin-ca.pem MANNERLY_PROXY__CONNECT_PORTS=$TLS_PORT \
MANNERLY_POLICY__ENFORCE=false MANNERLY_UPSTREAM__POOL_MAX_IDLE_PER_HOST=${BENCH_POOL:-32} \
  "${ON_PROXY_CPU[@]}" env ${BENCH_MANNERLY_ENV:-} "$MANNERLY" run >"$WORK/mannerly.out" 2>"$WORK/mannerly.log" & PIDS+=($!)
MANNERLY_PID=$!

# --- before: another mannerly build, the same way (BENCH_BEFORE=path) --------
# A build from before a change, run as a peer of its own: its rounds
# alternate with the others', so "no path slower than before" is read
# within each round, as the goals are.
BEFORE_PID=
if [[ " $PEERS " == *" before "* ]]; then
  [[ -x ${BENCH_BEFORE:-} ]] || die "the before peer needs BENCH_BEFORE=/path/to/mannerly"
  mkdir -m 700 "$WORK/data-before"
  MANNERLY_DATA_DIR=$WORK/data-before MANNERLY_PROXY__LISTEN=127.0.0.1:$BEFORE_PORT \
  MANNERLY_ADMIN__LISTEN= MANNERLY_UPSTREAM__ALLOW_PRIVATE=true \
  MANNERLY_UPSTREAM__EXTRA_ROOTS=$WORK/origin-ca.pem MANNERLY_PROXY__CONNECT_PORTS=$TLS_PORT \
  MANNERLY_POLICY__ENFORCE=false MANNERLY_UPSTREAM__POOL_MAX_IDLE_PER_HOST=${BENCH_POOL:-32} \
    "${ON_PROXY_CPU[@]}" env ${BENCH_MANNERLY_ENV:-} "$BENCH_BEFORE" run >"$WORK/before.out" 2>"$WORK/before.log" & PIDS+=($!)
  BEFORE_PID=$!
fi

# --- mitmproxy (https path only) --------------------------------------------
if [[ -n $MITMDUMP ]]; then
  "${ON_PROXY_CPU[@]}" "$MITMDUMP" -q --listen-host 127.0.0.1 --listen-port "$MITM_PORT" --set confdir="$WORK/mitm" \
    --set ssl_verify_upstream_trusted_ca="$WORK/origin-ca.pem" --set flow_detail=0 \
    >"$WORK/mitm.log" 2>&1 & PIDS+=($!)
  MITM_PID=$!
fi

wait_port "$SQUID_PORT"; wait_port "$SQUIDDISK_PORT"; wait_port "$TINY_PORT"; wait_port "$MANNERLY_PORT"; wait_port "$RELAY_PORT"
wait_port "$STACK_PORT"; wait_port "$STACK_TLS_PORT"
[[ -n $BEFORE_PID ]] && wait_port "$BEFORE_PORT"
if [[ -n $BUMP_PID ]]; then
  wait_port "$BUMP_PORT"
  code=$(curl -sS -x "http://127.0.0.1:$BUMP_PORT" --cacert "$WORK/bump-ca.pem" -o /dev/null -w '%{http_code}' \
    "https://localhost:$TLS_PORT/etag/page.html") || die "squidbump failed (logs in $WORK/bump-cache)"
  [[ $code == 200 ]] || die "squidbump answered $code"
fi
ORIGIN=http://127.0.0.1:$ORIGIN_PORT
for p in "$SQUID_PORT" "$SQUIDDISK_PORT" "$TINY_PORT" "$MANNERLY_PORT" ${BEFORE_PID:+"$BEFORE_PORT"}; do
  code=$(curl -sS -x "http://127.0.0.1:$p" -o /dev/null -w '%{http_code}' "$ORIGIN/etag/page.html") || die "proxy on $p failed"
  [[ $code == 200 ]] || die "proxy on $p answered $code"
done

# With unique URLs, a run's URLs carry its tag (by default its name), so that
# no run repeats another's; a recrawl run takes its fill run's tag instead.
run() { # name, proxy port (or 'direct'), url, unique, [tag, seconds]
  local name=$1 port=$2 url=$3 unique=$4 tag=${5:-$1} secs=${6:-$DURATION} out=$WORK/wrk-$1.txt
  if [[ $port == direct ]]; then
    if [[ $unique == 1 ]]; then
      BENCH_TARGET=$url BENCH_UNIQUE=1 BENCH_RUN=$tag "${ON_LOAD_CPU[@]}" wrk -t$THREADS -c$CONNS -d${secs}s --latency -s "$ROOT/bench/peers-direct.lua" "$url" >"$out"
    else
      "${ON_LOAD_CPU[@]}" wrk -t$THREADS -c$CONNS -d${secs}s --latency "$url" >"$out"
    fi
  else
    BENCH_TARGET=$url BENCH_UNIQUE=$unique BENCH_RUN=$tag "${ON_LOAD_CPU[@]}" wrk -t$THREADS -c$CONNS -d${secs}s --latency \
      -s "$ROOT/bench/peers.lua" "http://127.0.0.1:$port" >"$out"
  fi
}
# Audit lines with an outcome, so far, in the current file and the ones it
# rotated from (audit.jsonl.<time>): a count of the current file alone
# went down at a rotation.
outcomes() { cat "$WORK"/data/audit.jsonl* 2>/dev/null | grep -c "\"outcome\":\"$1\"" || true; }
ms() { awk -v q="$2" '$1 == q {
  v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
  m = (u == "us") ? 0.001 : (u == "ms") ? 1 : (u == "s") ? 1000 : -1
  printf "%.2f", v * m }' "$WORK/wrk-$1.txt"; }
rps() { awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$WORK/wrk-$1.txt"; }
# CPU time (user + system, clock ticks) of a process and its children
# (nginx's workers, squid's helpers). CPU per request is steadier than req/s
# on a machine the client and origin share.
# With "user", user time only (field 14): the rest of cpu_us is the kernel's.
ticks() { # pid, [user]
  local p total=0 t sum='$14 + $15'
  [[ ${2:-} == user ]] && sum='$14'
  for p in "$1" $(pgrep -P "$1" || true); do
    t=$(awk "{print $sum}" "/proc/$p/stat" 2>/dev/null || echo 0)
    total=$((total + t))
  done
  echo "$total"
}
# Work a peer defers (mannerly's store writer, squid's disk threads) goes on
# after a run's last answer, on the CPU the next peer is pinned to. A run
# waits for its peer to go quiet (under 4% of a CPU in each quarter second
# of 1.25 s running, which outlasts the store's 1 s wait before it commits
# reads alone; 30 s at most) and counts that CPU as the run's, so that no
# run pays for the one before it (a fill's work is not billed to the timed
# run after it). SETTLED: how long it stayed busy, in ms.
declare -A SETTLED
settle() { # pid, tag
  local t0 t1 quiet=0 polls=0 hz
  [[ -n $1 ]] || return 0
  hz=$(getconf CLK_TCK)
  t0=$(ticks "$1")
  while ((quiet < 5 && polls < 120)); do
    sleep 0.25
    polls=$((polls + 1))
    t1=$(ticks "$1")
    if (( (t1 - t0) * 100 <= hz )); then quiet=$((quiet + 1)); else quiet=0; fi
    t0=$t1
  done
  SETTLED[$2]=$(( (polls - quiet) * 250 ))
}
declare -A PEER_PID
# Pinned mode: how idle the load CPU (CPU 1: wrk, curl and the origin) was
# during a run. A write on CPU 0 that wakes a reader on an idle CPU 1 makes
# the writer send an interprocessor interrupt, which a virtual machine
# makes dear: a slower peer pays more kernel time per request for the same
# work (bench/README, "Why the relay's wake-ups cost less").
load_idle() { awk '$1 == "cpu1" {print $5 + $6, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat; }
idle_pct() { # "idle total" before, after
  local i0 t0 i1 t1
  read -r i0 t0 <<<"$1"; read -r i1 t1 <<<"$2"
  awk -v i=$((i1 - i0)) -v t=$((t1 - t0)) 'BEGIN{ if (t > 0) printf "%.0f", 100 * i / t; else print "-" }'
}
cpu_us() { # name, ticks used
  local n
  n=$(awk '/ requests in / {print $1}' "$WORK/wrk-$1.txt")
  awk -v t="$2" -v n="$n" -v hz="$(getconf CLK_TCK)" 'BEGIN{ if (n > 0) printf "%.1f", t * 1e6 / hz / n; else print "-" }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2fx", a/b; else print "-" }'; }
bad() { awk -F: '/Non-2xx or 3xx/ {gsub(/ /,"",$2); print $2}' "$WORK/wrk-$1.txt" | grep . || echo 0; }

declare -A URL=([plain]=$ORIGIN/plain [reval]=$ORIGIN/etag/page.html [fresh]=$ORIGIN/etag/page.html
  [recrawl]=$ORIGIN/etag/page.html)
declare -A UNIQ=([plain]=0 [reval]=0 [fresh]=1 [recrawl]=1)
PEER_PID=([relay]=$RELAY_PID [stack]=$STACK_PID [squid]=$SQUID_PID [squiddisk]=$SQUIDDISK_PID [tinyproxy]=$TINY_PID [mannerly]=$MANNERLY_PID
  [before]=$BEFORE_PID)
# BENCH_SCHED: the machine's scheduling events during one run.
SCHED_EVENTS=sched:sched_waking,sched:sched_switch,irq_vectors:call_function_single_entry,irq_vectors:reschedule_entry
sched_on() { # output file; sets sched_pid
  sched_pid=
  [[ ${BENCH_SCHED:-0} == 1 ]] || return 0
  perf stat -a -x, -e "$SCHED_EVENTS" -o "$1" >/dev/null 2>&1 & sched_pid=$!
}
# BENCH_SYSCALLS: the system calls of the proxy under test (all its threads,
# and its children's) during one run.
syscalls_on() { # pid, output file; sets stat_pid
  stat_pid=
  [[ ${BENCH_SYSCALLS:-0} == 1 && -n $1 ]] || return 0
  perf stat -x, -e raw_syscalls:sys_enter -p "$(pgrep -P "$1" | paste -sd, | sed 's/.$/&,/')$1" -o "$2" >/dev/null 2>&1 & stat_pid=$!
}
syscalls_off() { # output file; sets syscalls to the count, or empty
  syscalls=
  [[ -n $stat_pid ]] || return 0
  kill -INT "$stat_pid"; wait "$stat_pid" || true
  syscalls=$(awk -F, '/raw_syscalls/ {print $1}' "$1")
}
sched_off() { # output file, requests: ", W wake-ups, S switches, I IPIs" per request
  [[ -n $sched_pid ]] || return 0
  kill -INT "$sched_pid"; wait "$sched_pid" || true
  awk -F, -v n="$2" '$3 ~ /sched_waking/ {w=$1} $3 ~ /sched_switch/ {s=$1}
    $3 ~ /call_function_single_entry|reschedule_entry/ {i+=$1}
    END { if (n > 0) printf ", %.2f wake-ups, %.2f switches, %.2f IPIs", w / n, s / n, i / n }' "$1"
}
declare -A USED UUSED SYSCALLS SCHED RECRAWL SQUID_DID IDLE
# squiddisk's own count of what it did, from its cache manager: requests,
# answers from its store (a hit, or a 304 from the origin and the stored
# body: TCP_REFRESH_UNMODIFIED counts as a hit), requests sent to the origin.
squid_counters() { # [port: squiddisk's by default]
  curl -sS "http://127.0.0.1:${1:-$SQUIDDISK_PORT}/squid-internal-mgr/counters" 2>/dev/null \
    | awk -F' = ' '$1 == "client_http.requests" {r = $2} $1 == "client_http.hits" {h = $2}
        $1 == "server.http.requests" {s = $2} END {print r + 0, h + 0, s + 0}'
}
squid_objects() { # [port: squiddisk's by default]
  curl -sS "http://127.0.0.1:${1:-$SQUIDDISK_PORT}/squid-internal-mgr/info" 2>/dev/null \
    | awk -F'\t' '/on-disk objects/ {gsub(/[^0-9]/, "", $2); print $2 + 0}'
}
# The difference of two squid_counters lines, as words.
squid_did() { # before, after
  read -r r0 h0 s0 <<<"$1"; read -r r1 h1 s1 <<<"$2"
  echo "$((r1 - r0)) requests, $((h1 - h0)) answered from its store, $((s1 - s0)) sent to the origin"
}
# The median of a peer's rounds: the run whose req/s is the middle one (its
# p50 and p99 are reported with it).
median_run() { # path, peer
  local r
  for ((r = 1; r <= ROUNDS; r++)); do echo "$(rps "$1-$2-$r") $r"; done | sort -n | awk -v m=$(((ROUNDS + 1) / 2)) 'NR == m {print $2}'
}
printf '\n%-7s %-9s %9s %9s %9s %8s %9s %9s %11s %s\n' path peer req/s p50_ms p99_ms non2xx vs_squid vs_sqdisk cpu_us/req "rounds (req/s)"
PATHS=${BENCH_PATHS:-plain reval fresh recrawl https}
for path in $PATHS; do
  [[ $path == https ]] && continue
  # Rounds take the peers in turn, so that a slow spell of the shared
  # machine falls on every peer, and the median of each is reported.
  for ((round = 1; round <= ROUNDS; round++)); do
    for peer in $HTTP_PEERS; do
      case $peer in
        direct | relay | stack) port=direct ;; squid) port=$SQUID_PORT ;; squiddisk) port=$SQUIDDISK_PORT ;;
        tinyproxy) port=$TINY_PORT ;; mannerly) port=$MANNERLY_PORT ;; before) port=$BEFORE_PORT ;;
      esac
      url=${URL[$path]}
      [[ $peer == relay ]] && url=${url/:$ORIGIN_PORT/:$RELAY_PORT}
      [[ $peer == stack ]] && url=${url/:$ORIGIN_PORT/:$STACK_PORT}
      tag=$path-$peer-$round
      if [[ $path == recrawl && $peer == mannerly ]]; then
        # The fill: new pages, stored and not read since, so none is in
        # memory. It lasts longer than the timed run, so that the timed run
        # asks only for pages the fill stored (the line below says so).
        tag=fill-$round
        run "$tag" "$port" "$url" 1 "$tag" "${BENCH_RECRAWL_FILL:-$((DURATION * 3))}"
        settle "${PEER_PID[$peer]:-}" "$tag"
        revalidated=$(outcomes revalidated) fetched=$(outcomes fetched)
      fi
      if [[ $path == recrawl && $peer == before ]]; then
        tag=fill-before-$round
        run "$tag" "$port" "$url" 1 "$tag" "${BENCH_RECRAWL_FILL:-$((DURATION * 3))}"
        settle "${PEER_PID[$peer]:-}" "$tag"
      fi
      if [[ $path == recrawl && $peer == squiddisk ]]; then
        # squid's fill, the same length as mannerly's: pages on its disk.
        tag=fill-squiddisk-$round
        run "$tag" "$port" "$url" 1 "$tag" "${BENCH_RECRAWL_FILL:-$((DURATION * 3))}"
        settle "${PEER_PID[$peer]:-}" "$tag"
      fi
      [[ $peer == squiddisk ]] && sq_before=$(squid_counters)
      perf_pid=
      if [[ $peer == "${BENCH_PERF_PEER:-mannerly}" && $round == ${BENCH_PERF_ROUND:-1} && ${BENCH_PERF:-0} == 1 ]]; then
        perf record -F ${BENCH_PERF_FREQ:-499} ${BENCH_PERF_CALLGRAPH:--g} -o "$WORK/perf-$path.data" -p "${PEER_PID[$peer]}" >/dev/null 2>&1 & perf_pid=$!
      fi
      pid=${PEER_PID[$peer]:-}
      before=$([[ -n $pid ]] && ticks "$pid" || echo 0)
      ubefore=$([[ -n $pid ]] && ticks "$pid" user || echo 0)
      syscalls_on "$pid" "$WORK/sys-$path-$peer-$round.txt"
      idle0=$(load_idle)
      sched_on "$WORK/sched-$path-$peer-$round.txt"
      run "$path-$peer-$round" "$port" "$url" "${UNIQ[$path]}" "$tag"
      # Not in a command substitution: its subshell could not wait for perf.
      sched_off "$WORK/sched-$path-$peer-$round.txt" \
        "$(awk '/ requests in / {print $1}' "$WORK/wrk-$path-$peer-$round.txt")" >"$WORK/sched-$path-$peer-$round.sum"
      SCHED[$path-$peer-$round]=$(cat "$WORK/sched-$path-$peer-$round.sum")
      [[ ${BENCH_PIN:-0} == 1 ]] && IDLE[$path-$peer-$round]=$(idle_pct "$idle0" "$(load_idle)")
      settle "$pid" "$path-$peer-$round"
      # Not in a command substitution, as sched_off above.
      syscalls_off "$WORK/sys-$path-$peer-$round.txt"
      [[ -n $syscalls ]] && SYSCALLS[$path-$peer-$round]=$syscalls
      UUSED[$path-$peer-$round]=$(( $([[ -n $pid ]] && ticks "$pid" user || echo 0) - ubefore ))
      if [[ $path == recrawl && $peer == mannerly ]]; then
        RECRAWL[$round]="$(($(outcomes revalidated) - revalidated)) revalidated, $(($(outcomes fetched) - fetched)) fetched"
      fi
      [[ $peer == squiddisk ]] && SQUID_DID[$path-$round]=$(squid_did "$sq_before" "$(squid_counters)")
      USED[$path-$peer-$round]=$(( $([[ -n $pid ]] && ticks "$pid" || echo 0) - before ))
      [[ -n $perf_pid ]] && { kill -INT "$perf_pid"; wait "$perf_pid" || true; }
    done
  done
  s=0 sd=0
  [[ " $PEERS " == *" squid "* ]] && s=$(rps "$path-squid-$(median_run "$path" squid)")
  [[ " $PEERS " == *" squiddisk "* ]] && sd=$(rps "$path-squiddisk-$(median_run "$path" squiddisk)")
  for peer in $HTTP_PEERS; do
    m=$path-$peer-$(median_run "$path" "$peer")
    r=$(rps "$m")
    cpu=-; [[ -n ${PEER_PID[$peer]:-} ]] && cpu="$(cpu_us "$m" "${USED[$m]}") ($(cpu_us "$m" "${UUSED[$m]}") user$(
      [[ -n ${SYSCALLS[$m]:-} ]] && awk -v c="${SYSCALLS[$m]}" -v n="$(awk '/ requests in / {print $1}' "$WORK/wrk-$m.txt")" \
        'BEGIN{ printf ", %.2f syscalls", c / n }' || true)${SCHED[$m]:-}$(
      [[ -n ${IDLE[$m]:-} ]] && echo ", CPU 1 idle ${IDLE[$m]}%" || true))"
    all=$(for ((round = 1; round <= ROUNDS; round++)); do rps "$path-$peer-$round"; echo; done | paste -sd/)
    printf '%-7s %-9s %9s %9s %9s %8s %9s %9s %11s %s\n' "$path" "$peer" "$r" "$(ms "$m" 50%)" \
      "$(ms "$m" 99%)" "$(bad "$m")" "$(ratio "$r" "$s")" "$(ratio "$r" "$sd")" "$cpu" "$all"
  done
  if [[ " $PEERS " == *" squiddisk "* ]]; then
    for ((round = 1; round <= ROUNDS; round++)); do
      echo "$path, squiddisk round $round: ${SQUID_DID[$path-$round]}"
    done
  fi
  if [[ $path == recrawl && " $PEERS " == *" mannerly "* ]]; then
    for ((round = 1; round <= ROUNDS; round++)); do
      echo "recrawl, mannerly round $round: ${RECRAWL[$round]} (any fetched: the fill was too short)"
    done
  fi
done
# --- https: examples/https_load (or curl --parallel), BENCH_HTTPS_CONNS (16) keep-alive connections
https_run() { # name, requests, port, CA file, [proxy host:port] (HTTPS_PID: the proxy, for its CPU)
  local name=$1 n=$2 port=$3 ca=$4 proxy=${5:-}
  local pid=${HTTPS_PID:-} before=0 used=0
  [[ -n $pid ]] && before=$(ticks "$pid")
  local url=https://localhost:$port/etag/page.html
  local secs got bad p50 p99 cpu=- idle0 idle=
  idle0=$(load_idle)
  local stat_pid syscalls
  syscalls_on "$pid" "$WORK/sys-https-$name.txt"
  sched_on "$WORK/sched-https-$name.txt"
  if [[ $HTTPS_CLIENT == load ]]; then
    # One line: requests seconds p50_ms p99_ms failed.
    "${ON_LOAD_CPU[@]}" "$HTTPS_LOAD" --url "$url" --connect "127.0.0.1:$port" --cacert "$ca" \
      --requests "$n" --connections "$HTTPS_CONNS" ${HTTPS_RATE:+--rate "$HTTPS_RATE"} ${proxy:+--proxy "$proxy"} \
      >"$WORK/https-$name.txt" 2>"$WORK/https-$name.err" || true
    read -r got secs p50 p99 bad <"$WORK/https-$name.txt" || { got=0 secs=1 p50=0 p99=0 bad=$n; }
  else
    : >"$WORK/urls-$name"
    for ((i = 0; i < n; i++)); do printf 'url = "%s"\noutput = "/dev/null"\n' "$url"; done >"$WORK/urls-$name"
    local t0 t1
    t0=$(date +%s.%N)
    "${ON_LOAD_CPU[@]}" curl -sS --http1.1 --parallel --parallel-max 16 --parallel-immediate -K "$WORK/urls-$name" \
      --resolve "localhost:$port:127.0.0.1" -w '%{http_code} %{time_total}\n' --cacert "$ca" ${proxy:+-x "http://$proxy"} \
      >"$WORK/https-$name.txt" 2>"$WORK/https-$name.err" || true
    t1=$(date +%s.%N)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')
    got=$(wc -l <"$WORK/https-$name.txt")
    bad=$(awk -v n="$n" '$1 != 200 {b++} END {print b + (n - NR)}' "$WORK/https-$name.txt")
    awk '{print $2 * 1000}' "$WORK/https-$name.txt" | sort -n >"$WORK/https-$name.sorted"
    p50=$(sed -n "$(( (got + 1) / 2 ))p" "$WORK/https-$name.sorted")
    p99=$(sed -n "$(( (got * 99 + 99) / 100 ))p" "$WORK/https-$name.sorted")
  fi
  sched_off "$WORK/sched-https-$name.txt" "$got" >"$WORK/https-$name.sched"
  syscalls_off "$WORK/sys-https-$name.txt"
  if [[ -n $syscalls ]]; then
    awk -v c="$syscalls" -v n="$got" 'BEGIN { if (n > 0) printf ", %.2f syscalls", c / n }' >>"$WORK/https-$name.sched"
  fi
  [[ ${BENCH_PIN:-0} == 1 ]] && idle=$(idle_pct "$idle0" "$(load_idle)")
  settle "$pid" "https-$name"
  [[ -n $pid ]] && used=$(( $(ticks "$pid") - before ))
  [[ -n $pid ]] && cpu=$(awk -v t="$used" -v n="$got" -v hz="$(getconf CLK_TCK)" 'BEGIN{ if (n > 0) printf "%.1f", t * 1e6 / hz / n; else print "-" }')
  printf '%s %.0f %.2f %.2f %d %s %s\n' "$name" "$(awk -v g="$got" -v s="$secs" 'BEGIN{print g/s}')" \
    "${p50:-0}" "${p99:-0}" "$bad" "$cpu" "${idle:--}" >"$WORK/https-$name.sum"
}
if [[ " $PATHS " == *" https "* ]]; then
  N=${BENCH_HTTPS_REQUESTS:-20000}
  [[ -n $MITMDUMP ]] && wait_port "$MITM_PORT"
  for ((round = 1; round <= ROUNDS; round++)); do
    https_run "direct-$round" "$N" "$TLS_PORT" "$WORK/origin-ca.pem"
    HTTPS_PID=$RELAY_PID https_run "relay-$round" "$N" "$RELAY_TLS_PORT" "$WORK/origin-ca.pem"
    # perf follows mannerly, or the stack relay (BENCH_PERF_PEER=stack).
    perf_on() { # pid of the peer about to run
      perf_pid=
      if [[ $round == "${BENCH_PERF_ROUND:-1}" && ${BENCH_PERF:-0} == 1 ]]; then
        perf record -F ${BENCH_PERF_FREQ:-499} ${BENCH_PERF_CALLGRAPH:--g} -o "$WORK/perf-https.data" -p "$1" >/dev/null 2>&1 & perf_pid=$!
      fi
    }
    perf_pid=
    perf_off() { [[ -z $perf_pid ]] || { kill -INT "$perf_pid"; wait "$perf_pid" || true; perf_pid=; }; }
    if [[ " $PEERS " == *" stack "* ]]; then
      [[ ${BENCH_PERF_PEER:-mannerly} == stack ]] && perf_on "$STACK_PID"
      HTTPS_PID=$STACK_PID https_run "stack-$round" "$N" "$STACK_TLS_PORT" "$WORK/origin-ca.pem"
      perf_off
    fi
    [[ ${BENCH_PERF_PEER:-mannerly} == mannerly ]] && perf_on "$MANNERLY_PID"
    HTTPS_PID=$MANNERLY_PID https_run "mannerly-$round" "$N" "$TLS_PORT" "$WORK/data/ca.pem" "127.0.0.1:$MANNERLY_PORT"
    perf_off
    if [[ -n $BEFORE_PID ]]; then
      HTTPS_PID=$BEFORE_PID https_run "before-$round" "$N" "$TLS_PORT" "$WORK/data-before/ca.pem" "127.0.0.1:$BEFORE_PORT"
    fi
    if [[ -n $BUMP_PID ]]; then
      # squid counts a bumped tunnel's CONNECT and each request inside it;
      # a tunnel it did not bump would show the CONNECTs alone, and none
      # answered from its store.
      sq_before=$(squid_counters "$BUMP_PORT")
      HTTPS_PID=$BUMP_PID https_run "squidbump-$round" "$N" "$TLS_PORT" "$WORK/bump-ca.pem" "127.0.0.1:$BUMP_PORT"
      SQUID_DID[https-$round]=$(squid_did "$sq_before" "$(squid_counters "$BUMP_PORT")")
    fi
    if [[ -n $MITMDUMP ]]; then
      HTTPS_PID=$MITM_PID https_run "mitmproxy-$round" $((N / 10)) "$TLS_PORT" "$WORK/mitm/mitmproxy-ca-cert.pem" "127.0.0.1:$MITM_PORT"
    fi
  done
  # The median round of each peer, by req/s.
  https_median() { { cat "$WORK"/https-"$1"-*.sum 2>/dev/null || true; } | sort -k2,2n | awk -v m=$(((ROUNDS + 1) / 2)) 'NR == m'; }
  echo
  printf '%-6s %-9s %9s %9s %9s %8s %9s %9s %9s %12s %11s %s\n' path peer req/s p50_ms p99_ms failed vs_direct vs_relay vs_sqbump vs_mitmproxy cpu_us/req "rounds (req/s)"
  d=$(https_median direct | awk '{print $2}')
  rl=$(https_median relay | awk '{print $2}')
  sb=$(https_median squidbump | awk '{print $2}'); sb=${sb:-0}
  m=$(https_median mitmproxy | awk '{print $2}'); m=${m:-0}
  for peer in direct relay stack squidbump mannerly before mitmproxy; do
    line=$(https_median "$peer"); [[ -n $line ]] || continue
    read -r name r p50 p99 bad cpu idle <<<"$line"
    sched=$(cat "$WORK/https-$name.sched" 2>/dev/null || true)
    [[ -n $sched ]] && cpu="$cpu${sched}"
    [[ $idle != - && -n $idle ]] && cpu="$cpu (CPU 1 idle $idle%)"
    all=$(for ((round = 1; round <= ROUNDS; round++)); do awk '{print $2}' "$WORK/https-$peer-$round.sum"; done | paste -sd/)
    printf '%-6s %-9s %9s %9s %9s %8s %9s %9s %9s %12s %11s %s\n' https "$peer" "$r" "$p50" "$p99" "$bad" \
      "$(ratio "$r" "$d")" "$(ratio "$r" "${rl:-0}")" "$(ratio "$r" "$sb")" "$(ratio "$r" "$m")" "$cpu" "$all"
  done
  if [[ -n $BUMP_PID ]]; then
    for ((round = 1; round <= ROUNDS; round++)); do
      echo "https, squidbump round $round: ${SQUID_DID[https-$round]} (CONNECTs included)"
    done
    echo "squidbump: $(find "$WORK/bump-certs/certs" -name '*.pem' | wc -l) host certificate(s) made by its CA, $(squid_objects "$BUMP_PORT") objects on disk ($SQUID_STORE)"
  fi
fi

# --- the issue's goals, run by run ------------------------------------------
# A ratio of two peers is taken within each round (the peers ran one after
# the other in it), so a goal is met when it holds in every round, not in
# the medians alone. One line per goal: each round's ratio, their median
# and range, and in how many rounds it held.
val() { # path peer round rps|p99|cpu
  local f
  if [[ $1 == https ]]; then
    f=$WORK/https-$2-$3.sum
    [[ -f $f ]] || return 0
    case $4 in rps) awk '{print $2}' "$f" ;; p99) awk '{print $4}' "$f" ;; cpu) awk '{print $6}' "$f" ;; esac
  else
    [[ -f $WORK/wrk-$1-$2-$3.txt ]] || return 0
    case $4 in rps) rps "$1-$2-$3" ;; p99) ms "$1-$2-$3" 99% ;; cpu) cpu_us "$1-$2-$3" "${USED[$1-$2-$3]:-0}" ;; esac
  fi
}
goal() { # path what peer base le|ge limit
  local path=$1 what=$2 peer=$3 base=$4 op=$5 limit=$6 r a b ratios=()
  for ((r = 1; r <= ROUNDS; r++)); do
    a=$(val "$path" "$peer" "$r" "$what"); b=$(val "$path" "$base" "$r" "$what")
    [[ -n $a && -n $b && $a != - && $b != - ]] || return 0
    ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN{ if (b > 0) printf "%.2f", a / b; else print "inf" }')")
  done
  # Sorted for the median and range (mawk has no asort); the rounds in
  # order come first, on one line.
  { echo "${ratios[*]}"; printf '%s\n' "${ratios[@]}" | sort -g; } | awk -v path="$path" -v what="$what" \
    -v name="$peer/$base" -v op="$op" -v limit="$limit" '
    NR == 1 { line = $0; next }
    { n++; s[n] = $1; if ((op == "le" && $1 <= limit) || (op == "ge" && $1 >= limit)) met++ }
    END {
      printf "%-7s %-4s %-20s %-16s median %5s  range %s-%s  goal %s %s: met in %d of %d\n", path, what, name, line,
        s[int((n + 1) / 2)], s[1], s[n], (op == "le" ? "<=" : ">="), limit, met + 0, n }'
}
if [[ " $PEERS " == *" mannerly "* ]]; then
  echo; echo "goals (issue 52), per round:"
  for path in $PATHS; do
    case $path in plain | reval) base=squid ;; fresh | recrawl) base=squiddisk ;; https) base=squidbump ;; esac
    case $path in plain | reval) goal "$path" cpu mannerly stack le 1.6 ;; https) goal https cpu mannerly stack le 1.3 ;; esac
    goal "$path" rps mannerly "$base" ge 2
    goal "$path" p99 mannerly "$base" le 1
    # No path slower than before (BENCH_BEFORE).
    goal "$path" rps mannerly before ge 1
    goal "$path" cpu mannerly before le 1
  done
fi

if [[ ${BENCH_PERF:-0} == 1 ]]; then
  for path in $PATHS; do
    echo; echo "== perf, ${BENCH_PERF_PEER:-mannerly}, $path: top symbols (self time) =="
    perf report -i "$WORK/perf-$path.data" --no-children --sort symbol --stdio -g none --percent-limit 1.5 2>/dev/null | sed -E "s/ +-? +-? *$//" \
      | grep -v '^#' | grep -v '^$' | head -25
  done
fi
echo
[[ " $PEERS " == *" squiddisk "* ]] && echo "squiddisk: $(squid_objects) objects on disk ($SQUID_STORE)"
slow=$(for t in "${!SETTLED[@]}"; do if ((SETTLED[$t] >= 500)); then echo "$t ${SETTLED[$t]} ms"; fi; done | sort | paste -sd, | sed 's/,/, /g')
echo "busy for 0.5 s or more after a run (counted in its CPU): ${slow:-none}"
echo "mannerly audit: $(outcomes revalidated) revalidated, $(cat "$WORK"/data/audit.jsonl* | grep -c '"cache":"stored"' || true) stored, $(cat "$WORK"/data/audit.jsonl* | wc -l) lines in $(ls "$WORK"/data/audit.jsonl* | wc -l) file(s)"
"$MANNERLY" audit verify "$WORK/data" >/dev/null 2>&1 && echo "audit chain: intact" || echo "audit chain: see mannerly audit verify (end unsealed while running is expected)"
if [[ ${BENCH_PIN:-0} == 1 ]]; then
  echo "(pinned: proxy under test on CPU 0, wrk/curl and the origin on CPU 1; ${DURATION}s per run, $CONNS connections (https $HTTPS_CONNS), median of $ROUNDS rounds)"
else
  echo "($(nproc) CPUs shared by origin, proxies and wrk; ${DURATION}s per run, $CONNS connections (https $HTTPS_CONNS), median of $ROUNDS rounds)"
fi
