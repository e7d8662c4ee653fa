//! Unit tests of the time span and the folding of events and sketches into rows.

use super::*;
use likewise_core::hourly_views::HourSketch;
use likewise_core::ids::{PostId, UserId};
use likewise_core::like::Target;

const H: u64 = HOUR_MS;
/// 2026-12-04T00:00:00Z.
const DAY: u64 = 1_796_342_400_000;

fn ev(kind: EventKind, target: Target, post: u64, ts_ms: u64, delta: i8) -> Event {
    Event {
        seq: 1,
        kind,
        target,
        target_author: UserId(7),
        actor: UserId(1),
        ts_ms,
        post,
        parent: 0,
        delta,
        mention: None,
        trace: None,
    }
}

#[test]
fn times_parse_as_rfc3339_or_a_date_and_spans_are_whole_hours() {
    assert_eq!(parse_time("--since", "2026-12-04").expect("date"), DAY);
    assert_eq!(parse_time("--since", "2026-12-04T10:00:00Z").expect("rfc"), DAY + 10 * H);
    assert_eq!(parse_time("--since", "2026-12-04T11:30:00+01:00").expect("offset"), DAY + 10 * H + H / 2);
    let flags = ("--since", "--until");
    let span = Span::parse("2026-12-04T10:59:59Z", "2026-12-04T12:30:00Z", flags).expect("span");
    assert_eq!(span, Span { since_ms: DAY + 10 * H, until_ms: DAY + 12 * H });
    assert!(span.covers(DAY + 10 * H) && span.covers(DAY + 12 * H - 1) && !span.covers(DAY + 12 * H));
    for (since, until, want) in [
        ("2026-12-04T12:00:00Z", "2026-12-04T10:00:00Z", "must be later"),
        ("2026-12-04T10:00:00Z", "2026-12-04T10:00:00Z", "must be later"),
        ("2026-12-04T10:05:00Z", "2026-12-04T10:55:00Z", "same hour"),
        ("yesterday", "2026-12-04", "--since \"yesterday\" is not a time"),
        ("2026-12-04", "2026-13-04", "--until \"2026-13-04\" is not a time"),
        ("1969-12-31", "2026-12-04", "before 1970"),
        ("2025-01-01", "2026-12-04", "more than 8784 hours"),
        ("9999-12-31T00:00:00Z", "9999-12-31T23:00:00-01:00", "after the year 9999"),
    ] {
        let e = Span::parse(since, until, flags).expect_err(since);
        assert!(e.contains(want), "{since} {until}: {e}");
    }
}

#[test]
fn events_fold_into_their_post_and_hour() {
    let span = Span { since_ms: DAY, until_ms: DAY + 2 * H };
    let mut a = Aggregate::new(span);
    let (p, c) = (Target::post(5), Target { kind: TargetKind::Comment, id: 900 });
    for e in [
        ev(EventKind::LikeCreated, p, 5, DAY + 1, 1),
        ev(EventKind::LikeCreated, p, 5, DAY + 2, 1),
        ev(EventKind::LikeRemoved, p, 5, DAY + 3, -1),
        ev(EventKind::LikeCreated, p, 5, DAY + H, 1),
        ev(EventKind::CommentCreated, c, 5, DAY + 4, 1),
        ev(EventKind::CommentCreated, c, 5, DAY + 5, 0),
        ev(EventKind::CommentStatusChanged, c, 5, DAY + 6, -1),
        ev(EventKind::CommentDeleted, c, 5, DAY + 7, 0),
        ev(EventKind::LikeCreated, c, 5, DAY + 8, 1),
        ev(EventKind::LikeRemoved, c, 5, DAY + 9, -1),
        ev(EventKind::LikeCreated, Target::post(3), 3, DAY + H + 1, 1),
        // Outside the span.
        ev(EventKind::LikeCreated, p, 5, DAY - 1, 1),
        ev(EventKind::LikeCreated, p, 5, DAY + 2 * H, 1),
    ] {
        a.add_event(&e);
    }
    let mut s = HourSketch::default();
    for v in 0..40 {
        s.insert(v);
    }
    let views = |post, hour_ms| HourlyViews { post: PostId(post), hour_ms, sketch: s.encode() };
    a.add_views(&views(9, DAY + H)).expect("views");
    a.add_views(&views(9, DAY + 2 * H)).expect("outside");
    assert!(a.add_views(&HourlyViews { post: PostId(1), hour_ms: DAY, sketch: vec![7] }).is_err());
    let rows = a.into_rows();
    let keys: Vec<(u64, u64)> = rows.iter().map(|r| ((r.hour_ms - DAY) / H, r.post)).collect();
    assert_eq!(keys, [(0, 5), (1, 3), (1, 5), (1, 9)]);
    let r = rows[0];
    assert_eq!((r.likes, r.unlikes, r.comments, r.comments_visible_delta), (2, 1, 2, 0));
    assert_eq!((r.comment_likes, r.comment_unlikes, r.unique_viewers), (1, 1, 0));
    assert_eq!((rows[1].likes, rows[2].likes, rows[3].likes), (1, 1, 0));
    assert!((38..=42).contains(&rows[3].unique_viewers), "{}", rows[3].unique_viewers);
}
