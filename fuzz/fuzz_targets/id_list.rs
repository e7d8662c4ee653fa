//! ID lists and the other query and path scalars: `?ids=` of `GET /v1/posts`
//! (`routes::posts::parse_ids`), `?limit=` (`routes::likes::parse_limit`) and path IDs
//! (`likewise_core::ids::parse_id`).
//!
//! Properties: never panics; each parser agrees with a naive reference written from the
//! contract (1..=100 comma-separated positive decimal u64s, each spelled exactly as in a path,
//! a repeated one kept once at its first place;
//! limit: digits only, 1..=100; an ID is 1..=20 ASCII digits without a leading zero, valued 1..=u64::MAX); an accepted
//! list printed back with commas parses to the same list.
#![no_main]

use libfuzzer_sys::fuzz_target;
use likewise_core::ids::{PostId, parse_id};
use likewise_http::paging::parse_limit;
use likewise_http::routes::posts::{MAX_IDS, parse_ids};

/// The contract's ID, written without looking at `parse_id`.
fn reference_id(s: &str) -> Option<u64> {
    // One ID, one spelling: no sign, no space, no leading zero.
    if s.is_empty() || s.len() > 20 || s.starts_with('0') || !s.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    // Digits only and at most 20 of them: the value fits in u128.
    let v: u128 = s.chars().fold(0u128, |acc, c| acc * 10 + u128::from(c as u8 - b'0'));
    (v >= 1 && v <= u128::from(u64::MAX)).then_some(v as u64)
}

fn reference_ids(raw: &str) -> Option<Vec<u64>> {
    let items: Vec<&str> = raw.split(',').collect();
    if raw.is_empty() || items.len() > 100 {
        return None;
    }
    let mut out: Vec<u64> = Vec::new();
    for item in items {
        let id = reference_id(item)?;
        if !out.contains(&id) {
            out.push(id);
        }
    }
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else { return };

    let got = parse_ids(Some(raw)).ok().map(|v| v.into_iter().map(|p| p.0).collect::<Vec<_>>());
    assert_eq!(got, reference_ids(raw), "parse_ids({raw:?})");
    if let Some(ids) = got {
        assert!((1..=MAX_IDS).contains(&ids.len()));
        let printed = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let again = parse_ids(Some(&printed)).ok();
        assert_eq!(again, Some(ids.iter().copied().map(PostId).collect()), "print/parse round trip");
    }
    assert!(parse_ids(None).is_err());

    assert_eq!(parse_id(raw).ok(), reference_id(raw), "parse_id({raw:?})");

    let limit = parse_limit(Some(raw)).ok();
    let digits = !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit());
    let want = raw.parse::<u128>().ok().filter(|n| digits && (1..=100).contains(n)).map(|n| n as usize);
    assert_eq!(limit, want, "parse_limit({raw:?})");
    if let Err(e) = parse_ids(Some(raw)) {
        assert_eq!(e.status().as_u16(), 400, "a bad ID list is a 400");
    }
});
