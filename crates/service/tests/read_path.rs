//! Read-path behaviour: single-flight count loads and read-your-writes through the caches.

use likewise_core::ids::{PostId, UserId};
use likewise_core::like::{LikeAction, Target};
use likewise_core::model::{CommentsPolicy, PostMeta};
use likewise_service::{Engagement, ServiceOptions};
use std::sync::Arc;
use std::time::Duration;

fn service(dir: &std::path::Path) -> Arc<Engagement> {
    Engagement::new(likewise_store::testing::open_small(dir), ServiceOptions::default())
}

async fn post(svc: &Engagement, id: u64, author: u64) {
    let meta =
        PostMeta { author: UserId(author), hide_like_count: false, comments: CommentsPolicy::Everyone };
    svc.upstream.put_post(PostId(id), meta).await.expect("put post");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_misses_on_one_cold_post_cause_one_store_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(dir.path());
    post(&svc, 42, 7).await;
    let barrier = Arc::new(tokio::sync::Barrier::new(1000));
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let (svc, barrier) = (svc.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            svc.shared.counts.get_many(&[Target::post(42)]).await.expect("get").len()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.expect("join"), 1);
    }
    assert_eq!(svc.shared.counts.store_loads(), 1, "single-flight: one load for all misses");
    // A second cold key costs one more load; the hot one costs none.
    svc.shared.counts.get_many(&[Target::post(42), Target::post(43)]).await.expect("get");
    assert_eq!(svc.shared.counts.store_loads(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_likes_show_at_once_with_and_without_the_bloom_filter() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(dir.path());
    for p in 1..=5u64 {
        post(&svc, p, 7).await;
    }
    let viewer = UserId(100);
    svc.likes.set_post_like(viewer, PostId(2), LikeAction::Like).await.expect("like before any read");
    let ids: Vec<PostId> = (1..=5).map(PostId).collect();
    let liked =
        |v: Vec<likewise_service::posts::PostView>| v.iter().map(|p| p.viewer_has_liked).collect::<Vec<_>>();
    // First read: no filter yet, storage answers.
    assert_eq!(
        liked(svc.posts.post_views(viewer, &ids).await.expect("views")),
        [false, true, false, false, false]
    );
    // The filter is built in the background from the reverse index.
    for _ in 0..200 {
        if svc_filter_ready(&svc, viewer).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(svc_filter_ready(&svc, viewer).await, "filter built");
    svc.likes.set_post_like(viewer, PostId(4), LikeAction::Like).await.expect("like");
    svc.likes.set_post_like(viewer, PostId(2), LikeAction::Unlike).await.expect("unlike");
    assert_eq!(
        liked(svc.posts.post_views(viewer, &ids).await.expect("views")),
        [false, false, false, true, false]
    );
    // Another viewer's cache is separate.
    assert_eq!(liked(svc.posts.post_views(UserId(101), &ids).await.expect("views")), [false; 5]);
}

async fn svc_filter_ready(svc: &Engagement, viewer: UserId) -> bool {
    svc.shared.viewer_likes.filter_ready(viewer)
}
