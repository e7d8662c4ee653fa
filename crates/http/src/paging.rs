//! Paging parameters every list route shares: `?limit=` (1..=100, default 20) and the opaque
//! `?cursor=` of the previous page (see [`crate::cursor`] for what a cursor holds).

use crate::error::ApiError;
use serde::Deserialize;
use utoipa::IntoParams;

/// Paging parameters shared by lists.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// 1..=100, default 20.
    pub limit: Option<String>,
    /// Opaque cursor from a previous page.
    pub cursor: Option<String>,
}

/// Parse `limit` (1..=100, default 20).
pub fn parse_limit(raw: Option<&str>) -> Result<usize, ApiError> {
    match raw {
        None => Ok(20),
        Some(s) => match s.parse::<usize>() {
            Ok(n) if (1..=100).contains(&n) && s.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
            _ => Err(ApiError::invalid("limit must be a whole number from 1 to 100")),
        },
    }
}
