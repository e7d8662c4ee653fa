#!/usr/bin/env bash
# The measurements behind docs/capacity.md, rerunnable: bash docs/capacity/measure.sh STEP
# from the repository root, with the release binary built. It starts its OWN PostgreSQL 15
# cluster, Redis and NATS (JetStream) on spare ports under $W, so WAL positions, Redis
# INFO commandstats and NATS counters see this load alone; `stop` removes them all.
#
# The steps, in the order they were run for docs/capacity.md (each prints its figures):
#   start     initdb + pg_ctl start (as the postgres user), redis-server, nats-server -js;
#             migrate two shards; one API node (serve --role api), one worker (--role worker)
#   register  200,000 posts by 50,000 authors
#   like      1,000,000 likes (Zipf 1.0 over the posts, likers uniform over 5M users); WAL,
#             CPU, Redis commands and stream counters at the last answer; then waits for the
#             reverse index and the aggregators; statements and WAL per like; table sizes
#   redis     MEMORY USAGE of every key, summed per key family (right after `like`)
#   consumers drain rates over 60 s (notifier, trending, ...), WAL per notified event; a rerun
#             on the same engines needs another SEED (the same likes again change nothing);
#             WORKERS=2 starts two worker processes for the drain (step consumers_w2)
#   comment   20,000 comments of 40-140 characters on Zipf-chosen posts; table sizes after
#   feed      20,000 feed pages of 20 posts; Redis commands and shard statements per page
#   jetstream publish/consume rate and nats-server CPU per message (js_bench.py, nats-py)
#   embedded  the same register + like load on the embedded store; du of its keyspaces
#   stop      stop everything started here and delete $W
set -euo pipefail
BIN=${BIN:-$PWD/target/release/likewise}
HERE=$(cd "$(dirname "$0")" && pwd)
W=${W:-/tmp/lwcap}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGPORT=55432; REDISPORT=16379; NATSPORT=14222; NATSMON=18222
API=127.0.0.1:18480; EMB=127.0.0.1:18481
SECRET=capacity-measurement-secret-0123
PSQL="psql -h 127.0.0.1 -p $PGPORT -U postgres -X -q -At"
RCLI="redis-cli -p $REDISPORT"

config() {
  cat > "$W/lw.toml" <<EOT
[server]
listen = "$API"
[store]
backend = "postgres"
postgres_shards = ["postgres://postgres@127.0.0.1:$PGPORT/lwcap_s0", "postgres://postgres@127.0.0.1:$PGPORT/lwcap_s1"]
data_dir = "$W/data"
[cache]
redis_url = "redis://127.0.0.1:$REDISPORT/0"
redis_prefix = "lwcap"
[stream]
nats_url = "nats://127.0.0.1:$NATSPORT"
prefix = "lwcap"
[auth]
secret = "$SECRET"
[limits]
likes_per_minute = 0
EOT
  cat > "$W/emb.toml" <<EOT
[server]
listen = "$EMB"
[store]
data_dir = "$W/emb"
[auth]
secret = "$SECRET"
[limits]
likes_per_minute = 0
EOT
}

# CPU seconds so far of each component (utime + stime; PostgreSQL adds its exited children).
cpu() {
  local hz pm; hz=$(getconf CLK_TCK); pm=$(head -1 "$W/pg/postmaster.pid")
  for p in api worker redis nats; do
    [ -f "$W/$p.pid" ] && [ -e /proc/"$(cat "$W/$p.pid")" ] && awk -v hz="$hz" -v n="$p" '{ print n, ($14 + $15) / hz }' /proc/"$(cat "$W/$p.pid")"/stat
  done
  { cat /proc/"$pm"/stat; for c in $(pgrep -P "$pm"); do cat /proc/"$c"/stat 2>/dev/null || true; done; } |
    awk -v hz="$hz" -v pm="$pm" '{ s += $14 + $15; if ($1 == pm) s += $16 + $17 } END { print "postgres", s / hz }'
}

wal() { $PSQL -d postgres -c "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"; }

sizes() {
  for db in lwcap_s0 lwcap_s1; do
    $PSQL -d $db -F ' ' -c "SELECT c.relname, pg_total_relation_size(c.oid), pg_relation_size(c.oid),
                                   coalesce(s.n_live_tup, 0)
                            FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
                            WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace"
  done | awk '{ t[$1] += $2; h[$1] += $3; n[$1] += $4 } END { for (k in t) if (t[k] > 16384) printf "%-20s total %12d heap %12d rows %10d\n", k, t[k], h[k], n[k] }' | sort
}

rows() {
  for db in lwcap_s0 lwcap_s1; do
    $PSQL -d $db -c "SELECT (SELECT count(*) FROM likes) || ' ' || (SELECT count(*) FROM user_likes) || ' ' ||
                            (SELECT count(*) FROM notif_actors) || ' ' || (SELECT count(*) FROM outbox WHERE stream_seq IS NULL)"
  done | awk '{ a += $1; b += $2; c += $3; d += $4 } END { print "likes", a, "user_likes", b, "notif_actors", c, "unrelayed", d }'
}

redis_stats() { $RCLI INFO commandstats | tr -d '\r' | grep '^cmdstat_' | sed 's/cmdstat_//; s/:calls=/ /; s/,.*//'; }

stream() { curl -s "http://127.0.0.1:$NATSMON/jsz?streams=true" | python3 -c '
import json, sys
j = json.load(sys.stdin)
for a in j.get("account_details", []):
    for s in a.get("stream_detail", []):
        st = s["state"]; print(s["name"], "messages", st["messages"], "bytes", st["bytes"])'; }

snapshot() {
  { echo "== $1 $(date -u +%FT%TZ)"; echo "wal $(wal)"; cpu; rows; stream
    for db in lwcap_s0 lwcap_s1; do
      $PSQL -d $db -c "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
    done | awk '{ s += $1 } END { print "pg_statements", s }'
    echo "xacts $(xacts)"; } | tee "$W/snap.$1"
  redis_stats > "$W/redis.$1"
}

# Transactions committed or rolled back on the shard databases so far.
xacts() {
  $PSQL -d postgres -c "SELECT sum(xact_commit + xact_rollback) FROM pg_stat_database WHERE datname LIKE 'lwcap_s%'"
}

# The figures of step $1 into docs/capacity/measured.json (docs/capacity/figures.py).
figures() { W="$W" python3 "$HERE/figures.py" "$1"; }

# A reader's position in the stream, from the worker's /metrics (0 before its first commit).
positions() {
  # Every worker process's (each partition is read by one of them).
  for port in $(cat "$W"/worker*.port 2>/dev/null || echo 18482); do
    curl -s "http://127.0.0.1:$port/metrics" | awk -F'[{}"]' '/^likewise_stream_consumer_position\{/ { split($NF, v, " "); print $3, v[1] }'
  done
}

# Whether a partitioned consumer's partitions (the notifier's, trending's: $1) have read and
# committed everything: each partition's committed position (the worker's /metrics) stands at
# its own last message (the last of its subjects, `<prefix>.events.<shard>.<part>`, on either
# shard). One process reads them all through one stream consumer, acknowledged as it reads, so
# the stream consumer's own counts say nothing of what the partitions committed.
parts_drained() {
  positions > "$W/positions.now"
  python3 - "$1" "$NATSPORT" "$W/positions.now" <<'PY'
import asyncio, sys
import nats
async def main():
    consumer, port, pos_file = sys.argv[1], sys.argv[2], sys.argv[3]
    pos = dict(l.split() for l in open(pos_file) if l.strip())
    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    js = nc.jetstream()
    ok = True
    for part in range(64):
        last = 0
        for shard in (0, 1):
            try:
                m = await js.get_last_msg("LWCAP_EVENTS", f"lwcap.events.{shard}.{part}")
                last = max(last, m.seq)
            except nats.js.errors.NotFoundError:
                pass
        if last and int(pos.get(f"{consumer}.p{part}", 0)) != last:
            ok = False
            break
    await nc.close()
    print("yes" if ok else "no")
asyncio.run(main())
PY
}

offsets() {
  for db in lwcap_s0 lwcap_s1; do $PSQL -d $db -c "SELECT consumer || '=' || upto FROM consumer_offsets"; done | sort | tr '\n' ' '; echo
}

drain() {
  # Until every like is in the reverse index, nothing is unrelayed, both shards' counter
  # aggregators reached the stream's end and the readers of the whole stream (notifier,
  # trending, integrity) stand at its last sequence.
  local last
  for _ in $(seq 1 900); do
    read -r _ l _ u _ _ _ q < <(rows)
    last=$(last_seq)
    # A shard's aggregator is done when it stands where the shard's reverse-index writer does
    # (both read the shard's messages, and l = u says that writer has applied them all).
    if [ "$l" = "$u" ] && [ "$q" = 0 ] &&
       [ "$(parts_drained notifications)" = yes ] && [ "$(parts_drained trending)" = yes ] &&
       [ "$(positions | awk -v s="$last" '{ p[$1] = $2 } $1 !~ /^(counters|reverse|notifications\.p|trending\.p)/ && $2 != s { bad++ }
            END { for (k in p) if (k ~ /^counters-/) { r = k; sub(/^counters/, "reverse", r); if (p[k] != p[r]) bad++ }; print bad + 0 }')" = 0 ]; then return; fi
    sleep 2
  done
  echo "did not drain in 30 minutes" >&2; exit 1
}

# The stream's last sequence.
last_seq() { curl -s "http://127.0.0.1:$NATSMON/jsz?streams=true" | python3 -c '
import json, sys
j = json.load(sys.stdin)
print(sum(s["state"]["last_seq"] for a in j.get("account_details", []) for s in a.get("stream_detail", [])))'; }

# Worker process $1 (0 unless given; /metrics on 18482 + $1): worker.pid, worker1.pid, ...
start_worker() {
  local i=${1:-0} sfx=${1:+$1}
  "$BIN" serve --config "$W/lw.toml" --role worker --listen 127.0.0.1:$((18482 + i)) >> "$W/worker$sfx.log" 2>&1 & echo $! > "$W/worker$sfx.pid"
  echo $((18482 + i)) > "$W/worker$sfx.port"
}
# Every worker process.
stop_worker() {
  local f
  for f in "$W"/worker*.pid; do
    [ -e "$f" ] || continue
    kill -TERM "$(cat "$f")" 2>/dev/null || true
    while kill -0 "$(cat "$f")" 2>/dev/null; do sleep 0.2; done
    rm -f "$f" "${f%.pid}.port"
  done
}

# Wait until the node at $1 answers /healthz (a store replaying its journal takes a while).
wait_up() { for _ in $(seq 1 300); do curl -sf "http://$1/healthz" >/dev/null && return; sleep 0.2; done; echo "$1 did not start" >&2; exit 1; }

# Statements with their calls, rows and WAL, summed over the shards (pg_stat_statements).
statements() {
  for db in lwcap_s0 lwcap_s1; do
    $PSQL -d $db -F '|' -c "SELECT left(regexp_replace(query, '\s+', ' ', 'g'), 200), calls, rows, wal_bytes,
                                   total_exec_time + total_plan_time
                            FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
  done | awk -F'|' '{ c[$1] += $2; r[$1] += $3; w[$1] += $4; t[$1] += $5 } END { for (k in c) print k "|" c[k] "|" r[k] "|" w[k] "|" t[k] }' | sort -t'|' -k1,1
}

# Differences of two `statements` dumps: calls, rows, WAL bytes and executor + planner ms.
statements_delta() {
  join -t'|' -a2 -e0 -o 0,1.2,1.3,1.4,1.5,2.2,2.3,2.4,2.5 "$1" "$2" |
    awk -F'|' -v n="$3" '{ c = $6 - $2; if (c > 0) printf "%9d calls %7.2f per op  rows/call %6.1f  WAL/op %7.0f B  exec %6.1f us/call  %s\n", c, c / n, ($7 - $3) / c, ($8 - $4) / n, ($9 - $5) * 1000 / c, $1 }' | sort -rn
}

case "${1:-}" in
start)
  mkdir -p "$W"; config
  # The build measured (the binary is the checkout's: rebuild it after changing the checkout).
  { git -C "$HERE/../.." rev-parse --short=7 HEAD | tr -d '\n'
    [ -z "$(git -C "$HERE/../.." status --porcelain --untracked-files=no -- crates Cargo.lock)" ] || printf '+changes'
    echo; } > "$W/build"
  install -d -o postgres "$W/pg"   # PostgreSQL refuses to run as root
  runuser -u postgres -- "$PGBIN/initdb" -D "$W/pg" -U postgres --auth=trust >/dev/null
  cat >> "$W/pg/postgresql.conf" <<EOT
port = $PGPORT
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 200
shared_preload_libraries = 'pg_stat_statements'
EOT
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$W/pg" -l "$W/pg/server.log" -w start >/dev/null
  redis-server --port $REDISPORT --save '' --appendonly no --daemonize yes --pidfile "$W/redis.pid" --dir "$W"
  nats-server -js -p $NATSPORT -m $NATSMON -sd "$W/nats" > "$W/nats.log" 2>&1 & echo $! > "$W/nats.pid"
  sleep 1
  for db in lwcap_s0 lwcap_s1; do "$PGBIN/createdb" -h 127.0.0.1 -p $PGPORT -U postgres $db; \
    $PSQL -d $db -c "CREATE EXTENSION pg_stat_statements"; done
  "$BIN" migrate --config "$W/lw.toml"
  "$BIN" serve --config "$W/lw.toml" --role api > "$W/api.log" 2>&1 & echo $! > "$W/api.pid"
  "$BIN" serve --config "$W/lw.toml" --role worker --listen 127.0.0.1:18482 > "$W/worker.log" 2>&1 & echo $! > "$W/worker.pid"
  sleep 3; curl -sf "http://$API/healthz" >/dev/null && echo started ;;
register)
  python3 "$HERE/load.py" register --url $API --secret $SECRET ;;
like)
  snapshot before_like; statements > "$W/pss.before_like"
  /usr/bin/time -f "client cpu %U+%S s" python3 "$HERE/load.py" like --url $API --secret $SECRET | tee "$W/load.like.json"
  snapshot after_like_ack; statements > "$W/pss.after_like_ack"
  join -a2 -e0 -o 0,1.2,2.2 <(sort "$W/redis.before_like") <(sort "$W/redis.after_like_ack") | awk '{ printf "redis %-12s %9d per like %.3f\n", $1, $3 - $2, ($3 - $2) / 1e6 }'
  bash "$0" like-after ;;
like-after)
  # The rest of `like`, from the drain on (rerun it alone if the drain was interrupted).
  drain; snapshot after_like_drained; statements > "$W/pss.after_like_drained"
  statements_delta "$W/pss.before_like" "$W/pss.after_like_drained" 1000000 | head -25
  for db in lwcap_s0 lwcap_s1; do $PSQL -d $db -c "VACUUM ANALYZE"; done
  sizes | tee "$W/sizes.after"
  figures like ;;
consumers)
  # 1. Idle: what the deployment costs with no traffic (PostgreSQL transactions a second),
  #    with and without the worker.
  x0=$(xacts); sleep 10; x1=$(xacts); stop_worker; sleep 2; x2=$(xacts); sleep 10; x3=$(xacts)
  # 2. Drain: a backlog of likes made while no worker ran, then one worker process started.
  #    Each reader's drain time runs from the process start until its position reaches the
  #    stream's end (start-up and the relay's publishing included: a lower bound of its rate).
  python3 "$HERE/load.py" like --url $API --secret $SECRET --likes 40000 --seed "${SEED:-11}" > "$W/load.backlog.json"
  #    WORKERS=N starts N worker processes at once (the partitioned consumers' partitions
  #    shared between them); its figures go to step consumers_wN.
  m0=$(last_seq); w0=$(wal); t0=$(date +%s.%N)
  for i in $(seq 0 $(( ${WORKERS:-1} - 1 ))); do if [ "$i" = 0 ]; then start_worker; else start_worker "$i"; fi; done
  declare -A done_at=()
  for _ in $(seq 1 3000); do
    sleep 0.1
    read -r _ _ _ _ _ _ _ q < <(rows)
    [ "$q" = 0 ] || continue
    last=$(last_seq)
    while read -r name pos; do
      # A partitioned consumer's shared stream reader (`notifications.shared-...`) is not one
      # of the readers: its partitions are (below),
      # nor is a partition's reader (`notifications.p7`), whose last message may be the last.
      case $name in *.shared-*|*.p[0-9]*) continue ;; esac
      if [ -z "${done_at[$name]:-}" ] && [ "$pos" = "$last" ]; then done_at[$name]=$(date +%s.%N); fi
    done < <(positions)
    # A partitioned consumer (the notifier, trending): done once all its partitions are.
    for c in notifications trending; do
      if [ -z "${done_at[$c]:-}" ] && [ "$(parts_drained $c)" = yes ]; then done_at[$c]=$(date +%s.%N); fi
    done
    # Done when the whole-stream readers reached the end and both aggregators' offsets did.
    # A shard's readers (aggregator, reverse index) are done when both stand at the same
    # position and every like is in the reverse index.
    read -r _ l _ u _ < <(rows)
    while read -r name pos; do
      case $name in counters-*) r=reverse-${name#counters-}
        if [ -z "${done_at[$name]:-}" ] && [ "$l" = "$u" ] && [ "$pos" = "$(positions | awk -v r="$r" '$1 == r { print $2 }')" ]; then
          done_at[$name]=$(date +%s.%N); done_at[$r]=${done_at[$r]:-${done_at[$name]}}; fi ;;
      esac
    done < <(positions)
    if [ -n "${done_at[notifications]:-}" ] && [ -n "${done_at[trending]:-}" ] && [ -n "${done_at[integrity]:-}" ] &&
       [ -n "${done_at[counters-0]:-}" ] && [ -n "${done_at[counters-1]:-}" ]; then
      break
    fi
  done
  w1=$(wal); sleep 1
  read -r wcpu < <(cat "$W"/worker*.pid | while read -r pid; do cat /proc/"$pid"/stat; done | awk -v hz="$(getconf CLK_TCK)" '{ s += ($14 + $15) / hz } END { print s }')
  { printf '{"idle_pg_transactions_per_s": %s, "idle_worker_pg_transactions_per_s": %s,' \
      "$(awk -v a="$x0" -v b="$x1" -v c="$x2" -v d="$x3" 'BEGIN { print (d - c) / 10 }')" "$(awk -v a="$x0" -v b="$x1" -v c="$x2" -v d="$x3" 'BEGIN { print ((b - a) - (d - c)) / 10 }')"
    printf ' "likes": %s, "messages": %s, "wal": %s, "worker_cpu_s": %s, "messages_of": {}, "drained_after_s": {' \
      "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["distinct"])' "$W/load.backlog.json")" \
      "$(( last - m0 ))" "$(( w1 - w0 ))" "$wcpu"
    sep=""; for k in "${!done_at[@]}"; do printf '%s"%s": %s' "$sep" "$k" "$(awk -v a="${done_at[$k]}" -v b="$t0" 'BEGIN { print a - b }')"; sep=", "; done
    echo "}}"; } | tee "$W/consumers.json"
  if [ "${WORKERS:-1}" = 1 ]; then figures consumers; else cp "$W/consumers.json" "$W/consumers_w$WORKERS.json"; figures "consumers_w$WORKERS"; fi ;;
comment)
  snapshot before_comment
  /usr/bin/time -f "client cpu %U+%S s" python3 "$HERE/load.py" comment --url $API --secret $SECRET --comments 20000 | tee "$W/load.comment.json"
  sleep 15; snapshot after_comment
  for db in lwcap_s0 lwcap_s1; do $PSQL -d $db -c "VACUUM ANALYZE"; done
  sizes | tee "$W/sizes.after_comment"
  figures comment ;;
feed)
  # The API node's reads alone: the worker is stopped meanwhile (as after a worker outage:
  # cached counts go stale and are refreshed by the API node).
  stop_worker
  snapshot before_feed; statements > "$W/pss.before_feed"
  /usr/bin/time -f "client cpu %U+%S s" python3 "$HERE/load.py" feed --url $API --secret $SECRET --pages 20000 | tee "$W/load.feed.json"
  snapshot after_feed; statements > "$W/pss.after_feed"
  statements_delta "$W/pss.before_feed" "$W/pss.after_feed" 20000 | head -20
  join -a2 -e0 -o 0,1.2,2.2 <(sort "$W/redis.before_feed") <(sort "$W/redis.after_feed") | awk '{ printf "redis %-12s %9d per page %.3f\n", $1, $3 - $2, ($3 - $2) / 20000 }'
  start_worker
  figures feed ;;
redis)
  # Right after `like`: the own-likes bucket still holds that load's records.
  $RCLI --scan --pattern 'lwcap:*' > "$W/keys.txt"
  sed 's/^/MEMORY USAGE /; s/$/ SAMPLES 0/' "$W/keys.txt" | $RCLI > "$W/mem.txt"
  awk '{ print ($0 ~ /:olz:/ ? "ZCARD " : "HLEN ") $0 }' "$W/keys.txt" | $RCLI > "$W/hlen.txt"
  paste -d' ' "$W/keys.txt" "$W/mem.txt" "$W/hlen.txt" |
    awk '{ f = $1; sub(/^lwcap:/, "", f); split(f, p, ":"); fam = p[1]; if (fam == "c") fam = "c:" p[2]
           n[fam]++; b[fam] += $2; h[fam] += $3 }
         END { for (k in n) printf "%-5s keys %8d bytes %11d per key %10.1f fields %8d per field %6.1f\n", k, n[k], b[k], b[k] / n[k], h[k], b[k] / h[k] }' |
    tee "$W/redis.families"
  $RCLI INFO memory | tr -d '\r' | grep -E '^used_memory:|^used_memory_dataset:'
  figures redis ;;
embedded)
  mkdir -p "$W/emb"
  "$BIN" serve --config "$W/emb.toml" > "$W/emb.log" 2>&1 & echo $! > "$W/emb.pid"; wait_up "$EMB"
  python3 "$HERE/load.py" register --url $EMB --secret $SECRET
  du -sb "$W/emb"
  /usr/bin/time -f "client cpu %U+%S s" python3 "$HERE/load.py" like --url $EMB --secret $SECRET | tee "$W/load.embedded.json"
  sleep 15; kill -TERM "$(cat "$W/emb.pid")"; while kill -0 "$(cat "$W/emb.pid")" 2>/dev/null; do sleep 1; done
  # Reopen with a 1 MiB write buffer: the replayed memtables are flushed to tables.
  LIKEWISE__STORE__WRITE_BUFFER_MB=1 "$BIN" serve --config "$W/emb.toml" > "$W/emb2.log" 2>&1 & echo $! > "$W/emb.pid"
  wait_up "$EMB"; sleep 20; kill -TERM "$(cat "$W/emb.pid")"; while kill -0 "$(cat "$W/emb.pid")" 2>/dev/null; do sleep 1; done
  du -sb "$W/emb" "$W/emb/store/keyspaces"; ls -l "$W/emb/store/"*.jnl
  # Keyspace directories are numbered from 1 in the order store/src/embedded/opening.rs opens
  # them (`ks("name"` / `ks_with("name"`); the names are read from there.
  python3 - "$W" "$HERE/../../crates/store/src/embedded/opening.rs" <<'PY' | tee "$W/embedded.json"
import json, os, re, sys
w, src = sys.argv[1], open(sys.argv[2]).read()
names = re.findall(r'\bks(?:_with)?\("([a-z_]+)"', src)
root = os.path.join(w, "emb/store/keyspaces")
def du(p):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(p) for f in fs)
ks = {}
for e in os.listdir(root):
    if e.isdigit() and 1 <= int(e) <= len(names):
        ks[names[int(e) - 1]] = du(os.path.join(root, e))
rep = json.loads(open(os.path.join(w, "load.embedded.json")).read().strip().splitlines()[-1])
print(json.dumps({"likes": rep["distinct"],
                  "per_s": rep["per_s"], "keyspaces": ks, "keyspaces_total": du(root)}))
PY
  figures embedded ;;
jetstream)
  python3 "$HERE/js_bench.py" --url nats://127.0.0.1:$NATSPORT --nats-pid "$(cat "$W/nats.pid")" --messages 200000 --size 142 | tee "$W/jetstream.json"
  figures jetstream ;;
stop)
  stop_worker
  for p in api emb nats; do [ -f "$W/$p.pid" ] && kill "$(cat "$W/$p.pid")" 2>/dev/null || true; done
  sleep 5; for p in api emb; do [ -f "$W/$p.pid" ] && kill -9 "$(cat "$W/$p.pid")" 2>/dev/null || true; done
  [ -f "$W/redis.pid" ] && kill "$(cat "$W/redis.pid")" 2>/dev/null || true
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$W/pg" -w stop >/dev/null 2>&1 || true
  sleep 2; rm -rf "$W" ;;
*) sed -n '2,17p' "$0"; exit 2 ;;
esac
