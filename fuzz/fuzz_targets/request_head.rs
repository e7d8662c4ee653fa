//! Request methods and headers as a client sends them: the metrics label of a method
//! (`middleware::method_label`), the bearer token of the `Authorization` headers
//! (`auth::bearer_token`) and the JSON content-type rule (`extract::declares_json`,
//! `extract::is_json_media_type`).
//!
//! Input: a method, then header lines (`name: value`), separated by `\n`.
//!
//! Properties: never panics; a method's label is one of the routed methods or `other`, and
//! `other` exactly for the rest (labels stay a closed set, whatever the method); a token is
//! returned only for exactly one `Authorization` header whose scheme is `Bearer` in any case,
//! and it is non-empty with no surrounding blanks; two headers are a 400, anything else
//! refused a 401; a body is declared JSON only by exactly one `Content-Type` whose media type
//! is `application/json` or `application/<x>+json`, agreeing with a reference of that rule.
#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use libfuzzer_sys::fuzz_target;
use likewise_http::auth::bearer_token;
use likewise_http::extract::{declares_json, is_json_media_type};
use likewise_http::middleware::method_label;

const ROUTED: [&str; 6] = ["GET", "PUT", "POST", "DELETE", "HEAD", "OPTIONS"];

/// The JSON media type rule, written from the contract.
fn reference_json(value: &[u8]) -> bool {
    // Parameters (after a `;`) do not matter, whatever bytes they hold.
    let essence = value.split(|b| *b == b';').next().unwrap_or_default();
    let Ok(v) = std::str::from_utf8(essence) else { return false };
    let essence = v.trim_matches(|c: char| c.is_ascii_whitespace());
    let lower = essence.to_ascii_lowercase();
    let Some(sub) = lower.strip_prefix("application/") else { return false };
    let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b));
    token(sub) && (sub == "json" || (sub.len() > 5 && sub.ends_with("+json")))
}

fuzz_target!(|data: &[u8]| {
    let mut lines = data.split(|b| *b == b'\n');
    let method = lines.next().unwrap_or_default();
    if let Ok(m) = Method::from_bytes(method) {
        let label = method_label(&m);
        if ROUTED.contains(&m.as_str()) {
            assert_eq!(label, m.as_str(), "a routed method keeps its name");
        } else {
            assert_eq!(label, "other", "method {m:?} became a label");
        }
    }
    let mut headers = HeaderMap::new();
    for line in lines {
        let Some(colon) = line.iter().position(|b| *b == b':') else { continue };
        let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(&line[..colon]), HeaderValue::from_bytes(line[colon + 1..].trim_ascii()))
        else {
            continue;
        };
        headers.append(name, value);
    }
    let auths: Vec<&HeaderValue> = headers.get_all(http::header::AUTHORIZATION).iter().collect();
    match bearer_token(&headers) {
        Ok(token) => {
            assert_eq!(auths.len(), 1, "a token from {} Authorization headers", auths.len());
            let value = auths[0].to_str().expect("a token comes from a visible-ASCII value");
            assert!(value.get(..6).is_some_and(|s| s.eq_ignore_ascii_case("bearer")), "{value:?}");
            assert!(!token.is_empty() && token.trim_matches([' ', '\t']) == token, "{token:?}");
            assert!(value.ends_with(token) || value.trim_end_matches([' ', '\t']).ends_with(token));
        }
        Err(e) => {
            let want = match auths.len() {
                0 | 1 => 401,
                _ => 400,
            };
            assert_eq!(e.status().as_u16(), want, "{auths:?}");
        }
    }
    let types: Vec<&HeaderValue> = headers.get_all(http::header::CONTENT_TYPE).iter().collect();
    let want = types.len() == 1 && reference_json(types[0].as_bytes());
    assert_eq!(declares_json(&headers), want, "{types:?}");
    for v in &types {
        assert_eq!(is_json_media_type(v.as_bytes()), reference_json(v.as_bytes()), "{v:?}");
    }
});
