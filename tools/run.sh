#!/usr/bin/env bash
# tools/run.sh - the "main job" behind `make run`: starts a private
# redis-server (data and socket under var/redis, no TCP port) and the proxy in
# the foreground with conf/promptcache.conf; stops Redis when the proxy exits.
#
#   UPSTREAM   upstream base URL (default https://api.openai.com), or "mock":
#              the project's mock upstream (tests/mock/upstream.js, node), which
#              speaks the OpenAI and Anthropic APIs and needs no API key
#   LISTEN     host:port to listen on (default 127.0.0.1:8080)
#   PROMPTCACHE_ARGS  extra `--key value` options for the proxy
#   RUN_VAR    where the private Redis keeps its socket and data (default var/redis)
#
# The private Redis keeps its data across runs (var/redis/dump.rdb: a
# snapshot a minute after a change, and one when the proxy exits), so the
# cache and the report history survive a restart. The builtin embedder's
# word vectors are fetched (make vectors) only when the configuration needs
# them: semantic yes with embedder builtin and no embedder-vectors file named.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
UPSTREAM=${UPSTREAM:-https://api.openai.com}
LISTEN=${LISTEN:-127.0.0.1:8080}
bin=${PROMPTCACHE_BIN:-$top/build/promptcache}
var=${RUN_VAR:-$top/var/redis}
sock=$var/redis.sock
mkdir -p "$var"

host=${LISTEN%:*}
port=${LISTEN##*:}
# A port already taken: said before anything starts (the banner below would
# tell the user to point clients at someone else's server).
probe_host=${host#[}
probe_host=${probe_host%]}
[ "$probe_host" = 0.0.0.0 ] && probe_host=127.0.0.1
[ "$probe_host" = :: ] && probe_host=::1
if [ "$port" != 0 ] && (exec 3<>"/dev/tcp/$probe_host/$port") 2>/dev/null; then
    echo "make run: something already listens on $LISTEN (an earlier make run?);" \
        "stop it, or choose another address: make run LISTEN=$host:$((port + 1))" >&2
    exit 1
fi

redis_alive() {
    [ -S "$sock" ] && redis-cli -s "$sock" ping 2>/dev/null | grep -q PONG
}

# The effective value of a key (promptcache -T), for the options this run uses.
# shellcheck disable=SC2086
effective() {
    "$bin" -T conf/promptcache.conf --listen "$LISTEN" ${PROMPTCACHE_ARGS:-} 2>/dev/null |
        awk -v k="$1" '$1 == k { print $2; exit }'
}

if [ "$(effective semantic)" = yes ] && [ "$(effective embedder)" = builtin ] &&
    [ "$(effective embedder-vectors)" = '""' ]; then
    make --no-print-directory vectors
fi

started_redis=0
if ! redis_alive; then
    rm -f "$sock"
    redis-server --port 0 --unixsocket "$sock" --unixsocketperm 700 --dir "$var" \
        --daemonize yes --pidfile "$var/redis.pid" --logfile "$var/redis.log" \
        --save 60 1 --appendonly no >/dev/null
    started_redis=1
    for _ in $(seq 1 100); do
        redis_alive && break
        sleep 0.05
    done
    redis_alive || { echo "redis-server did not start; see $var/redis.log" >&2; exit 1; }
fi

mock_pid=
stop_all() {
    if [ -n "$mock_pid" ]; then
        kill "$mock_pid" 2>/dev/null || true
    fi
    if [ "$started_redis" = 1 ] && redis_alive; then
        # SHUTDOWN SAVE: the next run starts with this run's cache and counters
        redis-cli -s "$sock" shutdown save >/dev/null 2>&1 || true
    fi
}
trap stop_all EXIT

upstream_shown=$UPSTREAM
if [ "$UPSTREAM" = mock ]; then
    command -v node >/dev/null || { echo "UPSTREAM=mock needs node (make deps-node)" >&2; exit 1; }
    out=$var/mock-upstream.out
    : >"$out"
    # In a session of its own: Ctrl-C reaches the proxy, which finishes the
    # requests in flight, not the mock they wait on (stop_all ends it after).
    setsid node tests/mock/upstream.js --port 0 >"$out" 2>&1 &
    mock_pid=$!
    for _ in $(seq 1 100); do
        grep -q '^listening ' "$out" && break
        sleep 0.05
    done
    addr=$(awk '/^listening / { print $2; exit }' "$out")
    [ -n "$addr" ] || { echo "the mock upstream did not start:" >&2; cat "$out" >&2; exit 1; }
    UPSTREAM=http://$addr
    upstream_shown="the mock upstream ($UPSTREAM: OpenAI and Anthropic APIs, any key works)"
fi

key_hint='$OPENAI_API_KEY'
[ -n "$mock_pid" ] && key_hint='sk-anything'
cat <<MSG

  promptcache on http://$LISTEN  ->  $upstream_shown
  Redis: private, unix:$sock (kept across runs in $var)

  Point a client at it (credentials pass through to the upstream):
    export OPENAI_BASE_URL=http://$host:$port/v1        # openai SDKs
    export ANTHROPIC_BASE_URL=http://$host:$port        # anthropic SDKs (with UPSTREAM=https://api.anthropic.com)
    curl http://$host:$port/v1/chat/completions -H "Authorization: Bearer $key_hint" \\
         -H 'Content-Type: application/json' \\
         -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello"}]}' -i
  Hit rate and counters: http://$host:$port/stats   dashboard: http://$host:$port/dashboard
  Ctrl-C stops the proxy (in-flight requests finish) and the private Redis.

MSG
type_args=()
case "$UPSTREAM" in
*anthropic.com*) type_args=(--upstream-type anthropic) ;;
esac
set +e
# shellcheck disable=SC2086
"$bin" conf/promptcache.conf --listen "$LISTEN" --upstream "$UPSTREAM" --redis "unix:$sock" \
    "${type_args[@]}" ${PROMPTCACHE_ARGS:-}
status=$?
exit $status
