//! The web demo: three small pages (plain ES modules bundled into the binary, no build step,
//! no CDN): the feed at `/` (with an insights panel on the viewer's own posts), the
//! moderator's queue at `/moderate` and the notification settings at `/settings`; and the
//! demo-only routes ([`demo_routes`]) that `likewise demo` adds: a sign-in that mints a token
//! for a seeded user (with the service role for the seeded moderator), the seeded world's
//! description, and a server-side "viral storm" of likes. Outside demo mode those routes do
//! not exist (404), and the pages ask for a pasted token.

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::QueryParams;
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use likewise_core::ids::{PostId, UserId, parse_id};
use likewise_core::like::LikeAction;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const INDEX_HTML: &str = include_str!("assets/index.html");
const MODERATE_HTML: &str = include_str!("assets/moderate.html");
const SETTINGS_HTML: &str = include_str!("assets/settings.html");
const APP_JS: &str = include_str!("assets/app.js");
const COMMON_JS: &str = include_str!("assets/common.js");
const MODERATE_JS: &str = include_str!("assets/moderate.js");
const SETTINGS_JS: &str = include_str!("assets/settings.js");
const APP_CSS: &str = include_str!("assets/app.css");

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    ([(CONTENT_TYPE, content_type), (CACHE_CONTROL, "no-cache")], body)
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";

/// The pages and their assets (no authentication: the pages sign in through the API).
pub fn page_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(|| async { asset(HTML, INDEX_HTML) }))
        .route("/moderate", get(|| async { asset(HTML, MODERATE_HTML) }))
        .route("/settings", get(|| async { asset(HTML, SETTINGS_HTML) }))
        .route("/web/app.js", get(|| async { asset(JS, APP_JS) }))
        .route("/web/common.js", get(|| async { asset(JS, COMMON_JS) }))
        .route("/web/moderate.js", get(|| async { asset(JS, MODERATE_JS) }))
        .route("/web/settings.js", get(|| async { asset(JS, SETTINGS_JS) }))
        .route("/web/app.css", get(|| async { asset("text/css; charset=utf-8", APP_CSS) }))
}

/// A seeded user.
#[derive(Debug, Clone, Serialize)]
pub struct DemoUser {
    /// The user's ID (a decimal string).
    pub user_id: String,
    /// Display name.
    pub username: String,
}

/// A seeded post with what the demo shows in place of a real picture and caption.
#[derive(Debug, Clone, Serialize)]
pub struct DemoPost {
    /// The post's ID (a decimal string).
    pub post_id: String,
    /// The author's display name.
    pub author_username: String,
    /// Caption.
    pub caption: String,
    /// Colour of the placeholder picture (0..360).
    pub hue: u16,
}

/// The seeded world, as the page needs it.
#[derive(Debug, Clone, Serialize)]
pub struct DemoWorld {
    /// Users one can sign in as.
    pub users: Vec<DemoUser>,
    /// The feed, in order.
    pub posts: Vec<DemoPost>,
    /// The post the viral storm targets.
    pub viral_post_id: String,
    /// Who `/` signs in as without `?as=`.
    pub default_user_id: String,
    /// The moderator: `/demo/token` gives them a service-role token (the `/moderate` page).
    pub moderator: DemoUser,
    /// First user ID used by storms (users above every seeded one).
    #[serde(skip)]
    pub storm_base: u64,
}

struct Demo {
    world: DemoWorld,
    next_storm_user: AtomicU64,
}

/// The demo-only routes; `likewise demo` merges them into the API router.
pub fn demo_routes(world: DemoWorld) -> Router<Arc<AppState>> {
    let demo = Arc::new(Demo { next_storm_user: AtomicU64::new(world.storm_base), world });
    let (w, t, s) = (demo.clone(), demo.clone(), demo);
    Router::new()
        .route("/demo/world", get(move || async move { Json(w.world.clone()) }))
        .route(
            "/demo/token",
            get(move |state: State<Arc<AppState>>, q: QueryParams<TokenQuery>| token(state, q, t)),
        )
        .route(
            "/demo/storm",
            post(move |state: State<Arc<AppState>>, q: QueryParams<StormQuery>| storm(state, q, s)),
        )
}

#[derive(Debug, Deserialize)]
struct TokenQuery {
    user_id: Option<String>,
}

#[derive(Debug, Serialize)]
struct TokenResponse {
    token: String,
    user_id: String,
    username: String,
}

async fn token(
    State(state): State<Arc<AppState>>,
    QueryParams(q): QueryParams<TokenQuery>,
    demo: Arc<Demo>,
) -> ApiResult<Json<TokenResponse>> {
    let raw = q.user_id.ok_or_else(|| ApiError::invalid("user_id is required"))?;
    let id = parse_id(raw.trim()).map_err(|_| ApiError::invalid("user_id must be a decimal ID"))?;
    let (user, service) = demo
        .world
        .users
        .iter()
        .map(|u| (u, false))
        .chain(std::iter::once((&demo.world.moderator, true)))
        .find(|(u, _)| u.user_id == id.to_string())
        .ok_or_else(|| ApiError::not_found("no such seeded user"))?;
    let token = state
        .keys
        .mint(UserId(id), service, Duration::from_secs(24 * 3600))
        .map_err(|_| ApiError::internal())?;
    Ok(Json(TokenResponse { token, user_id: user.user_id.clone(), username: user.username.clone() }))
}

#[derive(Debug, Deserialize)]
struct StormQuery {
    count: Option<u32>,
}

#[derive(Debug, Serialize)]
struct StormResponse {
    post_id: String,
    likes: u32,
}

/// Fire `count` likes (default 1500, at most 5000) at the viral post from fresh users, in the
/// background; the page watches the count catch up.
async fn storm(
    State(state): State<Arc<AppState>>,
    QueryParams(q): QueryParams<StormQuery>,
    demo: Arc<Demo>,
) -> ApiResult<(axum::http::StatusCode, Json<StormResponse>)> {
    let count = q.count.unwrap_or(1500).clamp(1, 5000);
    let post = parse_id(&demo.world.viral_post_id).map_err(|_| ApiError::internal())?;
    let first = demo.next_storm_user.fetch_add(u64::from(count), Ordering::Relaxed);
    const WORKERS: u64 = 64;
    for w in 0..WORKERS {
        let svc = state.svc.clone();
        tokio::spawn(async move {
            let mut u = first + w;
            while u < first + u64::from(count) {
                if let Err(e) = svc.likes.set_post_like(UserId(u), PostId(post), LikeAction::Like).await {
                    tracing::warn!(error = %e, "storm like failed");
                }
                u += WORKERS;
            }
        });
    }
    Ok((
        axum::http::StatusCode::ACCEPTED,
        Json(StormResponse { post_id: demo.world.viral_post_id.clone(), likes: count }),
    ))
}
