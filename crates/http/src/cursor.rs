//! Opaque, tamper-evident cursors: a small binary payload plus a truncated HMAC-SHA256,
//! base64url-encoded. A forged, truncated or foreign cursor fails verification (400).

use crate::error::ApiError;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

const MAC_LEN: usize = 12;
/// Longest payload accepted (bounds decoding work on hostile input).
const MAX_PAYLOAD: usize = 64;

/// Signs and opens cursors.
#[derive(Clone)]
pub struct CursorCodec {
    key: Vec<u8>,
}

impl CursorCodec {
    /// A codec keyed by `secret` (derived separately from the token key).
    pub fn new(secret: &[u8]) -> Self {
        let mut key = b"likewise-cursor:".to_vec();
        key.extend_from_slice(secret);
        CursorCodec { key }
    }

    fn mac(&self, kind: u8, payload: &[u8]) -> [u8; MAC_LEN] {
        // HMAC accepts keys of any length, so this cannot fail.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.key).unwrap_or_else(|_| unreachable!());
        m.update(&[kind]);
        m.update(payload);
        let full = m.finalize().into_bytes();
        let mut out = [0u8; MAC_LEN];
        out.copy_from_slice(&full[..MAC_LEN]);
        out
    }

    /// Encode a payload for a cursor of `kind` (each list has its own kind byte).
    pub fn seal(&self, kind: u8, payload: &[u8]) -> String {
        let mut b = Vec::with_capacity(1 + payload.len() + MAC_LEN);
        b.push(kind);
        b.extend_from_slice(payload);
        b.extend_from_slice(&self.mac(kind, payload));
        URL_SAFE_NO_PAD.encode(b)
    }

    /// Verify and decode a cursor of `kind`.
    pub fn open(&self, kind: u8, cursor: &str) -> Result<Vec<u8>, ApiError> {
        let bad = || ApiError::invalid("invalid cursor");
        // The longest cursor sealed: kind byte, payload, MAC, base64url without padding.
        if cursor.len() > (1 + MAX_PAYLOAD + MAC_LEN).div_ceil(3) * 4 {
            return Err(bad());
        }
        let b = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| bad())?;
        if b.len() < 1 + MAC_LEN || b.len() > 1 + MAX_PAYLOAD + MAC_LEN || b[0] != kind {
            return Err(bad());
        }
        let (payload, mac) = b[1..].split_at(b.len() - 1 - MAC_LEN);
        // Constant-time comparison through the Mac API.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.key).map_err(|_| bad())?;
        m.update(&[kind]);
        m.update(payload);
        m.verify_truncated_left(mac).map_err(|_| bad())?;
        Ok(payload.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip() {
        let c = CursorCodec::new(b"k");
        let s = c.seal(1, b"hello");
        assert_eq!(c.open(1, &s).ok(), Some(b"hello".to_vec()));
        let longest = [7u8; MAX_PAYLOAD];
        assert_eq!(c.open(1, &c.seal(1, &longest)).ok(), Some(longest.to_vec()));
        // Longer payloads are never sealed, so never opened (the fuzz target found 65 and 66
        // getting through an off-by-two length check).
        for n in [MAX_PAYLOAD + 1, MAX_PAYLOAD + 2] {
            assert!(c.open(1, &c.seal(1, &vec![7u8; n])).is_err(), "{n}-byte payload");
        }
    }

    #[test]
    fn forged_corrupt_and_foreign_cursors_are_rejected() {
        let c = CursorCodec::new(b"k");
        let s = c.seal(1, b"hello");
        let mut chars: Vec<char> = s.chars().collect();
        chars[3] = if chars[3] == 'A' { 'B' } else { 'A' };
        let forged: String = chars.into_iter().collect();
        for bad in [forged.as_str(), "", "!!!", "AAAA", &s[..s.len() - 2]] {
            assert!(c.open(1, bad).is_err(), "{bad}");
        }
        assert!(c.open(2, &s).is_err(), "a cursor of another list");
        assert!(CursorCodec::new(b"other").open(1, &s).is_err(), "another secret");
    }
}
