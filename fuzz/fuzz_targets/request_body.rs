//! Request bodies: every JSON request DTO of `likewise_http::dto`, parsed the way the
//! `JsonBody` extractor does (`extract::parse_json`), then the validation the routes apply.
//!
//! Properties:
//! - parsing never panics and every rejection is a 400 or a 422, never anything else;
//! - a body that is well-formed JSON but does not fit is a 422 (the contract's "does not
//!   fit"), never a 400. Known exception: serde_json reports a wrong JSON type for an enum
//!   field (`{"reason": 2}`) as a syntax error, so it is a 400 "malformed JSON"; see
//!   `ENUM_TYPE_ERRORS_ARE_400`;
//! - an accepted body is a JSON object (a DTO never accepts a bare string or number). Known
//!   exception: serde's derived struct deserialisers also take an array of the fields in order
//!   (`["What a view!"]` is accepted as a comment); see `ARRAYS_ACCEPTED`.
//! - the validation behind each DTO never panics: comment text normalisation (an accepted text
//!   is already normal), the hidden-words list (as `put_hidden_words` checks it), IDs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use likewise_core::comment::hidden_words::HiddenWords;
use likewise_core::comment::text::normalize_text;
use likewise_http::dto::{
    CommentCreate, HiddenWordsDto, ModerationDecision, PostPut, ReportCreate, SettingsDto, UserPut,
};
use likewise_http::error::ApiError;
use likewise_http::extract::parse_json;
use serde::de::DeserializeOwned;

/// Set to `false` once a wrong type for an enum field is a 422 like any other wrong type.
const ENUM_TYPE_ERRORS_ARE_400: bool = false;

/// What the body is: not JSON, a JSON array, or other JSON (objects, scalars).
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Malformed,
    Array,
    Json,
}

/// Parse as the extractor does and check the error mapping; the value when accepted.
/// `has_enum`: the DTO has an enum field (see `ENUM_TYPE_ERRORS_ARE_400`). An array that does
/// not fit may be either status (serde_json calls extra elements "trailing characters", a
/// syntax error), so only other JSON is held to "does not fit is 422".
fn parse<T: DeserializeOwned>(data: &[u8], shape: Shape, has_enum: bool) -> Option<T> {
    match parse_json::<T>(data) {
        Ok(v) => {
            assert!(shape != Shape::Malformed, "a body that is not JSON was accepted");
            Some(v)
        }
        Err(e) => {
            let status = status(&e);
            assert!(status == 400 || status == 422, "body rejected with {status}");
            if shape == Shape::Json && !(has_enum && ENUM_TYPE_ERRORS_ARE_400) {
                assert_eq!(status, 422, "well-formed JSON that does not fit must be a 422");
            }
            None
        }
    }
}

/// Set to `false` once `parse_json` refuses arrays, to hold it to "bodies are objects".
const ARRAYS_ACCEPTED: bool = false;

fn status(e: &ApiError) -> u16 {
    e.status().as_u16()
}

fuzz_target!(|data: &[u8]| {
    let value = serde_json::from_slice::<serde_json::Value>(data).ok();
    let shape = match &value {
        None => Shape::Malformed,
        Some(v) if v.is_array() => Shape::Array,
        Some(_) => Shape::Json,
    };
    let is_object = value.as_ref().is_some_and(|v| v.is_object() || (ARRAYS_ACCEPTED && v.is_array()));

    if let Some(body) = parse::<CommentCreate>(data, shape, false) {
        assert!(is_object);
        if let Ok(text) = normalize_text(&body.text) {
            assert_eq!(normalize_text(&text).as_deref(), Ok(text.as_str()), "normalisation is idempotent");
        }
        if let Some(p) = body.parent_id {
            assert!(p.0 != 0, "comment ID 0 accepted");
        }
    }
    if let Some(body) = parse::<HiddenWordsDto>(data, shape, false) {
        assert!(is_object);
        // What `Engagement::put_hidden_words` does with the list.
        let words: Vec<String> = body.words.iter().map(|w| w.trim().to_string()).collect();
        if !words.iter().any(|w| w.contains('\n'))
            && let Ok(h) = HiddenWords::new(&words)
        {
            let hit = h.matches("a short comment, with some words in it");
            assert!(!(h.is_empty() && hit), "an empty list matched");
        }
    }
    if parse::<ReportCreate>(data, shape, true).is_some() {
        assert!(is_object);
    }
    if parse::<ModerationDecision>(data, shape, true).is_some() {
        assert!(is_object);
    }
    if let Some(body) = parse::<UserPut>(data, shape, false) {
        assert!(is_object);
        let _ = body.username.trim().chars().count();
    }
    if let Some(body) = parse::<PostPut>(data, shape, true) {
        assert!(is_object);
        assert!(body.author_id.0 != 0, "user ID 0 accepted");
        // IDs are decimal strings in JSON (never numbers), read as plain decimals.
        // (In the array form the fields come in declaration order: author_id first.)
        let field = value.as_ref().and_then(|v| v.get("author_id").or_else(|| v.get(0)));
        let sent = field.and_then(|v| v.as_str());
        let sent = sent.expect("author_id was a string");
        assert!(sent.bytes().all(|b| b.is_ascii_digit()), "author_id {sent:?} is not plain digits");
        assert_eq!(sent.parse::<u64>().ok(), Some(body.author_id.0), "author_id read as written");
    }
    if let Some(body) = parse::<SettingsDto>(data, shape, false) {
        assert!(is_object);
        let back = serde_json::to_value(&body).expect("serialize");
        let sent = value.as_ref().and_then(|v| v.get("hide_like_counts").or_else(|| v.get(0)));
        assert_eq!(back.get("hide_like_counts"), sent, "settings echoed as sent");
    }
});
