#!/usr/bin/env bash
# The overload figures of docs/benchmarks.md: `likewise bench overload` against one node of
# each engine, each node its own process with a 1 s request timeout (the client's timeout).
#   embedded:  likewise serve on a fresh temporary data directory
#   scale-out: likewise serve --role all on two fresh shard databases on the local PostgreSQL,
#              Redis and NATS JetStream on localhost (fresh key and stream prefixes)
# The node and the load client get cores of their own (taskset): the node SERVER_CPUS (default
# 1), the client CLIENT_CPUS (default 0); on a one-core machine neither is pinned. PostgreSQL,
# Redis and NATS are not pinned. The client's work per request is the same whether the node
# acknowledges or sheds it, so on shared cores a shed request costs the node the client's
# share too, and the figures measure the client.
# Usage: docs/bench/overload.sh [path/to/likewise] [extra bench options...]
# Prints each engine's report; the "summary" lines are the figures.
set -euo pipefail
LW=${1:-target/release/likewise}
shift || true
SECRET=overload-bench-secret-0123456789abcdef
export LIKEWISE__AUTH__SECRET=$SECRET LIKEWISE__SERVER__REQUEST_TIMEOUT_MS=1000
if [ "$(nproc)" -ge 2 ]; then
  SERVER_PIN=(taskset -c "${SERVER_CPUS:-1}")
  CLIENT_PIN=(taskset -c "${CLIENT_CPUS:-0}")
else
  SERVER_PIN=()
  CLIENT_PIN=()
fi
TMP=$(mktemp -d)
PID=""
prefix="lwov$(date +%s)"
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  for db in lw_overload_0 lw_overload_1; do dropdb --force --if-exists -h 127.0.0.1 -U postgres "$db"; done
  # The run's Redis keys (its NATS stream, "${prefix^^}_EVENTS", stays until deleted).
  redis-cli --scan --pattern "$prefix*" | xargs -r -n 500 redis-cli del >/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

# Start `likewise serve "$@"` on a free port and wait until it answers /healthz.
serve() {
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "${SERVER_PIN[@]}" "$LW" serve --listen "127.0.0.1:$port" "$@" >"$TMP/serve.log" 2>&1 &
  PID=$!
  URL="http://127.0.0.1:$port"
  for _ in $(seq 1 100); do
    curl -fs "$URL/healthz" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "the server did not start:" >&2
  cat "$TMP/serve.log" >&2
  exit 1
}

stop() {
  kill "$PID"
  wait "$PID" 2>/dev/null || true
  PID=""
}

echo "== embedded ($(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, node on ${SERVER_PIN[*]:-any}, client on ${CLIENT_PIN[*]:-any}, load $(cut -d' ' -f1-3 /proc/loadavg))"
serve --data-dir "$TMP/embedded"
"${CLIENT_PIN[@]}" "$LW" bench overload --url "$URL" "$@"
stop

echo "== scale-out: 2 PostgreSQL shards, Redis, NATS (load $(cut -d' ' -f1-3 /proc/loadavg))"
for db in lw_overload_0 lw_overload_1; do
  dropdb --force --if-exists -h 127.0.0.1 -U postgres "$db"
  createdb -h 127.0.0.1 -U postgres "$db"
done
cat >"$TMP/lw.toml" <<EOF
[store]
backend = "postgres"
postgres_shards = ["postgres://postgres@127.0.0.1:5432/lw_overload_0?sslmode=disable", "postgres://postgres@127.0.0.1:5432/lw_overload_1?sslmode=disable"]
[cache]
redis_url = "redis://127.0.0.1:6379/0"
redis_prefix = "$prefix"
[stream]
nats_url = "nats://127.0.0.1:4222"
prefix = "$prefix"
EOF
"$LW" migrate --config "$TMP/lw.toml" >/dev/null
serve --config "$TMP/lw.toml" --role all --data-dir "$TMP/scaleout"
"${CLIENT_PIN[@]}" "$LW" bench overload --url "$URL" "$@"
stop
