#!/usr/bin/env python3
"""Writes the seed corpus (fuzz/corpus/<target>/) for the fuzz targets.

Run from anywhere: `python3 fuzz/seeds/make_seeds.py`. The keys are the fixed test keys of
the targets (fuzz_targets/cursor.rs, token.rs); nothing here is a real secret.
"""
import base64, hashlib, hmac, json, os, struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corpus")
CURSOR_KEY = b"likewise-cursor:" + b"fuzz-cursor-secret"
TOKEN_KEY = b"fuzz-token-secret"


def b64(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=")


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def seal(kind, payload):
    mac = hmac.new(CURSOR_KEY, bytes([kind]) + payload, hashlib.sha256).digest()[:12]
    return b64(bytes([kind]) + payload + mac)


u64 = lambda v: struct.pack(">Q", v)
u32 = lambda v: struct.pack(">I", v)

# Cursors: kind byte, then a cursor (as the routes seal them) or a payload.
cursors = {
    "likers": (1, u64(42) + u64(1_795_000_000_123) + u64(1001)),
    "comments_newest": (2, u64(42) + b"\x00" + u64(7_260_000_000_000_001)),
    "replies": (3, u64(7_260_000_000_000_001) + b"\x00" + u64(7_260_000_000_000_002)),
    "queue": (4, u64(7_260_000_000_000_003)),
    "top_ranked": (5, u64(42) + b"\x01" + u64(3) + u32(20) + u64(7_260_000_000_000_000)),
    "top_chrono": (5, u64(42) + b"\x02" + u64(7_260_000_000_000_000)),
    "empty": (6, b""),
    "max_payload": (2, bytes(range(64))),
}
for name, (kind, payload) in cursors.items():
    write("cursor", name, bytes([kind]) + seal(kind, payload))
write("cursor", "not_base64", b"\x02!!!not a cursor")
write("cursor", "forged", b"\x02" + seal(2, u64(43) + b"\x00" + u64(1))[:-1] + b"A")

# Tokens: mode 0 + token; mode 1 + claims to sign; mode 2 + alg pick + claims.
HEADER = '{"alg":"HS256","typ":"JWT"}'
SEED_CLAIMS = [
    '{"sub":"42","exp":4102444800}',
    '{"sub":"1001","exp":4102444800,"role":"service"}',
    '{"sub":"18446744073709551615","exp":4102444800}',
    '{"sub":"7","exp":1000000000}',
]
for i, claims in enumerate(SEED_CLAIMS):
    inp = b64(HEADER.encode()) + b"." + b64(claims.encode())
    sig = b64(hmac.new(TOKEN_KEY, inp, hashlib.sha256).digest())
    write("token", f"minted_{i}", b"\x00" + inp + b"." + sig)
    write("token", f"claims_{i}", b"\x01" + claims.encode())
    write("token", f"other_alg_{i}", bytes([2, i]) + claims.encode())
write("token", "alg_none", b"\x00" + b64(b'{"alg":"none","typ":"JWT"}') + b"." + b64(SEED_CLAIMS[0].encode()) + b".")
write("token", "garbage", b"\x00not.a.token")
write("token", "claims_sub_zero", b'\x01{"sub":"0","exp":4102444800}')
write("token", "claims_aud", b'\x01{"sub":"5","exp":4102444800,"aud":"x","nbf":1}')

# Request bodies from docs/api.md.
bodies = {
    "comment": {"text": "What a view!"},
    "reply": {"text": "@alice agreed", "parent_id": "7260000000000001"},
    "hidden_words": {"words": ["rubbish", "go away", "b4d"]},
    "report": {"reason": "spam"},
    "moderation": {"action": "approve"},
    "user": {"username": "alice", "verified": False},
    "post": {"author_id": "7", "hide_like_count": False, "comments": "everyone"},
    "post_followers": {"author_id": "18446744073709551615", "comments": "followers"},
    "settings": {"hide_like_counts": True},
}
for name, body in bodies.items():
    write("request_body", name, json.dumps(body))
write("request_body", "unknown_field", '{"text": "hi", "extra": 1}')
write("request_body", "numeric_id", '{"author_id": 7}')
write("request_body", "malformed", '{"text": ')
write("request_body", "escapes", '{"text": "\\u0000\\ud83d\\ude00\\u202e"}')

# ID lists (and limits, path IDs).
ids = {
    "three": "1,2,3",
    "one": "42",
    "spaces": " 7 , 8 ",
    "max": "18446744073709551615",
    "overflow": "18446744073709551616",
    "zero": "0",
    "empty_item": "1,,2",
    "hundred": ",".join(str(i) for i in range(1, 101)),
    "too_many": ",".join(str(i) for i in range(1, 102)),
    "limit": "20",
    "plus": "+5",
    "leading_zeros": "007",
    "repeated": "42,7,42",
}
for name, s in ids.items():
    write("id_list", name, s)

# Comment texts: Unicode, zero-width, confusables, bidi, line endings, mentions.
texts = {
    "plain": "What a view!",
    "crlf": "  line one\r\nline two\rline three\n\t ",
    "zero_width": "he\u200bllo w\u200corld\ufeff",
    "confusables": "\u0440\u0430y\u0440\u0430l \u2170diot \uff42\uff41\uff44",
    "bidi": "abc\u202edcba",
    "isolate": "x\u2066y\u2069z",
    "control": "bell\u0007 and esc\u001b[31m",
    "mentions": "@Alice and @bob_1, thanks @ALICE! cc @carol.smith. me@example.com @zo\u00e9",
    "emoji": "\U0001F60D\U0001F525 so good \U0001F44F\U0001F3FD",
    "rtl": "\u05e9\u05dc\u05d5\u05dd \u0639\u0644\u064a\u0643\u0645",
    "combining": "cafe\u0301 na\u0131\u0308ve",
    "spam": "BUY NOW!!!!!!!! cheap-pills.biz www.x.ru http://spam.io",
    "only_space": " \u3000\u00a0\t",
    "long": "\u00e9" * 2201,
}
for name, s in texts.items():
    write("comment_text", name, s)

# Hidden words: mode, list (entries split by 0xFE), 0xFF, text.
def hw(mode, words, text):
    return bytes([mode]) + b"\xfe".join(w.encode() for w in words) + b"\xff" + text.encode()

write("hidden_words", "leet", hw(0, ["idiot", "ass"], "what an 1d10t, you @$$"))
write("hidden_words", "spelled", hw(0, ["bad"], "you are b. a. d!"))
write("hidden_words", "phrase", hw(0, ["go away"], "Just GO   away!"))
write("hidden_words", "accents", hw(0, ["cafe", "nino"], "CAF\u00c9 ni\u00f1o cafe\u0301"))
write("hidden_words", "innocent", hw(0, ["ass"], "first class, a secret passage"))
write("hidden_words", "confusables", hw(0, ["paypal"], "\u0440\u0430y\u0440\u0430l"))
write("hidden_words", "stretched", hw(0, ["hello"], "hellllooooo"))
write("hidden_words", "ascii_ref", bytes([1]) + b"\x00\x01\x02\xfe\x06\x0a\x07\xff\x00\x0b\x01\x0b\x02 \x06\x0a\x0a\x07")
write("hidden_words", "ascii_ref2", bytes([3]) + b"\x00\x01\x00\xff\x00\x00\x01\x01\x0c\x00")
# Request heads: a method line, then header lines.
heads = {
    "bearer": "GET\nauthorization: Bearer abc.def.ghi\ncontent-type: application/json",
    "upper": "PUT\nAuthorization: BEARER  abc.def \ncontent-type: application/merge-patch+json; charset=utf-8",
    "two_auth": "POST\nauthorization: Bearer a\nauthorization: bearer b\ncontent-type: text/plain",
    "made_up": "FROBNICATE\nauthorization: Basic Zm9vOmJhcg==\ncontent-type: application/json\ncontent-type: application/json",
    "long_method": "X" + "A" * 300 + "\naccept: */*",
}
for name, s in heads.items():
    write("request_head", name, s)
print("seeds written under", os.path.normpath(ROOT))
