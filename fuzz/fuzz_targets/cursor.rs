//! Signed pagination cursors (`likewise_http::cursor`).
//!
//! Input: one kind byte, then either a cursor string to open or a payload to seal.
//! Properties:
//! - opening any string never panics;
//! - a string that opens is the canonical sealing of what it opened to (no second spelling of
//!   a cursor verifies: base64 padding or trailing bits cannot be used to forge look-alikes),
//!   and it opens under no other kind and no other key;
//! - seal -> open round-trips every payload up to the documented 64 bytes, and a one-character
//!   change to a sealed cursor never opens to anything.
#![no_main]

use libfuzzer_sys::fuzz_target;
use likewise_http::cursor::CursorCodec;
use std::sync::LazyLock;

/// The key the seed corpus was sealed with (see README.md).
const KEY: &[u8] = b"fuzz-cursor-secret";
const MAX_PAYLOAD: usize = 64;
const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static CODEC: LazyLock<CursorCodec> = LazyLock::new(|| CursorCodec::new(KEY));
static OTHER: LazyLock<CursorCodec> = LazyLock::new(|| CursorCodec::new(b"another-secret"));

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else { return };
    let codec = &*CODEC;

    // 1. Open the rest as a cursor string (lossy: the HTTP layer only ever hands over &str).
    let s = String::from_utf8_lossy(rest);
    if let Ok(payload) = codec.open(kind, &s) {
        assert_eq!(codec.seal(kind, &payload), s, "a non-canonical cursor verified");
        assert!(payload.len() <= MAX_PAYLOAD, "oversized payload accepted: {}", payload.len());
        assert!(codec.open(kind.wrapping_add(1), &s).is_err(), "a cursor opened as another kind");
        assert!(OTHER.open(kind, &s).is_err(), "a cursor opened under another key");
    }

    // 2. Seal the rest as a payload and open it again.
    let payload = &rest[..rest.len().min(MAX_PAYLOAD)];
    let sealed = codec.seal(kind, payload);
    assert!(sealed.bytes().all(|b| B64.contains(&b)), "cursor not URL-safe: {sealed:?}");
    assert_eq!(codec.open(kind, &sealed).ok().as_deref(), Some(payload), "seal/open round trip");
    assert!(codec.open(kind.wrapping_add(1), &sealed).is_err(), "sealed cursor opened as another kind");
    assert!(OTHER.open(kind, &sealed).is_err(), "sealed cursor opened under another key");

    // 3. Tamper with one character (position and replacement chosen by the input).
    if let Some(&pick) = rest.first() {
        let mut bytes = sealed.clone().into_bytes();
        let at = usize::from(pick) % bytes.len();
        let sub = B64[usize::from(rest.last().copied().unwrap_or(0)) % B64.len()];
        if bytes[at] != sub {
            bytes[at] = sub;
            let tampered = String::from_utf8(bytes).expect("ascii");
            assert!(codec.open(kind, &tampered).is_err(), "tampered cursor {tampered:?} opened");
        }
    }
});
