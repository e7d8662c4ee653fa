#!/usr/bin/env python3
"""Feed reads: how many PostgreSQL shard queries one feed page costs on the scale-out engines.

For one `likewise` binary, this script starts a throwaway scale-out deployment (2 PostgreSQL
shard databases, its own Redis key prefix and NATS stream prefix, one `serve` process in role
`all`: API and workers), seeds it through the HTTP API (posts registered by the service role,
users, likes with Zipf-like popularity over the posts), then reads feed pages
(`GET /v1/posts?ids=...`, 20 distinct posts each, drawn from the same popularity, as random
viewers) and measures:

- shard transactions per page: `xact_commit` of `pg_stat_database`, summed over the shard
  databases, across the page run, less the idle rate (measured beforehand with no requests)
  over the same time, divided by the pages. Every statement outside an explicit transaction is
  one transaction, so this counts round trips that commit, whatever code path issued them;
- table scans per page: `seq_scan + idx_scan` of each shard table (`pg_stat_user_tables`),
  idle-corrected the same way: which tables the pages read, with less noise than the
  transactions (the idle workers mostly poll `outbox`);
- shard reads per page by operation: `likewise_shard_reads_total{op}` from `/metrics` (builds
  that have the counter);
- the count cache's hit / stale / miss ratios over the run
  (`likewise_cache_lookups_total{cache="counts"}`), and the shared (Redis) count cache's
  hit / miss ratios (`likewise_shared_cache_lookups_total`).

Then it stops the server and removes everything it created: the databases, the Redis keys of
its prefix (SCAN + DEL with redis-cli) and the NATS stream (with the `nats` CLI when it is
installed, else over the NATS protocol directly).

Needs, on localhost: PostgreSQL on 5432 (trust auth for `postgres`), Redis on 6379, NATS with
JetStream on 4222, and `psql` and `redis-cli` on the PATH. Python 3 standard library only.

Run it (the same --seed gives the same data and the same pages, so two builds compare):

    python3 crates/bench/scripts/feed_reads.py target/release/likewise
    python3 crates/bench/scripts/feed_reads.py ./likewise --pages 2000 --seed 1

`--help` lists the knobs (sizes, threads, settle and idle times, --keep to leave the
deployment running for inspection). The last line printed is the result as one JSON object.

Caveats. PostgreSQL flushes a backend's transaction counters to pg_stat_database up to 10 s
late when the connection goes idle, so the script waits --flush seconds (default 12) before
each final reading and counts that wait in the idle correction. The idle workers are not
quiet (the outbox relay polls every shard every few milliseconds: hundreds of transactions a
second), so the idle rate is measured again after the run and the result is also given with
that rate; the gap between the two is the noise of the idle correction. Cached counts go stale
after cache.count_refresh_ms (5 s), so the stale share, and the background reloads it causes,
grow with the length of the page run: compare builds at similar page rates.
"""

import argparse
import bisect
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

PG = dict(host="127.0.0.1", port=5432, user="postgres")
REDIS_URL = "redis://127.0.0.1:6379/0"
NATS_HOST, NATS_PORT = "127.0.0.1", 4222


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------- PostgreSQL


def psql(sql, db="postgres"):
    out = subprocess.run(
        ["psql", "-h", PG["host"], "-p", str(PG["port"]), "-U", PG["user"], "-d", db,
         "-v", "ON_ERROR_STOP=1", "-At", "-c", sql],
        check=True, capture_output=True, text=True)
    return out.stdout.strip()


def xact_commits(dbs):
    names = ",".join(f"'{d}'" for d in dbs)
    out = psql(f"SELECT coalesce(sum(xact_commit), 0) FROM pg_stat_database WHERE datname IN ({names})")
    return int(out), time.monotonic()


def table_scans(dbs):
    """{table: seq_scan + idx_scan summed over the shards} (from each shard's own view)."""
    out = {}
    for d in dbs:
        rows = psql("SELECT relname, coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables", db=d)
        for line in rows.splitlines():
            name, n = line.split("|")
            out[name] = out.get(name, 0) + int(n)
    return out


def stats(dbs):
    """(xact_commit sum, table scans, monotonic time) in one reading."""
    x, t = xact_commits(dbs)
    return x, table_scans(dbs), t


# ---------------------------------------------------------------- HTTP


class Client:
    """One keep-alive connection per thread."""

    def __init__(self, port):
        self.port = port
        self.local = threading.local()

    def _conn(self):
        c = getattr(self.local, "conn", None)
        if c is None:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            self.local.conn = c
        return c

    def request(self, method, path, token=None, body=None):
        headers = {}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        for attempt in range(2):
            c = self._conn()
            try:
                c.request(method, path, body=data, headers=headers)
                r = c.getresponse()
                payload = r.read()
                return r.status, payload
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    http.client.CannotSendRequest, http.client.BadStatusLine):
                # A keep-alive connection the server closed while idle: the request was not
                # taken, so sending it again on a new connection is safe.
                c.close()
                self.local.conn = None
                if attempt == 1:
                    raise

    def reset(self):
        c = getattr(self.local, "conn", None)
        if c is not None:
            c.close()
            self.local.conn = None


def http_get(port, path, timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


METRIC_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')
LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(port):
    """Prometheus text -> {(name, frozenset(labels)): value}."""
    status, body = http_get(port, "/metrics")
    if status != 200:
        raise RuntimeError(f"/metrics answered {status}")
    out = {}
    for line in body.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        m = METRIC_RE.match(line)
        if not m:
            continue
        labels = frozenset(LABEL_RE.findall(m.group(2) or ""))
        try:
            out[(m.group(1), labels)] = float(m.group(3))
        except ValueError:
            pass
    return out


def series(metrics, name, **want):
    """{labels dict as tuple: value} of `name` whose labels include `want`."""
    res = {}
    for (n, labels), v in metrics.items():
        if n != name:
            continue
        d = dict(labels)
        if all(d.get(k) == val for k, val in want.items()):
            res[tuple(sorted(d.items()))] = v
    return res


def delta_by(before, after, name, key, **want):
    """Per value of label `key`: after - before of `name`."""
    out = {}
    a = series(after, name, **want)
    b = series(before, name, **want)
    for labels, v in a.items():
        k = dict(labels).get(key, "")
        out[k] = out.get(k, 0.0) + v - b.get(labels, 0.0)
    return out


# ---------------------------------------------------------------- workload


class Zipf:
    """Ranks 1..n with weight rank^-s, mapped to IDs by a seeded shuffle (so popular posts
    fall on every shard)."""

    def __init__(self, ids, s, rng):
        self.ids = list(ids)
        rng.shuffle(self.ids)
        acc, self.cum = 0.0, []
        for k in range(1, len(self.ids) + 1):
            acc += k ** -s
            self.cum.append(acc)
        self.total = acc

    def draw(self, rng):
        i = bisect.bisect_left(self.cum, rng.random() * self.total)
        return self.ids[min(i, len(self.ids) - 1)]

    def share_of_top(self, k):
        return self.cum[k - 1] / self.total


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_pool(n_threads, items, fn):
    """fn(item) for every item on n_threads threads; returns the results in order."""
    with ThreadPoolExecutor(max_workers=n_threads) as ex:
        return list(ex.map(fn, items, chunksize=64))


# ---------------------------------------------------------------- cleanup


def delete_redis_keys(prefix):
    keys = subprocess.run(["redis-cli", "-u", REDIS_URL, "--scan", "--pattern", f"{prefix}:*"],
                          check=True, capture_output=True, text=True).stdout.split()
    for i in range(0, len(keys), 500):
        subprocess.run(["redis-cli", "-u", REDIS_URL, "DEL", *keys[i:i + 500]],
                       check=True, capture_output=True)
    left = subprocess.run(["redis-cli", "-u", REDIS_URL, "--scan", "--pattern", f"{prefix}:*"],
                          check=True, capture_output=True, text=True).stdout.split()
    return len(keys), len(left)


def delete_stream(name):
    """Delete JetStream stream `name`: the nats CLI when installed, else the JetStream API
    ($JS.API.STREAM.DELETE.<name>) over a plain NATS connection. Returns a note."""
    if shutil.which("nats"):
        r = subprocess.run(["nats", "--server", f"nats://{NATS_HOST}:{NATS_PORT}", "stream", "rm", "-f", name],
                           capture_output=True, text=True)
        return f"nats CLI: rc={r.returncode} {r.stderr.strip() or r.stdout.strip()}"
    inbox = f"_INBOX.feedreads.{random.getrandbits(64):x}"
    with socket.create_connection((NATS_HOST, NATS_PORT), timeout=10) as s:
        f = s.makefile("rb")
        f.readline()  # INFO
        s.sendall((f'CONNECT {{"verbose":false,"pedantic":false,"name":"feed_reads"}}\r\n'
                   f"SUB {inbox} 1\r\nPUB $JS.API.STREAM.DELETE.{name} {inbox} 0\r\n\r\nPING\r\n").encode())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            line = f.readline()
            if not line:
                break
            if line.startswith(b"PING"):
                s.sendall(b"PONG\r\n")
            elif line.startswith(b"-ERR"):
                return f"no nats CLI; NATS protocol error: {line.decode().strip()}"
            elif line.startswith(b"MSG"):
                size = int(line.split()[-1])
                payload = f.read(size + 2)[:size]
                reply = json.loads(payload or b"{}")
                if reply.get("success"):
                    return "no nats CLI; deleted over the NATS protocol"
                return f"no nats CLI; JetStream answered {reply.get('error')}"
    return "no nats CLI; no JetStream answer: the stream may be left (delete it by hand)"


# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary", help="the likewise binary to measure")
    ap.add_argument("--posts", type=int, default=10_000)
    ap.add_argument("--users", type=int, default=5_000)
    ap.add_argument("--likes", type=int, default=30_000, help="distinct (post, user) likes")
    ap.add_argument("--zipf", type=float, default=1.1, help="popularity exponent s")
    ap.add_argument("--pages", type=int, default=2_000)
    ap.add_argument("--page-size", type=int, default=20)
    ap.add_argument("--clients", type=int, default=4, help="concurrent feed readers")
    ap.add_argument("--seed-threads", type=int, default=8)
    ap.add_argument("--settle", type=float, default=45.0,
                    help="seconds after seeding before the idle baseline (the notifier works through "
                         "the seeded likes for 20-30 s; a shorter wait inflates the idle rate)")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of the idle baseline")
    ap.add_argument("--flush", type=float, default=12.0,
                    help="seconds to wait for PostgreSQL's statistics before a final reading")
    ap.add_argument("--seed", type=int, default=1, help="workload seed (data and pages)")
    ap.add_argument("--pages-per-viewer", type=int, default=1,
                    help="pages each viewer reads in a row (a session scrolling its feed)")
    ap.add_argument("--liked-filter-max", type=int, default=None,
                    help="cache.liked_filter_max_items (0: no shared liked-set filters; unset: the default)")
    ap.add_argument("--keep", action="store_true", help="leave the deployment running and its data")
    args = ap.parse_args()

    t_start = time.monotonic()
    binary = os.path.abspath(args.binary)
    run = f"lwfeed_{random.SystemRandom().getrandbits(40):010x}"
    dbs = [f"{run}_0", f"{run}_1"]
    stream = f"{run.upper()}_EVENTS"
    port = free_port()
    tmp = tempfile.mkdtemp(prefix=f"{run}_")
    cfg = os.path.join(tmp, "likewise.toml")
    server_log = os.path.join(tmp, "serve.log")
    secret = "feed-reads-benchmark-secret-0123456789"
    shards = ", ".join(f'"postgres://{PG["user"]}@{PG["host"]}:{PG["port"]}/{d}"' for d in dbs)
    filter_line = ("" if args.liked_filter_max is None
                   else "liked_filter_max_items = %d" % args.liked_filter_max)
    with open(cfg, "w") as f:
        f.write(f"""[server]
listen = "127.0.0.1:{port}"
role = "all"
[store]
backend = "postgres"
postgres_shards = [{shards}]
data_dir = "{tmp}/data"
[cache]
redis_url = "{REDIS_URL}"
redis_prefix = "{run}"
{filter_line}
[stream]
nats_url = "nats://{NATS_HOST}:{NATS_PORT}"
prefix = "{run}"
[limits]
likes_per_minute = 0
[auth]
secret = "{secret}"
[log]
level = "warn"
""")
    log(f"run {run}: binary {binary}, port {port}, config {cfg}")
    proc = None
    created_dbs = []
    result = {"run": run, "binary": binary}
    ok = False
    try:
        for d in dbs:
            psql(f'CREATE DATABASE "{d}"')
            created_dbs.append(d)
        subprocess.run([binary, "migrate", "--config", cfg], check=True, capture_output=True)
        logf = open(server_log, "w")
        proc = subprocess.Popen([binary, "serve", "--config", cfg], stdout=logf, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited with {proc.returncode}; see {server_log}")
            try:
                if http_get(port, "/healthz", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"/healthz not 200 within 60 s; see {server_log}")
            time.sleep(0.2)
        log("serving")

        def token(uid, service=False):
            cmd = [binary, "token", str(uid), "--ttl", "4h", "--config", cfg] + (["--service"] if service else [])
            return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()

        rng = random.Random(args.seed)
        post_ids = list(range(1, args.posts + 1))
        user_ids = list(range(100_001, 100_001 + args.users))
        zipf = Zipf(post_ids, args.zipf, rng)
        svc = token(1, service=True)
        tokens = dict(zip(user_ids, run_pool(args.seed_threads, user_ids, token)))
        log(f"{len(tokens)} user tokens minted")

        client = Client(port)
        errors = {"seed": 0, "pages": 0}
        err_lock = threading.Lock()

        def expect(phase, status, body, ok=(200, 204)):
            if status not in ok:
                with err_lock:
                    errors[phase] += 1
                    if errors[phase] <= 5:
                        log(f"{phase}: HTTP {status} {body[:200]!r}")

        # Seed: users, posts, then likes (distinct pairs; post by popularity, user uniform).
        authors = {p: rng.choice(user_ids) for p in post_ids}
        t0 = time.monotonic()
        run_pool(args.seed_threads, user_ids, lambda u: expect("seed", *client.request(
            "PUT", f"/v1/users/{u}", svc, {"username": f"reader{u}"})))
        run_pool(args.seed_threads, post_ids, lambda p: expect("seed", *client.request(
            "PUT", f"/v1/posts/{p}", svc,
            {"author_id": str(authors[p]), "hide_like_count": False, "comments": "everyone"})))
        liked = set()
        pairs = []
        cap = args.users * 0.95
        per_post = {}
        while len(pairs) < args.likes:
            p = zipf.draw(rng)
            if per_post.get(p, 0) >= cap:
                continue
            u = rng.choice(user_ids)
            if (p, u) in liked:
                continue
            liked.add((p, u))
            per_post[p] = per_post.get(p, 0) + 1
            pairs.append((p, u))
        changed = [0]
        ch_lock = threading.Lock()

        def like(pu):
            p, u = pu
            status, body = client.request("PUT", f"/v1/posts/{p}/like", tokens[u])
            expect("seed", status, body)
            if status == 200 and json.loads(body).get("changed"):
                with ch_lock:
                    changed[0] += 1

        run_pool(args.seed_threads, pairs, like)
        seed_s = time.monotonic() - t0
        top = sorted(per_post.values(), reverse=True)
        log(f"seeded {args.users} users, {args.posts} posts, {len(pairs)} likes ({changed[0]} changed) "
            f"in {seed_s:.1f} s; likes of the top posts: {top[:5]}, posts with a like: {len(per_post)}")
        result.update(seed_seconds=round(seed_s, 1), likes_changed=changed[0],
                      top_post_likes=top[:5], posts_with_likes=len(per_post))

        # Settle, then the idle baseline.
        time.sleep(args.settle)
        x0, s0, m0 = stats(dbs)
        time.sleep(args.idle)
        x1, s1, m1 = stats(dbs)
        idle_rate = (x1 - x0) / (m1 - m0)
        idle_scans = {t: (s1.get(t, 0) - s0.get(t, 0)) / (m1 - m0) for t in s1}
        log(f"idle: {x1 - x0} shard transactions in {m1 - m0:.1f} s ({idle_rate:.2f}/s)")

        # Feed pages, the same sequence for every binary with the same seed.
        prng = random.Random(args.seed * 1_000_003 + 7)
        # Sessions: one viewer reads --pages-per-viewer pages in a row, on one client.
        sessions = []
        per = max(1, args.pages_per_viewer)
        for k in range(args.pages):
            if k % per == 0:
                sessions.append((prng.choice(user_ids), []))
            ids = set()
            while len(ids) < args.page_size:
                ids.add(zipf.draw(prng))
            sessions[-1][1].append(",".join(map(str, ids)))
        returned = [0]

        def read_page(session):
            viewer, pages_of = session
            for ids in pages_of:
                status, body = client.request("GET", f"/v1/posts?ids={ids}", tokens[viewer])
                expect("pages", status, body, ok=(200,))
                if status == 200:
                    n = len(json.loads(body)["posts"])
                    with ch_lock:
                        returned[0] += n

        before = scrape(port)
        xa, sa, ma = stats(dbs)
        t0 = time.monotonic()
        run_pool(args.clients, sessions, read_page)
        read_s = time.monotonic() - t0
        after = scrape(port)
        time.sleep(args.flush)
        xb, sb, mb = stats(dbs)
        raw = xb - xa
        idle_part = idle_rate * (mb - ma)
        per_page = (raw - idle_part) / args.pages
        # Per table: scans (index or sequential) per page, idle-corrected the same way.
        scans_pp = {}
        for t in sb:
            v = (sb[t] - sa.get(t, 0) - idle_scans.get(t, 0.0) * (mb - ma)) / args.pages
            if abs(v) >= 0.005:
                scans_pp[t] = round(v, 3)
        # A second idle window after the run: how steady the idle rate is.
        time.sleep(args.idle)
        xc, _, mc = stats(dbs)
        idle_after = (xc - xb) / (mc - mb)
        drift = (idle_after - idle_rate) * (mb - ma) / args.pages
        log(f"{args.pages} pages in {read_s:.1f} s ({args.pages / read_s:.0f} pages/s), "
            f"{returned[0]} posts returned, {errors['pages']} errors")
        log(f"shard transactions: {raw} raw, {idle_part:.0f} idle over {mb - ma:.1f} s -> "
            f"{per_page:.2f} per page; idle rate after the run {idle_after:.2f}/s "
            f"(with it: {per_page - drift:.2f} per page)")

        reads = delta_by(before, after, "likewise_shard_reads_total", "op")
        reads_pp = {op: round(v / args.pages, 3) for op, v in sorted(reads.items())}
        cache = delta_by(before, after, "likewise_cache_lookups_total", "result", cache="counts")
        shared = delta_by(before, after, "likewise_shared_cache_lookups_total", "result")
        filt = delta_by(before, after, "likewise_liked_filter_answers_total", "answer")
        builds = delta_by(before, after, "likewise_liked_filter_builds_total", "outcome")

        def ratios(d):
            total = sum(d.values())
            return {k: round(v / total, 4) for k, v in sorted(d.items())} if total else {}

        result.update(
            pages=args.pages, page_size=args.page_size, clients=args.clients,
            posts_returned=returned[0], errors=errors, read_seconds=round(read_s, 1),
            xact_raw=raw, xact_idle=round(idle_part, 1), idle_rate_per_s=round(idle_rate, 3),
            window_seconds=round(mb - ma, 1), idle_rate_after_per_s=round(idle_after, 3),
            shard_xacts_per_page=round(per_page, 3),
            shard_xacts_per_page_idle_after=round(per_page - drift, 3),
            table_scans_per_page=dict(sorted(scans_pp.items(), key=lambda kv: -kv[1])),
            shard_reads_per_page=reads_pp or None,
            shard_reads_total={k: int(v) for k, v in sorted(reads.items())} or None,
            count_cache={k: int(v) for k, v in sorted(cache.items())},
            count_cache_ratios=ratios(cache),
            shared_count_cache={k: int(v) for k, v in sorted(shared.items())},
            shared_count_cache_ratios=ratios(shared),
            pages_per_viewer=per, liked_filter_max=args.liked_filter_max,
            liked_filter_answers={k: int(v) for k, v in sorted(filt.items())},
            liked_filter_builds={k: int(v) for k, v in sorted(builds.items())},
        )
        print()
        print(f"pages                          {args.pages} x {args.page_size} posts, {args.clients} clients")
        print(f"shard transactions per page    {per_page:.2f}  (raw {raw}, idle {idle_part:.0f}; "
              f"{per_page - drift:.2f} with the idle rate measured after the run)")
        print("table scans per page           "
              + ", ".join(f"{t} {v:.2f}" for t, v in sorted(scans_pp.items(), key=lambda kv: -kv[1])))
        if reads_pp:
            total = sum(reads_pp.values())
            print(f"shard reads per page           {total:.2f}  "
                  + ", ".join(f"{op} {v:.2f}" for op, v in reads_pp.items()))
        else:
            print("shard reads per page           (no likewise_shard_reads_total in this build)")
        print("count cache hit/stale/miss     "
              + " / ".join(f"{k} {v:.1%}" for k, v in ratios(cache).items())
              + f"  ({int(sum(cache.values()))} lookups)")
        if shared:
            print("shared count cache hit/miss    "
                  + " / ".join(f"{k} {v:.1%}" for k, v in ratios(shared).items())
                  + f"  ({int(sum(shared.values()))} lookups)")
        if filt or builds:
            print("liked-set filter               "
                  + " / ".join(f"{k} {v:.1%}" for k, v in ratios(filt).items())
                  + f"  of {int(sum(filt.values()))} posts asked; builds "
                  + ", ".join(f"{k} {int(v)}" for k, v in sorted(builds.items())))
        if any(errors.values()):
            print(f"errors                         {errors}")
        ok = True
    finally:
        if args.keep:
            log(f"--keep: server pid {proc.pid if proc else None}, config {cfg}, databases {dbs}, "
                f"Redis prefix {run}, stream {stream}")
        else:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            for d in created_dbs:
                try:
                    psql(f'DROP DATABASE IF EXISTS "{d}" WITH (FORCE)')
                except subprocess.CalledProcessError as e:
                    log(f"drop {d}: {e.stderr.strip()}")
            try:
                n, left = delete_redis_keys(run)
                note = delete_stream(stream)
                log(f"cleaned up: databases {created_dbs} dropped, {n} Redis keys deleted ({left} left), "
                    f"stream {stream}: {note}")
                result["cleanup"] = {"redis_keys_deleted": n, "redis_keys_left": left, "stream": note}
            except Exception as e:  # keep the measurement even if cleanup fails
                log(f"cleanup failed: {e!r}")
            if ok:
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                log(f"server log kept: {server_log}")
        result["wall_seconds"] = round(time.monotonic() - t_start, 1)
        log(f"wall time {result['wall_seconds']} s")
        print(json.dumps(result))


if __name__ == "__main__":
    main()
