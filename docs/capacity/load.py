#!/usr/bin/env python3
"""HTTP load for the capacity measurements (docs/capacity.md): standard library only.

  register  PUT /v1/posts/{id} for --posts posts by --authors authors (service token)
  like      --likes likes: post by Zipf(--zipf) popularity rank, liker uniform in 1..--users
  comment   --comments comments of 40-140 characters on Zipf-chosen posts, authors uniform
  feed      --pages feed pages of 20 Zipf-chosen posts, viewer uniform in 1..--users

Post of rank r (0 = most popular) has ID 1,000,000 + r; its author is 10,000,000 + (r * 7919
mod --authors). The same --seed gives the same requests. Prints requests/s and statuses.
"""
import argparse, asyncio, base64, bisect, hashlib, hmac, json, random, time

def b64(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=")

HEADER = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())

def token(secret, sub, service=False):
    claims = {"sub": str(sub), "exp": int(time.time()) + 3 * 3600}
    if service:
        claims["role"] = "service"
    msg = HEADER + b"." + b64(json.dumps(claims, separators=(",", ":")).encode())
    return (msg + b"." + b64(hmac.new(secret, msg, hashlib.sha256).digest())).decode()

def post_id(r):
    return 1_000_000 + r

class Zipf:
    def __init__(self, n, s, rng):
        acc, self.cdf = 0.0, []
        for k in range(1, n + 1):
            acc += 1.0 / k ** s
            self.cdf.append(acc)
        self.total, self.rng = acc, rng
    def rank(self):
        return bisect.bisect_left(self.cdf, self.rng.random() * self.total)

async def conn_loop(host, port, jobs, stats):
    reader, writer = await asyncio.open_connection(host, port)
    while True:
        try:
            method, path, tok, body = next(jobs)
        except StopIteration:
            break
        head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {tok}\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            writer.write(head.encode() + body)
        else:
            writer.write((head + "Content-Length: 0\r\n\r\n").encode())
        status_line = await reader.readline()
        status = int(status_line.split()[1])
        length = 0
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.partition(b":")
            if k.lower() == b"content-length":
                length = int(v)
        if length:
            await reader.readexactly(length)
        stats[status] = stats.get(status, 0) + 1
    writer.close()

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("phase", choices=["register", "like", "comment", "feed"])
    ap.add_argument("--url", default="127.0.0.1:18480")
    ap.add_argument("--secret", required=True)
    ap.add_argument("--posts", type=int, default=200_000)
    ap.add_argument("--authors", type=int, default=50_000)
    ap.add_argument("--users", type=int, default=5_000_000)
    ap.add_argument("--likes", type=int, default=1_000_000)
    ap.add_argument("--comments", type=int, default=100_000)
    ap.add_argument("--pages", type=int, default=20_000)
    ap.add_argument("--zipf", type=float, default=1.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    secret = a.secret.encode()
    rng = random.Random(a.seed)
    host, port = a.url.split(":")
    if a.phase == "register":
        svc = token(secret, 1, service=True)
        def gen():
            for r in range(a.posts):
                author = 10_000_000 + (r * 7919) % a.authors
                body = json.dumps({"author_id": str(author)}).encode()
                yield ("PUT", f"/v1/posts/{post_id(r)}", svc, body)
        n = a.posts
    elif a.phase == "like":
        z = Zipf(a.posts, a.zipf, rng)
        pairs = set()  # like rows the load makes: repeats of a (user, post) pair make none
        def gen():
            for _ in range(a.likes):
                user = rng.randint(1, a.users)
                post = post_id(z.rank())
                pairs.add((user, post))
                yield ("PUT", f"/v1/posts/{post}/like", token(secret, user), None)
        n = a.likes
    elif a.phase == "comment":
        z = Zipf(a.posts, a.zipf, rng)
        words = "the a what view nice love this great photo so cool wow again later we you".split()
        def gen():
            for _ in range(a.comments):
                text = ""
                target = rng.randint(40, 140)
                while len(text) < target:
                    text += rng.choice(words) + " "
                body = json.dumps({"text": text.strip()}).encode()
                user = rng.randint(1, a.users)
                yield ("POST", f"/v1/posts/{post_id(z.rank())}/comments", token(secret, user), body)
        n = a.comments
    else:
        z = Zipf(a.posts, a.zipf, rng)
        def gen():
            for _ in range(a.pages):
                ids = set()
                while len(ids) < 20:
                    ids.add(post_id(z.rank()))
                user = rng.randint(1, a.users)
                path = "/v1/posts?ids=" + ",".join(map(str, ids))
                yield ("GET", path, token(secret, user), None)
        n = a.pages
    jobs, stats = gen(), {}
    t0 = time.time()
    async def run():
        await asyncio.gather(*(conn_loop(host, int(port), jobs, stats) for _ in range(a.concurrency)))
    asyncio.run(run())
    dt = time.time() - t0
    out = {"phase": a.phase, "requests": n, "seconds": round(dt, 1),
           "per_s": round(n / dt), "statuses": stats}
    if a.phase == "like":
        out["distinct"] = len(pairs)
    print(json.dumps(out))

if __name__ == "__main__":
    main()
