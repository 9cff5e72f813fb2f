#!/usr/bin/env bash
# tools/run.sh - the "main job" behind `make run`: starts a private
# redis-server (data and socket under var/redis, no TCP port) and the proxy in
# the foreground with conf/promptcache.conf; stops Redis when the proxy exits.
#
#   UPSTREAM   upstream base URL (default https://api.openai.com)
#   LISTEN     host:port to listen on (default 127.0.0.1:8080)
#   PROMPTCACHE_ARGS  extra `--key value` options for the proxy
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
UPSTREAM=${UPSTREAM:-https://api.openai.com}
LISTEN=${LISTEN:-127.0.0.1:8080}
bin=${PROMPTCACHE_BIN:-$top/build/promptcache}
var=$top/var/redis
sock=$var/redis.sock
mkdir -p "$var"

redis_alive() {
    [ -S "$sock" ] && redis-cli -s "$sock" ping 2>/dev/null | grep -q PONG
}

started_redis=0
if ! redis_alive; then
    rm -f "$sock"
    redis-server --port 0 --unixsocket "$sock" --unixsocketperm 700 --dir "$var" \
        --daemonize yes --pidfile "$var/redis.pid" --logfile "$var/redis.log" \
        --save 300 100 --appendonly no >/dev/null
    started_redis=1
    for _ in $(seq 1 100); do
        redis_alive && break
        sleep 0.05
    done
    redis_alive || { echo "redis-server did not start; see $var/redis.log" >&2; exit 1; }
fi

stop_redis() {
    if [ "$started_redis" = 1 ] && redis_alive; then
        redis-cli -s "$sock" shutdown nosave >/dev/null 2>&1 || true
    fi
}
trap stop_redis EXIT

host=${LISTEN%:*}
port=${LISTEN##*:}
cat <<MSG

  promptcache on http://$LISTEN  ->  $UPSTREAM
  Redis: private, unix:$sock

  Point a client at it (credentials pass through to the upstream):
    export OPENAI_BASE_URL=http://$host:$port/v1        # openai SDKs
    export ANTHROPIC_BASE_URL=http://$host:$port        # anthropic SDKs (with UPSTREAM=https://api.anthropic.com)
    curl http://$host:$port/v1/chat/completions -H "Authorization: Bearer \$OPENAI_API_KEY" \\
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
