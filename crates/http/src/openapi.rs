//! The OpenAPI 3 document: the route table's annotations (`crate::api_routes`), plus the
//! schemas, the bearer scheme and the constraints serde cannot express.

use crate::{dto, error};
use serde_json::json;
use utoipa::OpenApi;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};

#[derive(OpenApi)]
#[openapi(
    info(title = "Likewise", description = "Likes, counts and feed hydration for a social platform."),
    components(schemas(error::ErrorBody, dto::LikeResponse, dto::PostViewDto, dto::PostsResponse, dto::CommentDto,
        dto::LikerDto, dto::LikersPage, dto::UserPut, dto::PostPut, dto::PostRecord, dto::UserRecord,
        dto::SettingsDto, dto::Health, dto::CommentsSetting, dto::CommentCreate, dto::CommentsPage, dto::HiddenWordsDto,
        dto::ReportReasonDto, dto::ReportCreate, dto::AppealCreate, dto::HeldByDto, dto::ModerationAction, dto::ModerationDecision, dto::QueueItem,
        dto::QueuePage, dto::InsightsDto, dto::NotificationDto, dto::NotificationsPage, dto::IntegrityReason,
        dto::IntegrityEvidence, dto::IntegrityAction, dto::IntegrityDecisionBody, dto::IntegrityFlagDto,
        dto::IntegrityPage)),
    modifiers(&Bearer),
)]
struct ApiDoc;

/// What the document holds besides the routes (`crate::api_routes` adds each route's
/// path, parameters and responses from its annotation).
pub fn base() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

struct Bearer;

impl utoipa::Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut http = Http::new(HttpAuthScheme::Bearer);
        http.bearer_format = Some("JWT".into());
        components.add_security_scheme("bearer", SecurityScheme::Http(http));
    }
}

/// The document served at `/openapi.json`: the route table's annotations, completed with
/// what every route shares.
pub fn complete(doc: utoipa::openapi::OpenApi) -> serde_json::Value {
    let mut doc = serde_json::to_value(doc).unwrap_or_default();
    complete_json(&mut doc);
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
/// What shows nothing besides whitespace and controls (`likewise_core::names::is_invisible`):
/// format characters, separators and other default-ignorables. Characters beyond the BMP are
/// written `\UXXXXXXXX`, which Rust's `regex` and Python's `re` (schemathesis) both read.
const INVISIBLE: &str = concat!(
    r"\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e",
    r"\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\u2028\u2029",
    r"\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a",
    r"\U000e0001\U000e0020-\U000e007f",
    r"\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2800\u3164\ufe00-\ufe0f\uffa0\U000e0100-\U000e01ef",
);

/// The blank fillers (`likewise_core::names::is_blank_filler`): Hangul fillers and the Braille
/// blank, which a name refuses anywhere.
const BLANK_FILLERS: &str = r"\u115f\u1160\u3164\uffa0\u2800";

/// The invisible characters a name refuses but in emoji sequences
/// (`likewise_core::names::is_format_like`): [`INVISIBLE`] less the blank fillers, plus the
/// unassigned default-ignorables.
const FORMAT_LIKE: &str = concat!(
    r"\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e",
    r"\u2060-\u206f\ufeff\ufff0-\ufffb\u2028\u2029",
    r"\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a",
    r"\U000e0000-\U000e0fff",
    r"\u034f\u17b4\u17b5\u180b-\u180f\ufe00-\ufe0f",
);
/// Pictographs (`likewise_core::names::is_pictograph`).
const PICTOGRAPH: &str = concat!(
    r"\xa9\xae\u203c\u2049\u2122\u2139\u2194-\u21aa\u2300-\u23ff\u24c2\u25a0-\u27bf",
    r"\u2900-\u297f\u2b00-\u2bff\u3030\u303d\u3297\u3299\U0001f000-\U0001faff",
);

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
        // The limit applies after trimming (docs/api.md), which a schema cannot express: a raw
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
        // Trimmed, it is not empty and holds no control character (tabs included) and no
        // invisible character but in an emoji sequence (a pictograph, its selector U+FE0F,
        // joined to the next by U+200D), and at least one visible character (first, last or
        // inside); the edges that trimming removes may hold any whitespace
        // (`routes::upstream::check_username`).
        let emoji = format!("[{PICTOGRAPH}]\\ufe0f?(?:\\u200d[{PICTOGRAPH}]\\ufe0f?)*");
        let edge = format!("(?:[^{WS}{ALL_CC}{FORMAT_LIKE}{BLANK_FILLERS}]|{emoji})");
        let mid = format!("(?:[^{ALL_CC}{FORMAT_LIKE}{BLANK_FILLERS}]|{emoji})*");
        let vis = format!("(?:[^{WS}{ALL_CC}{INVISIBLE}{FORMAT_LIKE}]|{emoji})");
        p["pattern"] = json!(format!(
            "^[{WS}]*(?:{vis}|{vis}{mid}{edge}|{edge}{mid}{vis}|{edge}{mid}{vis}{mid}{edge})[{WS}]*$"
        ));
    }
    if let Some(p) = schemas.get_mut("HiddenWordsDto").and_then(|s| s.pointer_mut("/properties/words")) {
        use likewise_core::comment::hidden_words::{MAX_HIDDEN_WORDS, MAX_WORD_CHARS};
        p["maxItems"] = json!(MAX_HIDDEN_WORDS);
        // One line, with at least one character that shows (a blank entry is 400:
        // `hidden_words::refuse_blank`, by `likewise_core::names::is_invisible`).
        let pattern = format!(r"^[^\n]*[^{WS}{ALL_CC}{INVISIBLE}][^\n]*$");
        p["items"] = json!({"type": "string", "maxLength": MAX_WORD_CHARS, "pattern": pattern});
    }
}

/// Operations under a per-user rate limit (`[limits]`): likes, unlikes and comments.
const RATE_LIMITED: &[&str] =
    &["like_post", "unlike_post", "create_comment", "like_comment", "unlike_comment"];

/// The API's version, as `info.version`: the major is the `/v1` of the paths; the minor grows
/// when routes or fields are added (clients ignore fields they do not know).
pub const API_VERSION: &str = "1.0";

/// An example body for each request schema, shown by documentation tools and sent by the
/// contract tests' example phase (`tests::request_examples_are_accepted` parses each one).
fn request_example(schema: &str) -> Option<serde_json::Value> {
    Some(match schema {
        "UserPut" => json!({"username": "alice", "verified": false}),
        "PostPut" => json!({"author_id": "7", "hide_like_count": false, "comments": "everyone"}),
        "CommentCreate" => json!({"text": "Lovely light in this one."}),
        "SettingsDto" => json!({"hide_like_counts": true}),
        "HiddenWordsDto" => json!({"words": ["spoiler", "giveaway"]}),
        "ReportCreate" => json!({"reason": "spam"}),
        "AppealCreate" => json!({"message": "It quotes the book, it is not about anyone here."}),
        "ModerationDecision" => json!({"action": "approve"}),
        "IntegrityDecisionBody" => json!({"action": "confirm"}),
        _ => return None,
    })
}

fn describe(code: &str) -> &'static str {
    match code {
        "200" | "201" | "204" => "Success.",
        "400" => "Invalid input.",
        "403" => "Not allowed for this caller.",
        "404" => "No such resource.",
        "409" => "Conflicts with the current state.",
        "429" => "Rate limited: retry after the Retry-After header's seconds.",
        "415" => "The body is not declared as JSON.",
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
/// token, a request timeout), and an example of each request body. Operation IDs are the
/// handlers' own (`operation_id` in each annotation): generated clients name their methods
/// after them, so they are unique (`tests::operation_ids_are_unique`) and stable.
fn complete_json(doc: &mut serde_json::Value) {
    doc["info"]["version"] = json!(API_VERSION);
    let id = id_pattern();
    complete_schemas(doc, &id);
    let Some(paths) = doc.get_mut("paths").and_then(|p| p.as_object_mut()) else { return };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else { continue };
        let v1 = path.starts_with("/v1/");
        for (method, op) in item.iter_mut() {
            if let Some(example) = op
                .pointer("/requestBody/content/application~1json/schema/$ref")
                .and_then(|r| r.as_str())
                .and_then(|r| r.rsplit('/').next())
                .and_then(request_example)
            {
                op["requestBody"]["content"]["application/json"]["example"] = example;
            }
            // An appeal's body is optional (docs/api.md: `{"message": "..."?}`): no body is a 202.
            if op.get("operationId").and_then(|o| o.as_str()) == Some("appeal_comment")
                && let Some(body) = op.get_mut("requestBody").and_then(|b| b.as_object_mut())
            {
                body.insert("required".into(), json!(false));
            }
            let Some(op) = op.as_object_mut() else { continue };
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
                // The per-request timeout covers these routes too.
                if let Some(r) = op.get_mut("responses").and_then(|r| r.as_object_mut()) {
                    r.entry("503").or_insert_with(|| error_response("The request timed out; retry later."));
                }
                continue;
            }
            let has_body = op.contains_key("requestBody");
            let responses = op.entry("responses").or_insert_with(|| json!({}));
            let Some(responses) = responses.as_object_mut() else { continue };
            let mut add = |code: &str, text: &str| {
                responses.entry(code.to_string()).or_insert_with(|| error_response(text));
            };
            add("401", "Missing, malformed or expired bearer token.");
            add("503", "The request timed out, or storage is unavailable; nothing was written: retry later.");
            if method != "get" {
                add(
                    "504",
                    "outcome_unknown: the write may or may not have been stored; send it again as it was (a comment create with the same Idempotency-Key).",
                );
            }
            // Any /v1 request may carry two Authorization headers, which is a 400.
            add(
                "400",
                "Invalid input: a malformed ID, query parameter or JSON body, or two Authorization headers.",
            );
            if has_path_id {
                add("404", "No such resource.");
            }
            if has_body {
                add("413", "The request body exceeds server.max_body_bytes.");
                add("415", "The body is not declared as JSON (Content-Type: application/json).");
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

    /// Every operation of the document: (method, path, operation).
    fn operations(doc: &serde_json::Value) -> Vec<(String, String, serde_json::Value)> {
        let mut ops = Vec::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("path item") {
                ops.push((method.clone(), path.clone(), op.clone()));
            }
        }
        ops
    }

    /// Generated clients key their methods by operation ID: a duplicate makes generators
    /// refuse the document or emit colliding methods.
    #[test]
    fn operation_ids_are_unique() {
        let doc = crate::openapi_document();
        let mut seen = std::collections::HashMap::new();
        for (method, path, op) in operations(&doc) {
            let id =
                op["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            assert!(
                !id.is_empty() && id.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{method} {path}: operationId {id:?} is not snake_case"
            );
            if let Some(other) = seen.insert(id.to_owned(), format!("{method} {path}")) {
                panic!("operationId {id:?} names both {other} and {method} {path}");
            }
        }
        assert!(seen.len() >= 34, "every route is in the document");
    }

    /// What a client developer reads: a summary, the error responses with the error body,
    /// an example of each request body; and the API's version.
    #[test]
    fn every_operation_is_documented() {
        let doc = crate::openapi_document();
        assert_eq!(doc["info"]["version"], super::API_VERSION);
        let error_ref = "#/components/schemas/ErrorBody";
        for (method, path, op) in operations(&doc) {
            let what = format!("{method} {path}");
            assert!(op["summary"].as_str().is_some_and(|s| !s.is_empty()), "{what}: no summary");
            let responses = op["responses"].as_object().expect("responses");
            let errors: Vec<_> = responses.iter().filter(|(code, _)| code.as_str() >= "400").collect();
            assert!(!errors.is_empty(), "{what}: no error response");
            for (code, r) in errors {
                // The health check answers 503 with its own shape (`{"status": "unavailable"}`).
                if path == "/healthz" && code == "503" {
                    continue;
                }
                assert_eq!(
                    r.pointer("/content/application~1json/schema/$ref").and_then(|r| r.as_str()),
                    Some(error_ref),
                    "{what}: {code} lacks the error body"
                );
            }
            if let Some(body) = op.get("requestBody") {
                assert!(
                    body["content"]["application/json"].get("example").is_some(),
                    "{what}: no example body"
                );
            }
        }
    }

    /// Each request example is a body its route accepts.
    #[test]
    fn request_examples_are_accepted() {
        use crate::dto;
        use crate::extract::parse_json;
        fn parses<T: serde::de::DeserializeOwned>(name: &str) {
            let body = super::request_example(name).expect("example").to_string();
            assert!(parse_json::<T>(body.as_bytes()).is_ok(), "{name}: {body}");
        }
        parses::<dto::UserPut>("UserPut");
        parses::<dto::PostPut>("PostPut");
        parses::<dto::CommentCreate>("CommentCreate");
        parses::<dto::SettingsDto>("SettingsDto");
        parses::<dto::HiddenWordsDto>("HiddenWordsDto");
        parses::<dto::ReportCreate>("ReportCreate");
        parses::<dto::AppealCreate>("AppealCreate");
        parses::<dto::ModerationDecision>("ModerationDecision");
        parses::<dto::IntegrityDecisionBody>("IntegrityDecisionBody");
        let name = super::request_example("UserPut").expect("example")["username"].clone();
        assert!(crate::routes::upstream::valid_username(name.as_str().expect("text")).is_some());
    }

    /// `docs/api.md`, the contract in prose, and this document name the same routes: each
    /// `METHOD /path` the prose writes (in backticks, `PUT|DELETE /x` for two) is served and
    /// described here, and each operation here is written there.
    #[test]
    fn the_prose_contract_and_the_document_name_the_same_routes() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api.md");
        let prose = std::fs::read_to_string(path).expect("docs/api.md");
        let re = regex::Regex::new(
            r"`((?:GET|PUT|POST|DELETE|PATCH)(?:\|(?:GET|PUT|POST|DELETE|PATCH))*) (/[^`?\s]*)",
        )
        .expect("compiles");
        let mut written = std::collections::BTreeSet::new();
        for c in re.captures_iter(&prose) {
            for method in c[1].split('|') {
                written.insert((method.to_lowercase(), c[2].to_string()));
            }
        }
        let served: std::collections::BTreeSet<(String, String)> = operations(&crate::openapi_document())
            .into_iter()
            .filter(|(method, _, _)| method != "parameters")
            .map(|(method, path, _)| (method, path))
            .collect();
        let unwritten: Vec<_> = served.difference(&written).collect();
        let unserved: Vec<_> = written.difference(&served).collect();
        assert!(unwritten.is_empty(), "operations docs/api.md does not write: {unwritten:?}");
        assert!(unserved.is_empty(), "routes docs/api.md writes that /openapi.json lacks: {unserved:?}");
    }

    /// The example client of `web-tests/client` (type-checked in CI against types generated
    /// from this document) calls every operation: a route added here needs its call there.
    #[test]
    fn the_example_client_calls_every_operation() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../web-tests/client/example.ts");
        let client = std::fs::read_to_string(path).expect("web-tests/client/example.ts");
        for (method, path, op) in operations(&crate::openapi_document()) {
            let id = op["operationId"].as_str().expect("operationId");
            assert!(
                client.lines().any(|l| l.trim_start().starts_with(&format!("{id}:"))),
                "web-tests/client/example.ts has no call for {id} ({method} {path})"
            );
        }
    }

    /// The username pattern and lengths of the document, compiled as a validator would.
    struct UsernameRule {
        re: regex::Regex,
        min: u64,
        max: u64,
    }

    impl UsernameRule {
        fn accepts(&self, s: &str) -> bool {
            (self.min..=self.max).contains(&(s.chars().count() as u64)) && self.re.is_match(s)
        }
    }

    /// Built once: the document and its regex for each of the property test's cases took a
    /// minute of the suite.
    fn username_rule() -> &'static UsernameRule {
        static RULE: std::sync::LazyLock<UsernameRule> = std::sync::LazyLock::new(|| {
            let doc = crate::openapi_document();
            let p = &doc["components"]["schemas"]["UserPut"]["properties"]["username"];
            UsernameRule {
                re: regex::Regex::new(p["pattern"].as_str().expect("pattern")).expect("compiles"),
                min: p["minLength"].as_u64().expect("min"),
                max: p["maxLength"].as_u64().expect("max"),
            }
        });
        &RULE
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
            '\u{200b}',
            '\u{200d}',
            '\u{200e}',
            '\u{202e}',
            '\u{2066}',
            '\u{2800}',
            '\u{e0041}',
            '\u{fe0f}',
            'é',
            '\u{10437}',
            '👩',
            '❤',
            '\u{e007f}',
            '\u{2065}',
        ]);
        prop::collection::vec(chars, 0..70).prop_map(|v| v.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3_000))]

        /// The schema accepts exactly the usernames the server accepts, so a schema-valid name
        /// is never refused (and a refused one is never documented as valid).
        #[test]
        fn the_username_schema_is_the_servers_rule(s in tricky()) {
            prop_assert_eq!(username_rule().accepts(&s), crate::routes::upstream::valid_username(&s).is_some(), "{:?}", s);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3_000))]

        /// A hidden word the schema calls valid is never refused as blank, and a blank one is
        /// never documented as valid.
        #[test]
        fn the_hidden_word_schema_refuses_exactly_the_blank_words(s in tricky()) {
            static RE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
                let doc = crate::openapi_document();
                let p = &doc["components"]["schemas"]["HiddenWordsDto"]["properties"]["words"]["items"];
                regex::Regex::new(p["pattern"].as_str().expect("pattern")).expect("compiles")
            });
            let re = &*RE;
            let blank = likewise_core::comment::hidden_words::refuse_blank(std::slice::from_ref(&s)).is_err();
            prop_assert!(!(re.is_match(&s) && blank), "{:?}", s);
            if !s.contains('\n') {
                prop_assert_eq!(re.is_match(&s), !blank, "{:?}", s);
            }
        }
    }

    #[test]
    fn username_examples() {
        let schema = username_rule();
        for ok in [
            "alice",
            " alice ",
            "\talice\n",
            "a b",
            "👨\u{200d}👩",
            "❤\u{fe0f}\u{200d}🔥 fan",
            "\u{2028}bob\u{2028}",
        ] {
            assert!(schema.accepts(ok) && crate::routes::upstream::valid_username(ok).is_some(), "{ok:?}");
        }
        for bad in [
            "",
            "   ",
            "a\tb",
            "\u{1c}alice",
            "al\u{85}ice",
            &"x".repeat(65),
            "\u{feff}",
            "adm\u{202e}nimi",
            "\u{200b}\u{200b}",
            " \u{200d}\u{2800} ",
            "\u{e0041}",
            "\u{2066}bob",
            "\u{200b}a\u{200b}",
            "al\u{200b}ice",
            "al\u{200d}ice",
            "bob\u{e0041}",
            "x\u{fff9}y",
            "x\u{2028}y",
            "a\u{fe0f}",
        ] {
            assert!(
                !schema.accepts(bad) && crate::routes::upstream::valid_username(bad).is_none(),
                "{bad:?}"
            );
        }
    }
}
