#!/usr/bin/env bash
# run.sh N [--workers-after]: one scale-out hot-post run of N distinct likers from a reset
# (docs/bench/scale-out.md): the shard databases dropped and migrated again, fresh Redis and
# stream prefixes (the run's Redis keys and JetStream stream are deleted at the end), then
# `likewise bench hot-post --in-process`, with the whole machine's CPU, PostgreSQL's CPU and the
# WAL per like measured around it. LIKEWISE=path/to/likewise picks the binary.
set -euo pipefail
cd "$(dirname "$0")"
N=${1:?usage: run.sh N [--workers-after]}
shift
BIN=${LIKEWISE:-likewise}
PG=(-h 127.0.0.1 -U postgres)
TCK=$(getconf CLK_TCK)

for db in lw_bench_0 lw_bench_1; do dropdb "${PG[@]}" --if-exists --force "$db"; done
PREFIX="lwbench$(date +%s)"
export LIKEWISE__CACHE__REDIS_PREFIX=$PREFIX LIKEWISE__STREAM__PREFIX=$PREFIX
cleanup() {
  redis-cli --scan --pattern "$PREFIX*" | xargs -r -n 500 redis-cli del >/dev/null || true
  python3 - "$PREFIX" <<'PY' || true
import asyncio, sys
import nats
async def main(prefix):
    nc = await nats.connect("nats://127.0.0.1:4222")
    js = nc.jetstream()
    for s in await js.streams_info():
        if s.config.name.lower().startswith(prefix.lower()):
            await js.delete_stream(s.config.name)
    await nc.close()
asyncio.run(main(sys.argv[1]))
PY
}
trap cleanup EXIT
"$BIN" migrate --config lw.toml >/dev/null

busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
pg_cpu() { # utime + stime + cutime + cstime of every postgres process, in ticks
  local t=0 p f
  for p in $(pgrep -x postgres); do
    f=$(cut -d')' -f2 "/proc/$p/stat" 2>/dev/null) || continue
    set -- $f
    t=$((t + ${12} + ${13} + ${14} + ${15}))
  done
  echo "$t"
}
lsn() { psql "${PG[@]}" -XAtc 'SELECT pg_current_wal_lsn()'; }

B0=$(busy) P0=$(pg_cpu) L0=$(lsn)
"$BIN" bench hot-post --in-process --config lw.toml --likers "$N" --concurrency 4096 "$@"
B1=$(busy) P1=$(pg_cpu)
sleep 6
L1=$(lsn)
WAL=$(psql "${PG[@]}" -XAtc "SELECT pg_wal_lsn_diff('$L1', '$L0')")
awk -v n="$N" -v b=$((B1 - B0)) -v p=$((P1 - P0)) -v w="$WAL" -v t="$TCK" 'BEGIN {
  printf "machine CPU per like: %.1f us; PostgreSQL CPU per like: %.1f us; WAL per like: %.0f B\n",
    b / t / n * 1e6, p / t / n * 1e6, w / n }'
