//! The viewer's notifications: the inbox (cursor pages, newest first) and a live stream
//! (Server-Sent Events) with keep-alives and `Last-Event-ID` resume.

use crate::AppState;
use crate::auth::Viewer;
use crate::dto::{NotificationDto, NotificationsPage, rfc3339_ms};
use crate::error::{ApiError, ApiResult};
use crate::extract::QueryParams;
use crate::routes::likes::{PageQuery, parse_limit};
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use likewise_service::notifications::NotifView;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

const NOTIF_CURSOR: u8 = 6;

fn to_dto(v: &NotifView) -> NotificationDto {
    NotificationDto {
        id: v.id.to_string(),
        kind: v.kind.as_str().to_string(),
        post_id: v.post,
        comment_id: v.comment,
        actors: v.actors.clone(),
        actor_count: v.actor_count,
        text: v.text.clone(),
        updated_at: rfc3339_ms(v.updated_ms),
    }
}

/// The viewer's notifications, most recently updated first.
#[utoipa::path(get, path = "/v1/me/notifications", tag = "notifications", params(PageQuery),
    responses((status = 200, body = NotificationsPage), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn inbox(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    QueryParams(q): QueryParams<PageQuery>,
) -> ApiResult<Json<NotificationsPage>> {
    let limit = parse_limit(q.limit.as_deref())?;
    let after = match q.cursor.as_deref() {
        None => None,
        Some(c) => {
            let p = state.cursors.open(NOTIF_CURSOR, c)?;
            if p.len() != 24 || p[..8] != viewer.0.user.0.to_be_bytes() {
                return Err(ApiError::invalid("invalid cursor"));
            }
            let u = |i: usize| u64::from_be_bytes(p[i..i + 8].try_into().unwrap_or([0; 8]));
            Some((u(8), u(16)))
        }
    };
    let (items, next) = state.svc.inbox(viewer.0.user, after, limit).await?;
    let next_cursor = next.map(|(u, id)| {
        let mut p = viewer.0.user.0.to_be_bytes().to_vec();
        p.extend_from_slice(&u.to_be_bytes());
        p.extend_from_slice(&id.to_be_bytes());
        state.cursors.seal(NOTIF_CURSOR, &p)
    });
    Ok(Json(NotificationsPage { items: items.iter().map(to_dto).collect(), next_cursor }))
}

fn sse_event(v: &NotifView) -> Event {
    let data = serde_json::to_string(&to_dto(v)).unwrap_or_else(|_| "{}".into());
    Event::default().id(format!("{}.{}", v.updated_ms, v.id)).event("notification").data(data)
}

/// Live notifications as Server-Sent Events (event `notification`, data: a notification;
/// an item whose `actor_count` is 0 was withdrawn). Reconnect with `Last-Event-ID` to
/// receive what changed meanwhile.
#[utoipa::path(get, path = "/v1/me/notifications/stream", tag = "notifications",
    responses((status = 200, description = "text/event-stream of notification events", content_type = "text/event-stream"),
        (status = 401, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn stream(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    headers: HeaderMap,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let me = viewer.0.user;
    // Subscribe first, then read the backlog: nothing can fall between the two.
    let (rx, closing) = state.svc.subscribe_notifications();
    let mut backlog = VecDeque::new();
    if let Some(last) = headers.get("last-event-id").and_then(|h| h.to_str().ok()) {
        let since: u64 = last
            .split('.')
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| ApiError::invalid("bad Last-Event-ID"))?;
        let (items, _) = state.svc.inbox(me, None, 100).await?;
        backlog.extend(items.into_iter().filter(|i| i.updated_ms > since).rev());
    }
    let events = stream::unfold(
        (backlog, rx, closing),
        move |(mut backlog, mut rx, mut closing)| async move {
            if let Some(v) = backlog.pop_front() {
                return Some((Ok(sse_event(&v)), (backlog, rx, closing)));
            }
            loop {
                if *closing.borrow() {
                    return None; // the server is shutting down
                }
                tokio::select! {
                    msg = rx.recv() => match msg {
                        Ok(v) if v.recipient == me => return Some((Ok(sse_event(&v)), (backlog, rx, closing))),
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return None,
                    },
                    _ = closing.changed() => return None,
                }
            }
        },
    );
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)).text("keep-alive")))
}
