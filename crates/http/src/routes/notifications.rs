//! The viewer's notifications: the inbox (cursor pages, newest first) and a live stream
//! (Server-Sent Events) with keep-alives and `Last-Event-ID` resume.
//!
//! Streams are long-lived connections, so they are bounded: at most
//! `max_streams_per_user` per user (one more is a 429), at most a total cap for everyone
//! (one more is a 503, leaving connections for ordinary requests), and each one ends when
//! the token that opened it expires (the client reconnects with a fresh token and resumes
//! with `Last-Event-ID`).

use crate::AppState;
use crate::auth::Viewer;
use crate::dto::{NotificationDto, NotificationsPage, rfc3339_ms};
use crate::error::{ApiError, ApiResult};
use crate::extract::QueryParams;
use crate::paging::{PageQuery, parse_limit};
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use likewise_core::ids::UserId;
use likewise_service::notifications::NotifView;
use std::collections::HashMap;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::broadcast;

const NOTIF_CURSOR: u8 = 6;

/// Open streams, per user and in total; a [`StreamSlot`] holds one until dropped.
pub struct StreamSlots {
    open: parking_lot::Mutex<(HashMap<UserId, usize>, usize)>,
    per_user: usize,
    total: usize,
}

/// One open stream, released when the stream ends (or its client goes away).
pub struct StreamSlot {
    slots: Arc<AppState>,
    user: UserId,
}

impl StreamSlots {
    /// At most `per_user` streams per user and `total` in all.
    pub fn new(per_user: usize, total: usize) -> Self {
        StreamSlots { open: parking_lot::Mutex::new((HashMap::new(), 0)), per_user, total }
    }

    /// Streams open now: (for `user`, in total).
    pub fn open(&self, user: UserId) -> (usize, usize) {
        let open = self.open.lock();
        (open.0.get(&user).copied().unwrap_or(0), open.1)
    }

    fn acquire(state: &Arc<AppState>, user: UserId) -> Result<StreamSlot, ApiError> {
        let me = &state.streams;
        let mut open = me.open.lock();
        if open.1 >= me.total {
            metrics::counter!("likewise_notification_streams_refused_total", "why" => "total").increment(1);
            return Err(ApiError::unavailable("too many notification streams are open; retry later"));
        }
        let mine = open.0.entry(user).or_insert(0);
        if *mine >= me.per_user {
            metrics::counter!("likewise_notification_streams_refused_total", "why" => "per_user")
                .increment(1);
            return Err(ApiError::rate_limited(30)
                .with_message("too many open notification streams for this user; close one first"));
        }
        *mine += 1;
        open.1 += 1;
        metrics::gauge!("likewise_notification_streams").set(open.1 as f64);
        Ok(StreamSlot { slots: state.clone(), user })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.slots.streams.open.lock();
        if let Some(n) = open.0.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                open.0.remove(&self.user);
            }
        }
        open.1 = open.1.saturating_sub(1);
        metrics::gauge!("likewise_notification_streams").set(open.1 as f64);
    }
}

fn to_dto(v: &NotifView) -> NotificationDto {
    NotificationDto {
        id: v.id.to_string(),
        kind: v.kind.as_str().to_string(),
        post_id: v.post,
        comment_id: v.comment,
        // Names stored before usernames were checked may hold controls or bidi overrides:
        // what is shown never does.
        actors: v.actors.iter().map(|a| display_safe(a)).collect(),
        actor_count: v.actor_count,
        text: display_safe(&v.text),
        updated_at: rfc3339_ms(v.updated_ms),
    }
}

/// The viewer's notifications, most recently updated first.
#[utoipa::path(get, path = "/v1/me/notifications", operation_id = "list_notifications", tag = "notifications", params(PageQuery),
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
    let (items, next) = state.svc.notifications.inbox(viewer.0.user, after, limit).await?;
    let next_cursor = next.map(|(u, id)| {
        let mut p = viewer.0.user.0.to_be_bytes().to_vec();
        p.extend_from_slice(&u.to_be_bytes());
        p.extend_from_slice(&id.to_be_bytes());
        state.cursors.seal(NOTIF_CURSOR, &p)
    });
    Ok(Json(NotificationsPage { items: items.iter().map(to_dto).collect(), next_cursor }))
}

/// When a token expiring at `exp` (seconds since the Unix epoch) stops being valid, as a
/// point on the runtime's clock.
fn token_expiry(exp: u64) -> tokio::time::Instant {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let left = Duration::from_secs(exp).saturating_sub(now);
    tokio::time::Instant::now() + left
}

/// `s` without control, format (bidi overrides, zero-width characters) or line and paragraph
/// separator characters: safe to show in one line of a notification.
pub fn display_safe(s: &str) -> String {
    s.chars().filter(|c| !likewise_core::names::is_hidden_char(*c)).collect()
}

fn sse_event(v: &NotifView) -> Event {
    let data = serde_json::to_string(&to_dto(v)).unwrap_or_else(|_| "{}".into());
    Event::default().id(format!("{}.{}", v.updated_ms, v.id)).event("notification").data(data)
}

/// The most items a resumed stream replays (the rest are in the inbox).
const MAX_RESUMED: usize = 10_000;

/// Where a `Last-Event-ID` (`<updated_ms>.<item id>`) leaves off: every change of an inbox
/// has its own `(updated_ms, id)`, larger than any before it (the notifier stamps each batch
/// past the last, and a held like gets the stamp of its release, not the like's time), so
/// the items to replay are exactly those after it. A bare `<updated_ms>` leaves off after
/// every item of that stamp.
fn parse_last_event_id(last: &str) -> Option<(u64, u64)> {
    let mut parts = last.splitn(2, '.');
    let ms = parts.next()?.parse().ok()?;
    let id = match parts.next() {
        Some(id) => id.parse().ok()?,
        None => u64::MAX,
    };
    Some((ms, id))
}

/// What a resumed stream does with an inbox item, read newest stamp first.
#[derive(Debug, PartialEq, Eq)]
enum Resume {
    /// Changed after the last event the client saw: replay it.
    Keep,
    /// Seen already, but an item of the same stamp may still follow: the inbox does not
    /// order the items of one stamp by id.
    Skip,
    /// Older than the last event's stamp (or the replay is full): stop reading.
    Stop,
}

fn resume_step(item: (u64, u64), since: (u64, u64), kept: usize) -> Resume {
    if item.0 < since.0 || kept >= MAX_RESUMED {
        Resume::Stop
    } else if item > since {
        Resume::Keep
    } else {
        Resume::Skip
    }
}

/// Live notifications as Server-Sent Events (event `notification`, data: a notification;
/// an item whose `actor_count` is 0 was withdrawn; id `<updated_ms>.<item id>`). Reconnect
/// with `Last-Event-ID` to receive, once each, the items changed meanwhile. The stream ends when the token expires; at most
/// `notifications.max_streams_per_user` are open per user (one more is a 429).
#[utoipa::path(get, path = "/v1/me/notifications/stream", operation_id = "stream_notifications", tag = "notifications",
    responses((status = 200, description = "text/event-stream of notification events", content_type = "text/event-stream"),
        (status = 400, body = crate::error::ErrorBody), (status = 401, body = crate::error::ErrorBody),
        (status = 429, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn stream(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    headers: HeaderMap,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let me = viewer.0.user;
    let slot = StreamSlots::acquire(&state, me)?;
    let expiry = token_expiry(viewer.0.expires_at);
    // Subscribe first, then read the backlog: nothing can fall between the two.
    let (rx, closing) = state.svc.notifications.subscribe();
    let mut backlog = VecDeque::new();
    // Live changes up to the newest one replayed are in the replay already (in their latest
    // state): each item changed meanwhile is sent once.
    let mut replayed_upto = None;
    if let Some(last) = headers.get("last-event-id").and_then(|h| h.to_str().ok()) {
        let since = parse_last_event_id(last).ok_or_else(|| ApiError::invalid("bad Last-Event-ID"))?;
        // Newest first, page by page, down to the stamp of the last event the client saw.
        let mut after = None;
        let mut newer = Vec::new();
        'pages: loop {
            let (items, next) = state.svc.notifications.inbox(me, after, 100).await?;
            for it in items {
                match resume_step((it.updated_ms, it.id), since, newer.len()) {
                    Resume::Keep => newer.push(it),
                    Resume::Skip => {}
                    Resume::Stop => break 'pages,
                }
            }
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        newer.sort_by_key(|v: &NotifView| (v.updated_ms, v.id));
        backlog.extend(newer);
        replayed_upto = backlog.iter().map(|v: &NotifView| (v.updated_ms, v.id)).max();
    }
    let expiry = Box::pin(tokio::time::sleep_until(expiry));
    let events = stream::unfold(
        (backlog, rx, closing, expiry, slot),
        move |(mut backlog, mut rx, mut closing, mut expiry, slot)| async move {
            if let Some(v) = backlog.pop_front() {
                return Some((Ok(sse_event(&v)), (backlog, rx, closing, expiry, slot)));
            }
            loop {
                if *closing.borrow() {
                    return None; // the server is shutting down
                }
                tokio::select! {
                    msg = rx.recv() => match msg {
                        Ok(v) if v.recipient == me && replayed_upto.is_some_and(|r| (v.updated_ms, v.id) <= r) => {
                            continue;
                        }
                        Ok(v) if v.recipient == me => {
                            return Some((Ok(sse_event(&v)), (backlog, rx, closing, expiry, slot)));
                        }
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return None,
                    },
                    _ = closing.changed() => return None,
                    // The token expired: end the stream (dropping the slot with it).
                    _ = &mut expiry => return None,
                }
            }
        },
    );
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)).text("keep-alive")))
}

#[cfg(test)]
mod tests {
    use super::{MAX_RESUMED, Resume, display_safe, resume_step};

    /// Items of one stamp come in no particular id order: one already seen must not end the
    /// replay before the others of its stamp.
    #[test]
    fn a_resume_replays_every_later_item_of_the_last_events_stamp() {
        let since = (1_000, 1);
        let inbox = [(1_000, 1), (1_000, 2), (1_000, 3), (1_000, 4), (999, 9)];
        let mut kept = Vec::new();
        for it in inbox {
            match resume_step(it, since, kept.len()) {
                Resume::Keep => kept.push(it),
                Resume::Skip => {}
                Resume::Stop => break,
            }
        }
        assert_eq!(kept, [(1_000, 2), (1_000, 3), (1_000, 4)]);
        assert_eq!(resume_step((2_000, 1), since, MAX_RESUMED), Resume::Stop, "the replay is bounded");
    }

    #[test]
    fn shown_texts_lose_controls_and_format_characters() {
        assert_eq!(display_safe("adm\u{202E}nimi liked your post"), "admnimi liked your post");
        assert_eq!(display_safe("a\u{200B}b\u{2066}c\u{7}d\u{2028}e\u{E0041}"), "abcde");
        assert_eq!(display_safe("zoé 👩 and 2 others"), "zoé 👩 and 2 others");
    }
}
