//! Reading posts: the feed-hydration batch and the single post.

use crate::AppState;
use crate::auth::Viewer;
use crate::dto::{PostViewDto, PostsResponse};
use crate::error::{ApiError, ApiResult};
use crate::extract::{PathParams, QueryParams};
use axum::Json;
use axum::extract::State;
use likewise_core::ids::{PostId, parse_id};
use likewise_service::posts::PostView;
use serde::Deserialize;
use std::sync::Arc;
use utoipa::IntoParams;

/// Most IDs in one `GET /v1/posts`.
pub const MAX_IDS: usize = 100;

/// `GET /v1/posts` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct IdsQuery {
    /// Comma-separated post IDs, 1 to 100, written as in paths (no spaces); a repeated ID is
    /// answered once.
    pub ids: Option<String>,
}

/// Parse a comma-separated ID list (1..=MAX_IDS IDs), each exactly as a path ID is parsed
/// (`parse_id`: no spaces, signs or leading zeros: one ID, one spelling). A repeated ID is
/// kept once, at its first place: the answer holds each post once.
pub fn parse_ids(raw: Option<&str>) -> Result<Vec<PostId>, ApiError> {
    let raw = raw.ok_or_else(|| ApiError::invalid("ids is required: ?ids=1,2,3"))?;
    if raw.is_empty() {
        return Err(ApiError::invalid("ids must list 1 to 100 post IDs"));
    }
    let parts: Vec<&str> = raw.split(',').collect();
    if parts.len() > MAX_IDS {
        return Err(ApiError::invalid(format!("too many ids: at most {MAX_IDS}")));
    }
    let mut ids = Vec::with_capacity(parts.len());
    for p in parts {
        let id = parse_id(p).map(PostId).map_err(|_| ApiError::invalid(format!("invalid post ID {p:?}")))?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

fn to_dto(v: PostView) -> PostViewDto {
    PostViewDto {
        post_id: v.post_id,
        author_id: v.author_id,
        like_count: v.like_count,
        like_count_text: v.like_count_text,
        comment_count: v.comment_count,
        viewer_has_liked: v.viewer_has_liked,
        liked_by: v.liked_by,
        preview_comments: v.preview_comments.into_iter().map(crate::routes::comments::to_dto).collect(),
        comments_enabled: v.comments_enabled,
    }
}

/// Hydrate a page of posts for the viewer, in the order asked; unknown IDs are left out.
#[utoipa::path(get, path = "/v1/posts", operation_id = "get_posts", tag = "posts",
    params(IdsQuery),
    responses((status = 200, body = PostsResponse), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn posts(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    QueryParams(q): QueryParams<IdsQuery>,
) -> ApiResult<Json<PostsResponse>> {
    let ids = parse_ids(q.ids.as_deref())?;
    let views = state.svc.posts.post_views(viewer.0.user, &ids).await?;
    Ok(Json(PostsResponse { posts: views.into_iter().map(to_dto).collect() }))
}

/// One post for the viewer.
#[utoipa::path(get, path = "/v1/posts/{post_id}", operation_id = "get_post", tag = "posts",
    params(("post_id" = String, Path)),
    responses((status = 200, body = PostViewDto), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn post(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    PathParams(post): PathParams<PostId>,
) -> ApiResult<Json<PostViewDto>> {
    Ok(Json(to_dto(state.svc.posts.post_view(viewer.0.user, post).await?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_lists_parse_or_fail_with_400() {
        assert_eq!(parse_ids(Some("3,1,2")).ok(), Some(vec![PostId(3), PostId(1), PostId(2)]));
        assert_eq!(
            parse_ids(Some("3,1,3,1")).ok(),
            Some(vec![PostId(3), PostId(1)]),
            "repeats answered once"
        );
        let too_many = (1..=101).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
        for bad in [
            None,
            Some(""),
            Some("1,,2"),
            Some("1,x"),
            Some("-1"),
            Some("42, 43"),
            Some(" 42"),
            Some("42\t"),
            Some("042"),
            Some("+4"),
            Some(too_many.as_str()),
        ] {
            assert_eq!(parse_ids(bad).err().map(|e| e.status().as_u16()), Some(400), "{bad:?}");
        }
    }
}
