#!/usr/bin/env python3
"""Feed pages/s and the serving process's CPU per page: an embedded node against a scale-out
API node (with one worker process), alternating in one sitting (docs/benchmarks.md, "Feed pages").

usage: python3 docs/benchmarks/feed_ab.py BIN ROUNDS
Needs PostgreSQL (127.0.0.1:5432, trust), Redis (6379) and NATS with JetStream (4222). Makes two
shard databases, a Redis prefix and a stream prefix of its own and removes the databases and
Redis keys afterwards (the prefix's JetStream streams stay: `nats stream rm`). Each run: `likewise bench hot-post --url` (20,000 likers, 64 connections,
5 s phases); CPU is the node's utime + stime over the feed phase, from /proc/PID/stat."""
import json, os, subprocess, sys, time, urllib.request

BIN, ROUNDS = sys.argv[1], int(sys.argv[2])
W = "/tmp/likewise-feed-ab"
SECRET = "feed-ab-measurement-secret-012345"
TCK = os.sysconf("SC_CLK_TCK")
EMB, API, WORKER = "127.0.0.1:18581", "127.0.0.1:18591", "127.0.0.1:18592"


def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TCK


def wait_up(addr, proc):
    for _ in range(300):
        if proc.poll() is not None:
            raise SystemExit(f"the node for {addr} exited (port taken?)")
        try:
            urllib.request.urlopen(f"http://{addr}/healthz", timeout=1)
            return
        except Exception:
            time.sleep(0.2)
    raise SystemExit(f"{addr} not up")


def sh(c):
    subprocess.run(c, shell=True, check=True)


def bench(addr, pid):
    p = subprocess.Popen([BIN, "bench", "hot-post", "--url", f"http://{addr}", "--likers", "20000",
                          "--concurrency", "64", "--phase-seconds", "5", "--secret", SECRET],
                         stdout=subprocess.PIPE, text=True)
    out, c0 = {}, None
    for line in p.stdout:
        sys.stdout.write("   " + line)
        if line.startswith("/healthz"):
            out["healthz_per_s"] = float(line.split()[1])
        if line.startswith("likes on one post"):
            c0 = cpu(pid)
        if line.startswith("20-post feed pages"):
            c1 = cpu(pid)
            out["feed_per_s"] = float(line.split()[3])
            out["cpu_us_per_page"] = (c1 - c0) * 1e6 / (out["feed_per_s"] * 5)
    if p.wait() != 0:
        raise SystemExit("the benchmark failed")
    return out


def node(args, log):
    return subprocess.Popen([BIN, "serve"] + args, stdout=open(log, "w"), stderr=subprocess.STDOUT)


def stop(*procs):
    for p in procs:
        p.terminate()
        p.wait()


def embedded():
    sh(f"rm -rf {W}/emb && mkdir -p {W}/emb")
    open(f"{W}/emb.toml", "w").write(
        f'[server]\nlisten = "{EMB}"\n[store]\ndata_dir = "{W}/emb"\n'
        f'[auth]\nsecret = "{SECRET}"\n[limits]\nlikes_per_minute = 0\n')
    n = node(["--config", f"{W}/emb.toml"], f"{W}/emb.log")
    try:
        wait_up(EMB, n)
        return bench(EMB, n.pid)
    finally:
        stop(n)


def scale_out(i):
    tag = f"lwfeedab{os.getpid()}x{i}"
    dbs = [f"{tag}_s{k}" for k in (0, 1)]
    for d in dbs:
        sh(f"createdb -h 127.0.0.1 -U postgres {d}")
    shards = ", ".join(f'"postgres://postgres@127.0.0.1:5432/{d}"' for d in dbs)
    open(f"{W}/so.toml", "w").write(
        f'[server]\nlisten = "{API}"\n[store]\nbackend = "postgres"\npostgres_shards = [{shards}]\n'
        f'data_dir = "{W}/so"\n[cache]\nredis_url = "redis://127.0.0.1:6379/0"\nredis_prefix = "{tag}"\n'
        f'[stream]\nnats_url = "nats://127.0.0.1:4222"\nprefix = "{tag}"\n'
        f'[auth]\nsecret = "{SECRET}"\n[limits]\nlikes_per_minute = 0\n')
    procs = []
    try:
        sh(f"{BIN} migrate --config {W}/so.toml > {W}/migrate.log 2>&1")
        procs.append(node(["--config", f"{W}/so.toml", "--role", "worker", "--listen", WORKER], f"{W}/worker.log"))
        procs.append(node(["--config", f"{W}/so.toml", "--role", "api"], f"{W}/api.log"))
        wait_up(WORKER, procs[0])
        wait_up(API, procs[1])
        # As a deployment that has run a while: for 10 s after Redis starts keeping own-likes
        # records, liked sets are not trusted and "liked?" reads the reverse index.
        time.sleep(12)
        return bench(API, procs[1].pid)
    finally:
        stop(*procs)
        for d in dbs:
            sh(f"dropdb -h 127.0.0.1 -U postgres --if-exists --force {d}")
        sh(f"redis-cli --scan --pattern '{tag}*' | xargs -r redis-cli del > /dev/null")


os.makedirs(W, exist_ok=True)
results = []
for i in range(ROUNDS):
    print(f"round {i}: embedded")
    e = embedded()
    print(f"round {i}: scale-out")
    s = scale_out(i)
    results.append({"embedded": e, "scale_out": s, "feed_ratio": s["feed_per_s"] / e["feed_per_s"]})
    print(json.dumps(results[-1]))
print("load average", open("/proc/loadavg").read().split()[:3])
