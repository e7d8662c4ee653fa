#!/usr/bin/env python3
"""The figures of docs/capacity.md, computed from what `measure.sh STEP` left in $W.

    python3 docs/capacity/figures.py STEP
    python3 docs/capacity/figures.py --fill docs/capacity.md

reads the raw readings of that step (snapshots, statement dumps, Redis command counts, table
sizes, the load's own report) and writes the step's figures into docs/capacity/measured.json,
with the build and the date. `cargo test -p likewise --test capacity` fails when a figure
marked in docs/capacity.md disagrees with that file, so the plan cannot quietly go stale:
rerun the step, then update the doc until the test passes.

Standard library only. Each figure's unit is in its name (`_b` bytes, `_us` microseconds of
CPU, `_per_s` a rate).
"""
import datetime
import json
import os
import re
import subprocess
import sys

W = os.environ.get("W", "/tmp/lwcap")
HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.environ.get("RESULTS", os.path.join(HERE, "measured.json"))


def build():
    """The build measured: the commit of the tree the binary was built from, as `measure.sh
    start` wrote it (else the checkout's)."""
    try:
        with open(os.path.join(W, "build")) as f:
            return f.read().strip()
    except FileNotFoundError:
        pass
    root = os.path.dirname(os.path.dirname(HERE))
    rev = subprocess.run(["git", "-C", root, "rev-parse", "--short=7", "HEAD"],
                         capture_output=True, text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no",
                            "--", "crates", "Cargo.lock"],
                           capture_output=True, text=True, check=True).stdout.strip()
    return rev + ("+changes" if dirty else "")


def load_json(name):
    with open(os.path.join(W, name)) as f:
        return json.loads(f.read().strip().splitlines()[-1])


def snap(name):
    """A `snapshot` of measure.sh: wal, cpu per component, rows, stream, statements, xacts."""
    out = {"cpu": {}, "stream": {}}
    with open(os.path.join(W, "snap." + name)) as f:
        for line in f:
            p = line.split()
            if not p or p[0].startswith("=="):
                continue
            if p[0] in ("api", "worker", "redis", "nats", "postgres", "emb") and len(p) == 2:
                out["cpu"][p[0]] = float(p[1])
            elif p[0] == "likes" and len(p) == 8:
                out["rows"] = dict(zip(p[0::2], map(int, p[1::2])))
            elif len(p) == 5 and p[1] == "messages":
                out["stream"][p[0]] = (int(p[2]), int(p[4]))
            elif len(p) == 2:
                out[p[0]] = float(p[1])
    return out


def stream_totals(s):
    return (sum(m for m, _ in s["stream"].values()), sum(b for _, b in s["stream"].values()))


def statements(name):
    """`statements` dump: query text -> (calls, rows, wal bytes, exec + plan ms)."""
    out = {}
    with open(os.path.join(W, "pss." + name)) as f:
        for line in f:
            p = line.rstrip("\n").split("|")
            if len(p) == 5:
                out[p[0]] = (int(p[1]), int(p[2]), float(p[3]), float(p[4]))
    return out


def statements_delta(a, b):
    out = {}
    for q, (c, r, w, t) in b.items():
        c0, r0, w0, t0 = a.get(q, (0, 0, 0.0, 0.0))
        if c > c0:
            out[q] = (c - c0, r - r0, w - w0, t - t0)
    return out


def redis_delta(a, b):
    def read(name):
        d = {}
        with open(os.path.join(W, "redis." + name)) as f:
            for line in f:
                p = line.split()
                if len(p) == 2:
                    d[p[0]] = int(p[1])
        return d
    ra, rb = read(a), read(b)
    return {k: v - ra.get(k, 0) for k, v in rb.items() if v > ra.get(k, 0)}


def sizes(name):
    """`sizes` dump: table -> total bytes (heap + indexes + TOAST), summed over the shards."""
    out = {}
    with open(os.path.join(W, name)) as f:
        for line in f:
            p = line.split()
            if len(p) >= 3 and p[1] == "total":
                out[p[0]] = int(p[2])
    return out


# Which statements are which, by their text (pg_stat_statements normalises constants).
WAL_CLASSES = [
    ("like_insert", r"INSERT INTO likes"),
    ("outbox_insert", r"INSERT INTO outbox"),
    ("relay_mark", r"UPDATE outbox"),
    ("outbox_prune", r"DELETE FROM outbox"),
    ("reverse_index", r"INSERT INTO user_likes"),
    ("counters", r"INSERT INTO counters|UPDATE counters|consumer_offsets"),
    ("notifier", r"notif_"),
]


def classify(q):
    for name, pat in WAL_CLASSES:
        if re.search(pat, q):
            return name
    return "other"


def step_like():
    likes_report = load_json("load.like.json")
    a, ack, drained = snap("before_like"), snap("after_like_ack"), snap("after_like_drained")
    likes = drained["rows"]["likes"] - a["rows"]["likes"]
    msgs = stream_totals(drained)[0] - stream_totals(a)[0]
    mbytes = stream_totals(drained)[1] - stream_totals(a)[1]
    st = statements_delta(statements("before_like"), statements("after_like_drained"))
    wal = {}
    for q, (_, _, w, _) in st.items():
        k = classify(q)
        wal[k] = wal.get(k, 0.0) + w
    inserts = sum(c for q, (c, _, _, _) in st.items() if classify(q) == "like_insert")
    sz = sizes("sizes.after")
    posts = int(os.environ.get("POSTS", "200000"))
    f = {
        "likes": likes,
        "likes_per_s": likes_report["per_s"],
        "likes_per_transaction": likes / max(inserts, 1),
        "messages_per_like": msgs / likes,
        "bytes_per_message": mbytes / max(msgs, 1),
        "wal_per_like_b": (drained["wal"] - a["wal"]) / likes,
        "pg_bytes_likes_b": sz.get("likes", 0) / likes,
        "pg_bytes_user_likes_b": sz.get("user_likes", 0) / likes,
        "pg_bytes_durable_b": (sz.get("likes", 0) + sz.get("user_likes", 0)) / likes,
        "pg_bytes_notif_actors_b": sz.get("notif_actors", 0) / likes,
        "pg_bytes_notif_items_b": sz.get("notif_items", 0) / likes,
        "pg_bytes_outbox_b": sz.get("outbox", 0) / likes,
        "pg_bytes_counters_per_post_b": sz.get("counters", 0) / posts,
        "redis_commands_per_like": sum(redis_delta("before_like", "after_like_drained").values()) / likes,
        "nats_cpu_per_message_us": (drained["cpu"]["nats"] - a["cpu"]["nats"]) * 1e6 / max(msgs, 1),
    }
    for k, w in wal.items():
        f[f"wal_{k}_b"] = w / likes
    for comp in ("api", "postgres", "redis", "nats"):
        f[f"cpu_{comp}_us"] = (ack["cpu"].get(comp, 0) - a["cpu"].get(comp, 0)) * 1e6 / likes
    # The worker's work trails the acknowledgements: count it until every consumer drained.
    f["cpu_worker_us"] = (drained["cpu"].get("worker", 0) - a["cpu"].get("worker", 0)) * 1e6 / likes
    f["cpu_postgres_drained_us"] = (drained["cpu"]["postgres"] - a["cpu"]["postgres"]) * 1e6 / likes
    return f


def step_consumers(file="consumers.json"):
    d = load_json(file)
    f = {"idle_pg_transactions_per_s": d["idle_pg_transactions_per_s"],
         "idle_worker_pg_transactions_per_s": d["idle_worker_pg_transactions_per_s"],
         "backlog_likes": d["likes"], "backlog_messages": d["messages"],
         "wal_per_like_b": d["wal"] / d["likes"],
         "worker_cpu_us": d["worker_cpu_s"] * 1e6 / d["likes"]}
    for name, secs in d["drained_after_s"].items():
        key = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
        f[f"drain_{key}_per_s"] = d["messages_of"].get(name, d["messages"]) / secs
        f[f"drain_{key}_s"] = secs
    return f


def step_redis():
    fam = {}
    with open(os.path.join(W, "redis.families")) as f:
        for line in f:
            p = line.split()
            # "<family> keys N bytes B per key X fields F per field Y"
            if len(p) >= 10 and p[1] == "keys" and p[8] == "fields":
                fam[p[0]] = {"keys": int(p[2]), "bytes": int(p[4]), "fields": int(p[9])}
    out = {}
    c = fam.get("c:1")
    if c:
        out["counter_key_b"] = c["bytes"] / c["keys"]
    o = fam.get("olz")
    if o and o["fields"]:
        out["own_like_record_b"] = o["bytes"] / o["fields"]
    return out


def step_comment():
    rep = load_json("load.comment.json")
    a, b = snap("before_comment"), snap("after_comment")
    n = rep["requests"]
    sz, before = sizes("sizes.after_comment"), sizes("sizes.after")
    grew = sum(sz.get(t, 0) - before.get(t, 0) for t in ("comments", "comment_ranks"))
    return {
        "comments": n,
        "comments_per_s": rep["per_s"],
        "pg_bytes_per_comment_b": grew / n,
        "cpu_api_us": (b["cpu"]["api"] - a["cpu"]["api"]) * 1e6 / n,
        "cpu_postgres_us": (b["cpu"]["postgres"] - a["cpu"]["postgres"]) * 1e6 / n,
    }


def step_feed():
    rep = load_json("load.feed.json")
    a, b = snap("before_feed"), snap("after_feed")
    n = rep["requests"]
    st = statements_delta(statements("before_feed"), statements("after_feed"))
    return {
        "pages": n,
        "pages_per_s": rep["per_s"],
        "pg_statements_per_page": sum(c for c, _, _, _ in st.values()) / n,
        "pg_transactions_per_page": (b["xacts"] - a["xacts"]) / n,
        "pg_exec_us_per_page": sum(t for _, _, _, t in st.values()) * 1000 / n,
        "cpu_api_us": (b["cpu"]["api"] - a["cpu"]["api"]) * 1e6 / n,
        "cpu_postgres_us": (b["cpu"]["postgres"] - a["cpu"]["postgres"]) * 1e6 / n,
        "cpu_redis_us": (b["cpu"]["redis"] - a["cpu"]["redis"]) * 1e6 / n,
        "redis_commands_per_page": sum(redis_delta("before_feed", "after_feed").values()) / n,
    }


def step_jetstream():
    d = load_json("jetstream.json")
    return {k: d[k] for k in ("publish_per_s", "publish_per_server_core_s", "consume_per_s",
                              "consume_per_server_core_s", "bytes_per_message")}


def step_embedded():
    d = load_json("embedded.json")
    likes = d["likes"]
    ks = d["keyspaces"]
    events = ks.get("events", 0)
    return {
        "likes": likes,
        "likes_per_s": d["per_s"],
        "bytes_durable_b": (d["keyspaces_total"] - events) / likes,
        "bytes_user_likes_b": ks.get("user_likes", 0) / likes,
        "bytes_liker_pages_b": ks.get("liker_pages", 0) / likes,
        "bytes_notifications_b": sum(v for k, v in ks.items() if k.startswith("notif_")) / likes,
        "bytes_events_b": events / likes,
    }


STEPS = {"like": step_like, "consumers": step_consumers, "redis": step_redis,
         "comment": step_comment, "feed": step_feed, "jetstream": step_jetstream,
         "embedded": step_embedded,
         # The consumers step with two worker processes (WORKERS=2 measure.sh consumers).
         "consumers_w2": lambda: step_consumers("consumers_w2.json")}


MARKER = re.compile(r"<!--m:([a-z_]+)\.([a-z0-9_]+)(?:([/*])([0-9.]+))?-->(\**~?`?)([0-9][0-9,]*(?:\.[0-9]+)?)")


def fill(doc):
    """Write the file's figures after the markers of `doc` (docs/capacity.md), each printed to
    the precision it was printed with. The sizing built on them is not recomputed: read it
    again after a fill."""
    with open(RESULTS) as f:
        results = json.load(f)
    text = open(doc).read()

    def one(m):
        step, fig, op, scale, lead, old = m.groups()
        v = results.get(step, {}).get("figures", {}).get(fig)
        if v is None:
            return m.group(0)
        if op:
            v = v / float(scale) if op == "/" else v * float(scale)
        decimals = len(old.split(".")[1]) if "." in old else 0
        new = f"{v:,.{decimals}f}" if abs(v) >= 1000 else f"{v:.{decimals}f}"
        return m.group(0)[: m.start(6) - m.start(0)] + new

    text = MARKER.sub(one, text)
    with open(doc, "w") as f:
        f.write(text)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--fill":
        return fill(sys.argv[2])
    if len(sys.argv) != 2 or sys.argv[1] not in STEPS:
        sys.exit("usage: figures.py " + "|".join(STEPS) + "  |  figures.py --fill docs/capacity.md")
    step = sys.argv[1]
    figures = STEPS[step]()
    try:
        with open(RESULTS) as f:
            results = json.load(f)
    except FileNotFoundError:
        results = {}
    results[step] = {
        "build": build(),
        # Other work on the machine inflates CPU figures and lowers rates: say how busy it was.
        "load_average": float(open("/proc/loadavg").read().split()[1]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "figures": {k: round(v, 3) if isinstance(v, float) else v for k, v in sorted(figures.items())},
    }
    with open(RESULTS, "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
        f.write("\n")
    for k, v in sorted(results[step]["figures"].items()):
        print(f"{step}.{k} = {v}")


if __name__ == "__main__":
    main()
