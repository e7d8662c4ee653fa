//! Conformance checks of the per-(post, hour) unique-viewer sketches.

use crate::Stores;
use likewise_core::hourly_views::{HOUR_MS, HourSketch, estimate};
use likewise_core::ids::PostId;
use likewise_core::ports::HourlyViews;

fn sketch(viewers: std::ops::Range<u64>) -> Vec<u8> {
    let mut s = HourSketch::default();
    for v in viewers {
        s.insert(v);
    }
    s.encode()
}

fn hv(post: u64, hour: u64, sketch: Vec<u8>) -> HourlyViews {
    HourlyViews { post: PostId(post), hour_ms: hour * HOUR_MS, sketch }
}

/// Hourly sketches merge by union (also two of one post-hour in one save, and the same save
/// again changes nothing) and page in (hour, post) order within an hour range.
pub async fn hourly_view_sketches_merge_and_page_by_hour(s: &Stores) {
    let v = &s.views;
    assert!(v.hourly_views(0, u64::MAX / 2, None, 10).await.expect("empty").is_empty());
    v.merge_hourly_views(&[hv(2, 10, sketch(0..100)), hv(1, 10, sketch(0..5)), hv(1, 11, sketch(0..7))])
        .await
        .expect("save");
    // Another node's or flush's viewers of post 2 in hour 10, partly the same people; and a
    // post-hour given twice in one save.
    let second = [hv(2, 10, sketch(50..300)), hv(3, 12, sketch(0..3)), hv(3, 12, sketch(3..9))];
    v.merge_hourly_views(&second).await.expect("merge");
    v.merge_hourly_views(&second).await.expect("again");
    let all = v.hourly_views(10 * HOUR_MS, 13 * HOUR_MS, None, 100).await.expect("all");
    let keys: Vec<(u64, u64)> = all.iter().map(|h| (h.hour_ms / HOUR_MS, h.post.0)).collect();
    assert_eq!(keys, [(10, 1), (10, 2), (11, 1), (12, 3)]);
    let est: Vec<u64> = all.iter().map(|h| estimate(&h.sketch).expect("estimate")).collect();
    assert_eq!(est[0], 5);
    assert_eq!(est[1], 300, "a union of few viewers is exact: {est:?}");
    assert_eq!(est[2], 7);
    assert_eq!(est[3], 9);
    // Hour bounds: [from, until).
    let mid = v.hourly_views(11 * HOUR_MS, 12 * HOUR_MS, None, 100).await.expect("hour 11");
    assert_eq!(mid.len(), 1);
    assert_eq!((mid[0].post, mid[0].hour_ms), (PostId(1), 11 * HOUR_MS));
    // Pages continue strictly after the last (hour, post).
    let p1 = v.hourly_views(0, 20 * HOUR_MS, None, 2).await.expect("page 1");
    assert_eq!(p1.len(), 2);
    let last = p1.last().map(|h| (h.hour_ms, h.post));
    let p2 = v.hourly_views(0, 20 * HOUR_MS, last, 10).await.expect("page 2");
    let keys: Vec<(u64, u64)> = p2.iter().map(|h| (h.hour_ms / HOUR_MS, h.post.0)).collect();
    assert_eq!(keys, [(11, 1), (12, 3)]);
}
