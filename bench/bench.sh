#!/usr/bin/env bash
# bench/bench.sh - throughput and latency of promptcache's exact hits and
# pass-through, next to nginx as a caching proxy and as a plain proxy, all in
# the same run against the same fast static upstream (nginx `return 200`).
# Run on demand (`make bench`); never part of the tests. Numbers drift on
# shared machines: read the ratios, which are measured in one run.
#
#   DURATION=10s CONNS=64 THREADS=1 WORKERS=1 bench/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-1}
WORKERS=${WORKERS:-1}
bin=${PROMPTCACHE_BIN:-$top/build/promptcache}

need=()
for p in wrk nginx redis-server curl; do command -v $p >/dev/null || need+=("$p"); done
if [ ${#need[@]} -gt 0 ]; then
    sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    pkgs=(); for p in "${need[@]}"; do [ "$p" = redis-server ] && pkgs+=(redis-server) || pkgs+=("$p"); done
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi
[ -x "$bin" ] || make -s all

tmp=$(mktemp -d /tmp/pc-bench.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    [ -f "$tmp/nginx.pid" ] && kill "$(cat "$tmp/nginx.pid")" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 20000))
        (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo $p; return; }
    done
}
wait_port() {
    for _ in $(seq 1 200); do
        (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0
        sleep 0.05
    done
    echo "nothing listens on port $1" >&2
    return 1
}

UP=$(free_port); NGC=$(free_port); NGP=$(free_port); PC=$(free_port)
answer='{"id":"chatcmpl-bench","object":"chat.completion","created":1764687181,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"A fixed answer from the static upstream, long enough to look like a short completion."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":18,"total_tokens":42}}'
cat > "$tmp/body.json" <<'JSON'
{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the capital of France? Answer in one word."}],"temperature":0}
JSON

user_line=""; [ "$(id -u)" = 0 ] && user_line="user root;"
mkdir -p "$tmp/cache" "$tmp/logs"
cat > "$tmp/nginx.conf" <<CONF
$user_line
worker_processes $WORKERS;
pid $tmp/nginx.pid;
error_log $tmp/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $tmp/body; proxy_temp_path $tmp/proxy;
    fastcgi_temp_path $tmp/fcgi; uwsgi_temp_path $tmp/uwsgi; scgi_temp_path $tmp/scgi;
    client_body_buffer_size 64k;
    proxy_cache_path $tmp/cache keys_zone=llm:10m max_size=100m;
    upstream static { server 127.0.0.1:$UP; keepalive 64; }
    server {   # the fast static upstream
        listen 127.0.0.1:$UP;
        location / { default_type application/json; return 200 '$answer'; }
    }
    server {   # nginx as a caching proxy, keyed like promptcache's exact cache
        listen 127.0.0.1:$NGC;
        location / {
            proxy_pass http://static; proxy_http_version 1.1; proxy_set_header Connection "";
            proxy_cache llm; proxy_cache_methods POST; proxy_cache_valid 200 10m;
            proxy_cache_key "\$request_method\$request_uri\$http_authorization\$request_body";
            add_header X-Cache-Status \$upstream_cache_status;
        }
    }
    server {   # nginx as a plain pass-through proxy
        listen 127.0.0.1:$NGP;
        location / { proxy_pass http://static; proxy_http_version 1.1; proxy_set_header Connection ""; }
    }
}
CONF
nginx -p "$tmp" -c "$tmp/nginx.conf" -g 'daemon on;'
wait_port "$UP"; wait_port "$NGC"; wait_port "$NGP"

redis-server --port 0 --unixsocket "$tmp/redis.sock" --save "" --appendonly no \
    --daemonize no --logfile "$tmp/logs/redis.log" &
pids+=($!)
for _ in $(seq 1 100); do [ -S "$tmp/redis.sock" ] && break; sleep 0.05; done
"$bin" --listen "127.0.0.1:$PC" --upstream "http://127.0.0.1:$UP" --redis "unix:$tmp/redis.sock" \
    --workers "$WORKERS" --access-log off --log-level warn 2>"$tmp/logs/promptcache.log" &
pids+=($!)
wait_port "$PC"
for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$PC/readyz" >/dev/null 2>&1 && break
    sleep 0.05
done

# Warm both caches and check they really hit.
for port in $PC $NGC; do
    for _ in 1 2; do
        curl -s -o /dev/null -D "$tmp/h" -H 'Content-Type: application/json' \
            -H 'Authorization: Bearer sk-bench' --data-binary @"$tmp/body.json" \
            "http://127.0.0.1:$port/v1/chat/completions"
    done
    grep -qi 'x-cache-status: hit' "$tmp/h" || { echo "warm-up did not hit on port $port" >&2; cat "$tmp/h" >&2; exit 1; }
done

# Each case runs ROUNDS times, interleaved with the others (so drift on a
# shared machine hits every case alike); the median round is reported.
ROUNDS=${ROUNDS:-3}
declare -A results
run_once() { # key port path extra-headers
    BENCH_BODY="$tmp/body.json" BENCH_HEADERS="$4" wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" \
        -s bench/post.lua "http://127.0.0.1:$2$3" | grep '^RESULT'
}
val() { echo "$1" | sed -n "s/.*$2=\([0-9.]*\).*/\1/p"; }
# Median of a field over the rounds of one case.
median() { # key field
    local k=$1 f=$2
    for r in $(seq 1 "$ROUNDS"); do val "${results[$k.$r]}" "$f"; done | sort -g |
        awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

cases=(
    "up|upstream direct (nginx return 200)|$UP|/v1/chat/completions|"
    "ngc|nginx proxy_cache hit|$NGC|/v1/chat/completions|"
    "pch|promptcache exact hit|$PC|/v1/chat/completions|"
    "ngp|nginx pass-through|$NGP|/v1/chat/completions|"
    "pcp|promptcache pass-through (other path)|$PC|/v1/bench/passthrough|"
    "pcb|promptcache bypass (X-Cache-Mode: off)|$PC|/v1/chat/completions|X-Cache-Mode: off"
)
echo "wrk -t$THREADS -c$CONNS -d$DURATION x $ROUNDS rounds, $WORKERS worker(s) each, $(nproc) cores"
for r in $(seq 1 "$ROUNDS"); do
    for c in "${cases[@]}"; do
        IFS='|' read -r key _ port path hdrs <<<"$c"
        results[$key.$r]=$(run_once "$key" "$port" "$path" "$hdrs")
    done
done
printf '\n%-40s %10s %9s %9s   (medians)\n' "" "req/s" "p50 us" "p99 us"
for c in "${cases[@]}"; do
    IFS='|' read -r key name _ <<<"$c"
    printf '%-40s %10s %9s %9s\n' "$name" "$(median "$key" rps)" "$(median "$key" p50_us)" \
        "$(median "$key" p99_us)"
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
echo
echo "ratios (promptcache / nginx; req/s higher is better, latency lower is better)"
printf '  exact hit:     req/s %s   p50 %s   p99 %s\n' \
    "$(ratio "$(median pch rps)" "$(median ngc rps)")" \
    "$(ratio "$(median pch p50_us)" "$(median ngc p50_us)")" \
    "$(ratio "$(median pch p99_us)" "$(median ngc p99_us)")"
printf '  pass-through:  req/s %s   p50 %s   p99 %s\n' \
    "$(ratio "$(median pcp rps)" "$(median ngp rps)")" \
    "$(ratio "$(median pcp p50_us)" "$(median ngp p50_us)")" \
    "$(ratio "$(median pcp p99_us)" "$(median ngp p99_us)")"
