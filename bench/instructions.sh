#!/usr/bin/env bash
# bench/instructions.sh - CPU instructions the proxy spends per request,
# counted by valgrind's callgrind: repeatable on a noisy shared machine where
# wall-clock numbers drift. Measures an exact hit, misses (a short and a 4 KiB
# chat answer, a 1536-float embedding, a streamed answer), an X-Cache-Mode: off bypass and a
# pass-through, N requests each on one keep-alive connection, against the mock
# upstream.
#
#   N=2000 bench/instructions.sh [BINARY]
# Compare two builds by running it for each (same N, same machine).
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
bin=${1:-${PROMPTCACHE_BIN:-$top/build/promptcache}}
N=${N:-2000}
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
tmp=$(mktemp -d /tmp/pc-instr.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

redis-server --port 0 --unixsocket "$tmp/redis.sock" --save "" --appendonly no --daemonize no \
    --logfile "$tmp/redis.log" &
pids+=($!)
node tests/mock/upstream.js --port 0 > "$tmp/mock.out" &
pids+=($!)
for _ in $(seq 1 100); do [ -S "$tmp/redis.sock" ] && grep -q listening "$tmp/mock.out" && break; sleep 0.05; done
mock=$(sed -n 's/^listening //p' "$tmp/mock.out")

valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$tmp/cg.%p" \
    "$bin" --listen 127.0.0.1:0 --upstream "http://$mock" --redis "unix:$tmp/redis.sock" \
    --workers 1 --access-log off --log-level notice 2> "$tmp/proxy.log" &
vg=$!
pids+=($vg)
for _ in $(seq 1 400); do grep -q "listening on" "$tmp/proxy.log" 2>/dev/null && break; sleep 0.05; done
addr=$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$tmp/proxy.log")
for _ in $(seq 1 400); do
    node -e "fetch('http://$addr/readyz').then(r=>process.exit(r.status===200?0:1),()=>process.exit(1))" && break
    sleep 0.1
done

# $1 name, $2 path, $3 extra header JSON, $4 "unique" for a new body each time;
# prints Ir per request.
measure() {
    node tools/bench-client.js "http://$addr" "$2" 1 "$3" "${4:-}" >/dev/null   # warm
    callgrind_control -z "$vg" >/dev/null 2>&1
    callgrind_control -i on "$vg" >/dev/null 2>&1
    node tools/bench-client.js "http://$addr" "$2" "$N" "$3" "${4:-}" >/dev/null
    callgrind_control -i off "$vg" >/dev/null 2>&1
    callgrind_control -d "$vg" >/dev/null 2>&1
    local f; f=$(ls -t "$tmp"/cg.* | head -1)
    local ir; ir=$(sed -n "s/^totals: *\([0-9]*\).*/\1/p" "$f" | head -1)
    printf '%-34s %10.0f instructions/request\n' "$1" "$(awk -v a="$ir" -v n="$N" 'BEGIN{print a/n}')"
    [ -z "${KEEP_CG:-}" ] || cp "$f" "$KEEP_CG.$(echo "$1" | tr -c "a-z\n" _)"
    rm -f "$f"
}
echo "promptcache under callgrind, N=$N requests each, one connection"
measure "exact hit (chat)" /v1/chat/completions '{}'
measure "miss (chat, new question each)" /v1/chat/completions '{}' unique
measure "miss (chat, 4 KiB answer)" /v1/chat/completions '{"x-mock-size":"4096"}' unique
measure "miss (embeddings, 1536 floats)" /v1/embeddings '{}' unique
measure "miss (chat, streamed)" /v1/chat/completions '{}' stream
measure "bypass (X-Cache-Mode: off)" /v1/chat/completions '{"x-cache-mode":"off"}'
measure "pass-through (other path)" /v1/other '{}'
