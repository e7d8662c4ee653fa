//! Conformance checks of the retention of notification items
//! (`NotificationStore::prune_notifications`).

use crate::Stores;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::notify::{Change, NotifItem, NotifKey, NotifKind};

fn key(recipient: u64, post: u64, kind: NotifKind) -> NotifKey {
    NotifKey { recipient: UserId(recipient), post: PostId(post), kind }
}

fn add(k: NotifKey, actor: u64, comment: Option<u64>) -> Change {
    Change::Add { key: k, actor: UserId(actor), comment: comment.map(CommentId), ts_ms: 1_000 + actor }
}

/// A recipient's whole inbox, paged one item at a time through the keyset cursor.
async fn paged(s: &Stores, r: u64) -> Vec<NotifItem> {
    let mut out: Vec<NotifItem> = Vec::new();
    loop {
        let after = out.last().map(|it| (it.updated_ms, it.id));
        let page = s.notifications.inbox(UserId(r), after, 1).await.expect("inbox");
        if page.is_empty() {
            return out;
        }
        out.extend(page);
    }
}

/// Items last updated before the cutoff go, oldest first and at most `limit` per call, each
/// with every actor and contribution; newer items and their actors stay whole, pages read as
/// if the pruned items had never been, and a later action on a pruned item's post makes a
/// new item from that action alone.
pub async fn notification_items_past_the_retention_are_pruned(s: &Stores) {
    let n = &s.notifications;
    let liked = key(1, 10, NotifKind::PostLiked);
    let commented = key(1, 11, NotifKind::Commented);
    let other = key(2, 12, NotifKind::PostLiked);
    let fresh = key(1, 13, NotifKind::PostLiked);
    let fence = n.fence_notifications("notifier").await.expect("fence");
    // Actor 22 wrote two comments: two contributions to one item.
    let first = [
        add(liked, 20, None),
        add(liked, 21, None),
        add(commented, 22, Some(5)),
        add(commented, 22, Some(6)),
    ];
    let old = n.apply_notifications("notifier", fence, 1, &first).await.expect("first batch");
    let old_stamp = old[0].updated_ms;
    n.apply_notifications("notifier", fence, 2, &[add(other, 20, None)]).await.expect("second batch");
    let young = n
        .apply_notifications("notifier", fence, 3, &[add(fresh, 23, None), add(other, 21, None)])
        .await
        .expect("third batch");
    let young_stamp = young[0].updated_ms;
    assert!(young_stamp > old_stamp);
    let ids: Vec<u64> = old.iter().map(|it| it.id).collect();

    // Nothing is last updated before the first batch.
    assert_eq!(n.prune_notifications(0, old_stamp, 10).await.expect("prune"), 0);
    assert_eq!(n.prune_notifications(0, old_stamp + 1, 0).await.expect("prune"), 0);
    // The first batch's two items, one per call, then nothing: `other` was updated later.
    assert_eq!(n.prune_notifications(0, old_stamp + 1, 1).await.expect("prune"), 1);
    assert_eq!(paged(s, 1).await.len(), 2, "one of the two old items is left");
    assert_eq!(n.prune_notifications(0, old_stamp + 1, 1).await.expect("prune"), 1);
    assert_eq!(n.prune_notifications(0, old_stamp + 1, 1).await.expect("prune"), 0);

    let inbox = paged(s, 1).await;
    assert_eq!(inbox.iter().map(|it| it.key).collect::<Vec<_>>(), vec![fresh]);
    assert_eq!(n.inbox(UserId(1), None, 10).await.expect("inbox"), inbox);
    let kept = paged(s, 2).await;
    assert_eq!(kept.len(), 1);
    assert_eq!((kept[0].key, kept[0].actor_count), (other, 2), "a newer item keeps every actor");
    assert_eq!(
        n.notif_members(kept[0].id, &[UserId(20), UserId(21)]).await.expect("members"),
        vec![true, true]
    );
    for id in &ids {
        let members = n.notif_members(*id, &[UserId(20), UserId(21), UserId(22)]).await.expect("members");
        assert_eq!(members, vec![false; 3], "a pruned item's actors go with it");
    }

    // A later like of the pruned post is a new item with its one actor; withdrawing an actor
    // of the pruned item finds nothing to take.
    let again = n
        .apply_notifications(
            "notifier",
            fence,
            4,
            &[add(liked, 24, None), Change::Remove { key: liked, actor: UserId(20), comment: None }],
        )
        .await
        .expect("after the prune");
    assert_eq!(again.len(), 1);
    assert!(!ids.contains(&again[0].id), "a new item");
    assert_eq!((again[0].actor_count, again[0].recent.clone()), (1, vec![UserId(24)]));
    // So is a later comment: the two contributions of 22 went with the pruned item.
    let c =
        n.apply_notifications("notifier", fence, 5, &[add(commented, 22, Some(7))]).await.expect("comment");
    assert_eq!(c[0].actor_count, 1);
    n.apply_notifications(
        "notifier",
        fence,
        6,
        &[Change::Remove { key: commented, actor: UserId(22), comment: Some(CommentId(7)) }],
    )
    .await
    .expect("withdraw");
    assert!(paged(s, 1).await.iter().all(|it| it.key != commented), "its last contribution withdrawn");

    // A cutoff past every stamp takes the rest; storage then holds nothing of them.
    let all = n.prune_notifications(0, u64::MAX, 100).await.expect("prune all");
    assert_eq!(all, 3);
    assert!(paged(s, 1).await.is_empty() && paged(s, 2).await.is_empty());
    // A shard that does not exist on the engine, or holds nothing, prunes nothing.
    assert_eq!(n.prune_notifications(0, u64::MAX, 100).await.expect("prune"), 0);
}
