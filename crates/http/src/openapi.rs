//! The OpenAPI 3 document, generated from the handlers' annotations.

use crate::{dto, error, routes};
use serde_json::json;
use utoipa::OpenApi;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};

#[derive(OpenApi)]
#[openapi(
    info(title = "Likewise", description = "Likes, counts and feed hydration for a social platform."),
    paths(
        routes::ops::healthz, routes::ops::metrics, routes::ops::openapi,
        routes::upstream::put_user, routes::upstream::put_post, routes::upstream::follow, routes::upstream::unfollow,
        routes::likes::like, routes::likes::unlike, routes::likes::likers,
        routes::posts::posts, routes::posts::post, routes::views::view, routes::views::insights,
        routes::comments::create, routes::comments::list, routes::comments::replies, routes::comments::delete,
        routes::comments::like, routes::comments::unlike,
        routes::moderation::put_hidden_words, routes::moderation::block, routes::moderation::unblock,
        routes::moderation::restrict, routes::moderation::unrestrict, routes::moderation::report,
        routes::moderation::approve, routes::moderation::pin, routes::moderation::unpin,
        routes::moderation::queue, routes::moderation::decide,
        routes::me::put_settings, routes::me::get_settings,
        routes::notifications::inbox, routes::notifications::stream,
    ),
    components(schemas(error::ErrorBody, dto::LikeResponse, dto::PostViewDto, dto::PostsResponse, dto::CommentDto,
        dto::LikerDto, dto::LikersPage, dto::UserPut, dto::PostPut, dto::PostRecord, dto::UserRecord,
        dto::SettingsDto, dto::Health, dto::CommentsSetting, dto::CommentCreate, dto::CommentsPage, dto::HiddenWordsDto,
        dto::ReportReasonDto, dto::ReportCreate, dto::ModerationAction, dto::ModerationDecision, dto::QueueItem,
        dto::QueuePage, dto::InsightsDto, dto::NotificationDto, dto::NotificationsPage)),
    modifiers(&Bearer),
)]
struct ApiDoc;

struct Bearer;

impl utoipa::Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut http = Http::new(HttpAuthScheme::Bearer);
        http.bearer_format = Some("JWT".into());
        components.add_security_scheme("bearer", SecurityScheme::Http(http));
    }
}

/// The document served at `/openapi.json`: the handlers' annotations, completed with what
/// every route shares (see [`complete`]).
pub fn document() -> serde_json::Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    complete(&mut doc);
    doc
}

/// The wire format of an ID: a decimal from 1 to 2^64-1 without leading zeros, exactly what
/// [`likewise_core::ids::parse_id`] accepts, so contract tests can tell valid from invalid.
pub fn id_pattern() -> String {
    const MAX: &[u8] = b"18446744073709551615";
    // 1 to 19 digits always fit; a 20-digit ID must not exceed MAX: share a prefix with it,
    // then a smaller digit, then anything.
    let mut alts = vec!["[1-9][0-9]{0,18}".to_string()];
    for i in 0..MAX.len() {
        let d = MAX[i] - b'0';
        let lo = if i == 0 { 1 } else { 0 };
        if d > lo {
            let prefix = std::str::from_utf8(&MAX[..i]).unwrap_or_default();
            let rest = MAX.len() - i - 1;
            alts.push(format!("{prefix}[{lo}-{}][0-9]{{{rest}}}", d - 1));
        }
    }
    alts.push(std::str::from_utf8(MAX).unwrap_or_default().to_string());
    format!("(?:{})", alts.join("|"))
}

/// Characters a comment or username may never hold: controls other than tab and line breaks
/// (`char::is_control`, Unicode Cc) and, for comments, the bidi overrides and isolates.
const CC: &str = r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f";
const BIDI: &str = r"\u202a-\u202e\u2066-\u2069";
/// What `str::trim` removes (Unicode White_Space), spelled out: `\s` differs between regex
/// dialects (Python's includes U+001C-U+001F, ECMAScript's U+FEFF), and a username's edges
/// may hold whitespace controls (a tab) that trimming removes before the control check.
const WS: &str = r"\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000";
/// Every control character (Unicode Cc, `char::is_control`).
const ALL_CC: &str = r"\x00-\x1f\x7f-\x9f";

/// Constraints serde cannot express on the DTOs: ID formats, and the text rules of
/// `likewise_core::comment::text` and the upstream handlers, as patterns.
fn complete_schemas(doc: &mut serde_json::Value, id: &str) {
    let Some(schemas) = doc.pointer_mut("/components/schemas").and_then(|s| s.as_object_mut()) else {
        return;
    };
    for (_, schema) in schemas.iter_mut() {
        for (name, prop) in schema.get_mut("properties").and_then(|p| p.as_object_mut()).into_iter().flatten()
        {
            let is_string = match prop.get("type") {
                Some(serde_json::Value::String(t)) => t == "string",
                Some(serde_json::Value::Array(ts)) => ts.iter().any(|t| t == "string"),
                _ => false,
            };
            if name.ends_with("_id") && is_string {
                prop["pattern"] = json!(format!("^{id}$"));
            }
        }
    }
    // Text: no forbidden characters, and at least one that survives trimming.
    let text = |extra: &str| format!(r"^[^{CC}{extra}]*[^\s\x00-\x1f\x7f-\x9f{extra}][^{CC}{extra}]*$");
    if let Some(p) = schemas.get_mut("CommentCreate").and_then(|s| s.pointer_mut("/properties/text")) {
        // The limit applies after trimming (API.md), which a schema cannot express: a raw
        // maxLength would call a padded 2,200-character comment invalid though it is accepted.
        // The request body limit bounds the raw text; the server answers 400 past the limit.
        p["minLength"] = json!(1);
        p["pattern"] = json!(text(BIDI));
        p["description"] = json!(format!(
            "1..={} characters (Unicode scalar values) after trimming surrounding whitespace, \
             line endings counted as one; longer is 400 validation",
            likewise_core::comment::text::MAX_COMMENT_CHARS
        ));
    }
    if let Some(p) = schemas.get_mut("UserPut").and_then(|s| s.pointer_mut("/properties/username")) {
        p["minLength"] = json!(1);
        p["maxLength"] = json!(crate::routes::upstream::MAX_USERNAME);
        // Trimmed, it is not empty and holds no control character (tabs included); the edges
        // that trimming removes may hold any whitespace (`routes::upstream::put_user`).
        p["pattern"] = json!(format!(r"^[{WS}]*[^{WS}{ALL_CC}](?:[^{ALL_CC}]*[^{WS}{ALL_CC}])?[{WS}]*$"));
    }
    if let Some(p) = schemas.get_mut("HiddenWordsDto").and_then(|s| s.pointer_mut("/properties/words")) {
        use likewise_core::comment::hidden_words::{MAX_HIDDEN_WORDS, MAX_WORD_CHARS};
        p["maxItems"] = json!(MAX_HIDDEN_WORDS);
        p["items"] = json!({"type": "string", "maxLength": MAX_WORD_CHARS, "pattern": r"^[^\n]*$"});
    }
}

/// Operations under a per-user rate limit (`[limits]`): likes, unlikes and comments.
const RATE_LIMITED: &[&str] =
    &["likes_like", "likes_unlike", "comments_create", "comments_like", "comments_unlike"];

fn describe(code: &str) -> &'static str {
    match code {
        "200" | "201" | "204" => "Success.",
        "400" => "Invalid input.",
        "403" => "Not allowed for this caller.",
        "404" => "No such resource.",
        "409" => "Conflicts with the current state.",
        "429" => "Rate limited: retry after the Retry-After header's seconds.",
        _ => "See the error body.",
    }
}

fn error_response(description: &str) -> serde_json::Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    })
}

/// Fill in what every route shares, in one place rather than on 34 annotations: the exact
/// format of IDs and paging parameters, and the error responses that middleware and
/// extractors can produce on any route (bad IDs, bodies too large or malformed, a missing
/// token, a request timeout). Operation IDs get their tag as a prefix to be unique.
fn complete(doc: &mut serde_json::Value) {
    let id = id_pattern();
    complete_schemas(doc, &id);
    let Some(paths) = doc.get_mut("paths").and_then(|p| p.as_object_mut()) else { return };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else { continue };
        let v1 = path.starts_with("/v1/");
        for op in item.values_mut() {
            let Some(op) = op.as_object_mut() else { continue };
            let tag = op.get("tags").and_then(|t| t.get(0)).and_then(|t| t.as_str()).map(str::to_owned);
            if let (Some(tag), Some(oid)) = (tag, op.get("operationId").and_then(|o| o.as_str())) {
                let oid = format!("{tag}_{oid}");
                op.insert("operationId".into(), json!(oid));
            }
            let limited =
                op.get("operationId").and_then(|o| o.as_str()).is_some_and(|o| RATE_LIMITED.contains(&o));
            let mut has_path_id = false;
            for p in op.get_mut("parameters").and_then(|p| p.as_array_mut()).into_iter().flatten() {
                let name = p.get("name").and_then(|n| n.as_str()).unwrap_or_default().to_owned();
                let place = p.get("in").and_then(|n| n.as_str()).unwrap_or_default().to_owned();
                let schema = match (place.as_str(), name.as_str()) {
                    ("path", n) if n.ends_with("_id") => {
                        has_path_id = true;
                        json!({"type": "string", "pattern": format!("^{id}$"), "example": "42"})
                    }
                    ("query", "limit") => {
                        json!({"type": "integer", "minimum": 1, "maximum": 100, "default": 20})
                    }
                    ("query", "cursor") => json!({"type": "string", "minLength": 1}),
                    ("query", "order") => json!({"type": "string", "enum": ["top", "newest", "oldest"]}),
                    ("query", "ids") => {
                        p["required"] = json!(true);
                        json!({"type": "string", "pattern": format!("^{id}(?:,{id}){{0,99}}$"), "example": "42,43"})
                    }
                    _ => continue,
                };
                p["schema"] = schema;
            }
            if !v1 {
                continue;
            }
            let has_body = op.contains_key("requestBody");
            let has_params = op.get("parameters").and_then(|p| p.as_array()).is_some_and(|p| !p.is_empty());
            let responses = op.entry("responses").or_insert_with(|| json!({}));
            let Some(responses) = responses.as_object_mut() else { continue };
            let mut add = |code: &str, text: &str| {
                responses.entry(code.to_string()).or_insert_with(|| error_response(text));
            };
            add("401", "Missing, malformed or expired bearer token.");
            add("503", "The request timed out, or storage is unavailable; retry later.");
            if has_path_id || has_body || has_params {
                add("400", "Invalid input: a malformed ID, query parameter or JSON body.");
            }
            if has_path_id {
                add("404", "No such resource.");
            }
            if has_body {
                add("413", "The request body exceeds server.max_body_bytes.");
                add(
                    "422",
                    "Well-formed JSON that does not fit the schema (unknown or missing fields, wrong types).",
                );
            }
            if limited {
                let mut r = error_response(describe("429"));
                r["headers"] = json!({"Retry-After": {
                    "description": "Seconds until the next request may succeed.",
                    "required": true,
                    "schema": {"type": "integer", "minimum": 1}
                }});
                responses.insert("429".into(), r);
            }
            for (code, r) in responses.iter_mut() {
                if r.get("description").and_then(|d| d.as_str()).is_some_and(str::is_empty) {
                    r["description"] = json!(describe(code));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    /// The username pattern of the document, compiled as a validator would.
    fn username_rule() -> impl Fn(&str) -> bool {
        let doc = super::document();
        let p = &doc["components"]["schemas"]["UserPut"]["properties"]["username"];
        let re = regex::Regex::new(p["pattern"].as_str().expect("pattern")).expect("compiles");
        let (min, max) = (p["minLength"].as_u64().expect("min"), p["maxLength"].as_u64().expect("max"));
        move |s: &str| {
            let n = s.chars().count() as u64;
            (min..=max).contains(&n) && re.is_match(s)
        }
    }

    /// Characters where the rules differ by dialect or by trimming: controls that are and are
    /// not whitespace, Unicode spaces, the BOM, and ordinary letters.
    fn tricky() -> impl Strategy<Value = String> {
        let chars = prop::sample::select(vec![
            'a',
            'Z',
            '7',
            ' ',
            '\t',
            '\n',
            '\r',
            '\u{0b}',
            '\u{0c}',
            '\u{1c}',
            '\u{1f}',
            '\u{01}',
            '\u{7f}',
            '\u{85}',
            '\u{9f}',
            '\u{a0}',
            '\u{1680}',
            '\u{2000}',
            '\u{2028}',
            '\u{202f}',
            '\u{3000}',
            '\u{feff}',
            '\u{180e}',
            'é',
            '\u{10437}',
        ]);
        prop::collection::vec(chars, 0..70).prop_map(|v| v.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3_000))]

        /// The schema accepts exactly the usernames the server accepts, so a schema-valid name
        /// is never refused (and a refused one is never documented as valid).
        #[test]
        fn the_username_schema_is_the_servers_rule(s in tricky()) {
            let schema = username_rule();
            prop_assert_eq!(schema(&s), crate::routes::upstream::valid_username(&s).is_some(), "{:?}", s);
        }
    }

    #[test]
    fn username_examples() {
        let schema = username_rule();
        for ok in ["alice", " alice ", "\talice\n", "a b", "\u{feff}"] {
            assert!(schema(ok) && crate::routes::upstream::valid_username(ok).is_some(), "{ok:?}");
        }
        for bad in ["", "   ", "a\tb", "\u{1c}alice", "al\u{85}ice", &"x".repeat(65)] {
            assert!(!schema(bad) && crate::routes::upstream::valid_username(bad).is_none(), "{bad:?}");
        }
    }
}
