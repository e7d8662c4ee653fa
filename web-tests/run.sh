#!/usr/bin/env bash
# Build `likewise demo`, start it on a free port with a temporary data directory, run the
# browser tests against it (Debian's Chromium via playwright-core), then stop it.
# Needs: cargo, node >= 20, npm, /usr/bin/chromium (apt-get install -y chromium).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"
cargo build --quiet --bin likewise
bin="$root/target/debug/likewise"

data="$(mktemp -d)"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
log="$data/demo.log"
export LIKEWISE__AUTH__SECRET="${LIKEWISE__AUTH__SECRET:-web-tests-secret-0123456789abcdef}"
# Like notifications wait 1 s (not 5) for an unlike, so the settings test can wait past it.
export LIKEWISE__NOTIFICATIONS__HOLD_MS="${LIKEWISE__NOTIFICATIONS__HOLD_MS:-1000}"
"$bin" demo --listen "127.0.0.1:$port" --data-dir "$data/store" >"$log" 2>&1 &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  rm -rf "$data"
}
trap cleanup EXIT

for _ in $(seq 1 300); do
  if curl -sf "http://127.0.0.1:$port/demo/world" >/dev/null; then break; fi
  if ! kill -0 "$pid" 2>/dev/null; then cat "$log"; echo "likewise demo exited" >&2; exit 1; fi
  sleep 0.2
done
curl -sf "http://127.0.0.1:$port/demo/world" >/dev/null || { cat "$log"; echo "demo did not start" >&2; exit 1; }

cd "$here"
if [ ! -d node_modules/playwright-core ]; then npm ci --no-audit --no-fund --silent; fi
LIKEWISE_URL="http://127.0.0.1:$port" node --test --test-concurrency=1 tests/ || { tail -30 "$log"; exit 1; }
