//! Extractors that parse input once, at the edge, into domain types, and turn every rejection
//! into the JSON error contract (never axum's plain-text rejections).

use crate::error::ApiError;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
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

/// Query parameters.
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| QueryParams(q.0))
            .map_err(|e| ApiError::invalid(format!("bad query: {}", e.body_text())))
    }
}

/// A JSON body. Malformed JSON is 400, JSON that does not fit (unknown or missing fields,
/// wrong types) is 422, a body over the limit is 413. The content type is not policed: a
/// body that parses is accepted.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| match e {
            BytesRejection::FailedToBufferBody(_) => ApiError::too_large("request body too large"),
            other => ApiError::invalid(other.body_text()),
        })?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// Parse a JSON body with the error mapping above. Every body of the API is a JSON object:
/// serde's derived structs would also take an array of the field values in order
/// (`["hi"]` as a comment), which the contract does not offer, so any other JSON is a 422.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
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
