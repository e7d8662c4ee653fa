//! Extractors that parse input once, at the edge, into domain types, and turn every rejection
//! into the JSON error contract (never axum's plain-text rejections).

use crate::error::ApiError;
use axum::extract::rejection::{BytesRejection, FailedToBufferBody};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::HeaderMap;
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use bytes::Bytes;
use serde::de::DeserializeOwned;

/// Path parameters, parsed with serde (IDs parse as positive decimals).
pub struct PathParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for PathParams<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| PathParams(p.0))
            .map_err(|e| ApiError::invalid(format!("bad path parameter: {}", e.body_text())))
    }
}

/// Query parameters. A 400 names the parameter at fault, in our words: a parameter given
/// twice, or one whose value does not parse (axum's own rejection says only "Failed to
/// deserialize query string").
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        parse_query(parts.uri.query().unwrap_or_default()).map(QueryParams)
    }
}

/// Parse a query string (`a=1&b=2`, form-encoded) into `T`.
pub fn parse_query<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    let pairs = form_urlencoded::parse(query.as_bytes());
    // serde would say "duplicate field" only for fields it knows, and without the query's
    // wording; any parameter given twice is ambiguous (proxies and servers pick differently).
    let mut seen = std::collections::HashSet::new();
    for (name, _) in pairs {
        if !seen.insert(name.clone()) {
            return Err(ApiError::invalid(format!("query parameter {name} is given more than once")));
        }
    }
    serde_path_to_error::deserialize(serde_urlencoded::Deserializer::new(pairs)).map_err(|e| {
        let name = e.path().to_string();
        let why = e.into_inner();
        if name == "." {
            ApiError::invalid(format!("invalid query string: {why}"))
        } else {
            ApiError::invalid(format!("query parameter {name} is not valid: {why}"))
        }
    })
}

/// True when `headers` declare a JSON body: exactly one `Content-Type`, whose media type is
/// `application/json` or `application/<anything>+json` (any case, parameters ignored).
pub fn declares_json(headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(CONTENT_TYPE).iter();
    match (values.next(), values.next()) {
        (Some(v), None) => is_json_media_type(v.as_bytes()),
        _ => false,
    }
}

/// `application/json` or `application/<token>+json`, with any parameters after a `;`.
pub fn is_json_media_type(value: &[u8]) -> bool {
    let essence = value.split(|b| *b == b';').next().unwrap_or_default().trim_ascii();
    let Some(slash) = essence.iter().position(|b| *b == b'/') else { return false };
    let (ty, sub) = (&essence[..slash], &essence[slash + 1..]);
    let token =
        |s: &[u8]| !s.is_empty() && s.iter().all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(b));
    if !ty.eq_ignore_ascii_case(b"application") || !token(sub) {
        return false;
    }
    sub.eq_ignore_ascii_case(b"json")
        || (sub.len() > 5 && sub[sub.len() - 5..].eq_ignore_ascii_case(b"+json"))
}

/// The body limit of a route, in bytes: the limit `DefaultBodyLimit` enforces while a body is
/// read, kept where [`BodyBytes`] can see it before reading. Install both with
/// [`body_limit`].
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// The layers that limit request bodies to `bytes`: axum's limit on what is read, and the
/// [`BodyLimit`] that refuses a larger declared `Content-Length` before anything is read.
pub fn body_limit(bytes: usize) -> (axum::extract::DefaultBodyLimit, axum::Extension<BodyLimit>) {
    (axum::extract::DefaultBodyLimit::max(bytes), axum::Extension(BodyLimit(bytes)))
}

/// A request body, read whole. A body declared (`Content-Length`) larger than the route's
/// [`BodyLimit`] is 413 at once, before any of it is read: otherwise a client that declares
/// more than it sends holds the request until it times out. A body over the limit as it is
/// read (chunked) is 413 too; one that cannot be read (malformed chunks, cut off) is 400.
pub struct BodyBytes(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for BodyBytes {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        use axum::body::HttpBody;
        if let Some(BodyLimit(limit)) = req.extensions().get::<BodyLimit>().copied()
            && req.body().size_hint().lower() > limit as u64
        {
            return Err(ApiError::too_large("request body too large"));
        }
        Bytes::from_request(req, state).await.map(BodyBytes).map_err(|e| match e {
            BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_)) => {
                ApiError::too_large("request body too large")
            }
            // A body that broke off or is framed wrong (a bad chunk size): the client's fault,
            // not a size.
            BytesRejection::FailedToBufferBody(_) => {
                ApiError::invalid("the request body could not be read: malformed or cut off")
            }
            other => ApiError::invalid(other.body_text()),
        })
    }
}

/// A JSON body. A non-empty body not declared as JSON is 415 ([`declares_json`]), malformed
/// JSON is 400, JSON that does not fit (unknown or missing fields, wrong types) is 422, a
/// body over the limit is 413 ([`BodyBytes`]), a body that cannot be read is 400.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        parse_json(&json_bytes(req, state).await?).map(JsonBody)
    }
}

/// The body read whole ([`BodyBytes`]); a non-empty one must be declared JSON (415).
async fn json_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    let json = declares_json(req.headers());
    let BodyBytes(bytes) = BodyBytes::from_request(req, state).await?;
    if !json && !bytes.is_empty() {
        return Err(ApiError::unsupported_media_type());
    }
    Ok(bytes)
}

/// The body of a route that takes none (a like, an unlike): none at all, or an empty JSON
/// object. A body with fields is a 422 (unknown request fields are rejected), malformed JSON
/// 400, as [`JsonBody`] answers them. Read, not ignored: a body left unread also closes the
/// connection after the answer (hyper cannot tell where the next request starts), so a client
/// that sends `{}` with every like would reconnect for every like.
pub struct NoBody;

/// The fields of a route that takes none.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NoFields {}

impl<S: Send + Sync> FromRequest<S> for NoBody {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        use axum::body::HttpBody;
        if req.body().size_hint().upper() == Some(0) {
            return Ok(NoBody);
        }
        let bytes = json_bytes(req, state).await?;
        if bytes.is_empty() {
            // Chunked, with nothing in it.
            return Ok(NoBody);
        }
        parse_json::<NoFields>(&bytes).map(|NoFields {}| NoBody)
    }
}

/// Parse a JSON body with the error mapping above. Every body of the API is a JSON object:
/// serde's derived structs would also take an array of the field values in order
/// (`["hi"]` as a comment), which the contract does not offer, so any other JSON is a 422.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // JSON is UTF-8 (RFC 8259, 8.1). serde_json skips the strings it ignores without looking
    // at their bytes, so the check below would call such a body well-formed (422).
    if let Err(e) = std::str::from_utf8(bytes) {
        return Err(ApiError::invalid(format!(
            "malformed JSON: the body is not UTF-8 (at byte {})",
            e.valid_up_to()
        )));
    }
    let well_formed = || serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok();
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(if well_formed() {
            ApiError::unprocessable("invalid body: expected a JSON object")
        } else {
            ApiError::invalid("malformed JSON: expected a JSON object")
        });
    }
    serde_json::from_slice(bytes).map_err(|e| {
        use serde_json::error::Category;
        match e.classify() {
            Category::Data => ApiError::unprocessable(format!("invalid body: {e}")),
            // serde_json reports some type mismatches (a number where an enum's string goes)
            // as syntax errors: JSON that parses is well-formed, so it does not fit: 422.
            Category::Syntax | Category::Eof | Category::Io if well_formed() => {
                ApiError::unprocessable(format!("invalid body: {e}"))
            }
            Category::Syntax | Category::Eof | Category::Io => {
                ApiError::invalid(format!("malformed JSON: {e}"))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        a: bool,
    }

    #[test]
    fn json_media_types_are_recognised() {
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/merge-patch+json",
            " application/json ",
        ] {
            assert!(is_json_media_type(ok.as_bytes()), "{ok:?}");
        }
        for bad in [
            "",
            "text/plain",
            "application/jsonx",
            "application/+json",
            "text/json",
            "application/x json",
            "json",
        ] {
            assert!(!is_json_media_type(bad.as_bytes()), "{bad:?}");
        }
    }

    #[test]
    fn a_body_that_is_not_utf8_is_malformed_json() {
        for body in [&b"{\"a\":\"\xff\"}"[..], b"{\"a\":true,\"b\":\"\xc3\x28\"}", b"\xfe{}"] {
            let e = parse_json::<Body>(body).expect_err("refused");
            assert_eq!(e.status().as_u16(), 400, "{body:?}: {e:?}");
            assert!(format!("{e:?}").contains("UTF-8"), "{e:?}");
        }
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Query {
        limit: Option<String>,
        count: Option<u32>,
    }

    #[test]
    fn query_errors_name_the_parameter_in_our_words() {
        let message = |q: &str| {
            let e = parse_query::<Query>(q).expect_err("refused");
            assert_eq!(e.status().as_u16(), 400, "{q}");
            let m = format!("{e:?}");
            assert!(!m.contains("Failed to deserialize"), "{m}");
            m
        };
        assert!(message("limit=1&limit=2").contains("limit is given more than once"));
        assert!(message("x=1&cursor=a&x=2").contains("x is given more than once"));
        assert!(message("count=ten").contains("count is not valid"));
        let q = parse_query::<Query>("limit=5&count=3&other=x").expect("valid");
        assert_eq!((q.limit.as_deref(), q.count), (Some("5"), Some(3)));
    }

    #[tokio::test]
    async fn a_body_that_cannot_be_read_is_400_not_413() {
        let broken = futures_util::stream::iter([
            Ok(Bytes::from_static(b"{\"a\":")),
            Err(std::io::Error::other("invalid chunk size")),
        ]);
        let req = Request::builder()
            .header(CONTENT_TYPE, "application/json")
            .body(axum::body::Body::from_stream(broken))
            .expect("request");
        let e = JsonBody::<Body>::from_request(req, &()).await.err().expect("refused");
        assert_eq!(e.status(), axum::http::StatusCode::BAD_REQUEST);
    }

    #[test]
    fn json_errors_map_to_400_or_422() {
        assert_eq!(parse_json::<Body>(b"{").err().map(|e| e.status().as_u16()), Some(400));
        assert_eq!(parse_json::<Body>(b"{\"a\":true,\"b\":1}").err().map(|e| e.status().as_u16()), Some(422));
        assert_eq!(parse_json::<Body>(b"{\"a\":\"x\"}").err().map(|e| e.status().as_u16()), Some(422));
        assert!(parse_json::<Body>(b"{\"a\":true}").is_ok());
        // Arrays of the fields in order, other JSON values, and enum type mismatches: 422.
        assert_eq!(parse_json::<Body>(b"[true]").err().map(|e| e.status().as_u16()), Some(422));
        assert_eq!(parse_json::<Body>(b" 7").err().map(|e| e.status().as_u16()), Some(422));
        assert_eq!(parse_json::<Body>(b"[tru").err().map(|e| e.status().as_u16()), Some(400));
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        enum Kind {
            Spam,
        }
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct WithEnum {
            k: Kind,
        }
        assert_eq!(parse_json::<WithEnum>(b"{\"k\":2}").err().map(|e| e.status().as_u16()), Some(422));
    }
}
