"""Read a `likewise export analytics` Parquet file with pyarrow (a reader independent of the
Rust writer) and print, as JSON: the schema, the row count, whether rows are sorted by
(hour, post), and per-post sums of every count column with the hours each post appears in.

Usage: python3 analytics_reader.py FILE
"""

import json
import sys

import pyarrow.parquet as pq

COUNTS = ["likes", "unlikes", "comments", "comments_visible_delta", "comment_likes",
          "comment_unlikes", "unique_viewers"]


def main(path):
    table = pq.read_table(path)
    rows = table.to_pylist()
    keys = [(r["hour"], r["post_id"]) for r in rows]
    posts = {}
    for r in rows:
        p = posts.setdefault(str(r["post_id"]), {c: 0 for c in COUNTS} | {"hours": [], "view_hours": 0})
        for c in COUNTS:
            p[c] += r[c]
        p["hours"].append(r["hour"].isoformat())
        p["view_hours"] += 1 if r["unique_viewers"] > 0 else 0
    print(json.dumps({
        "schema": {f.name: str(f.type) for f in table.schema},
        "rows": table.num_rows,
        "sorted_unique": keys == sorted(set(keys)),
        "whole_hours": all(r["hour"].minute == 0 and r["hour"].second == 0
                           and r["hour"].microsecond == 0 for r in rows),
        "posts": posts,
    }))


if __name__ == "__main__":
    main(sys.argv[1])
