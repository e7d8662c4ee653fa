//! Conformance checks of comment creates under an `Idempotency-Key` (see
//! `likewise_core::comment::idempotency`).

use crate::Stores;
use likewise_core::comment::idempotency::{IdempotencyKey, Keyed, fingerprint};
use likewise_core::comment::status::CommentStatus;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::write::{CommentOutcome, CommentRecord, WriteOp, WriteOutcome};

const POST: PostId = PostId(9);

fn record(author: u64, text: &str) -> CommentRecord {
    CommentRecord {
        id: CommentId(0),
        post: POST,
        author: UserId(author),
        post_author: UserId(7),
        parent: None,
        reply_to_user: None,
        status: CommentStatus::Visible,
        text: text.into(),
        simhash: 1,
    }
}

fn keyed(caller: u64, key: &str, text: &str) -> Keyed {
    Keyed {
        caller: UserId(caller),
        key: IdempotencyKey::parse(key.as_bytes()).expect("key"),
        fingerprint: fingerprint(POST, None, text),
    }
}

async fn keyed_create(s: &Stores, caller: u64, key: &str, text: &str) -> CommentOutcome {
    s.writer
        .submit_keyed_comment(record(caller, text), None, keyed(caller, key, text))
        .await
        .expect("create")
        .outcome
}

async fn top_level_count(s: &Stores) -> usize {
    s.comments.top_level(POST, true, None, 100).await.expect("page").len()
}

/// A key makes one comment: a repeat (in a later batch, or in the same batch) changes nothing
/// and answers the stored key with the comment it created; other callers' equal keys are
/// their own.
pub async fn a_key_makes_one_comment_whatever_the_batch(s: &Stores) {
    let first = match keyed_create(s, 1, "k-1", "hello").await {
        CommentOutcome::Done(Some(r)) => r,
        other => panic!("first create answered {other:?}"),
    };
    let head = s.events.head().await.expect("head");
    match keyed_create(s, 1, "k-1", "hello").await {
        CommentOutcome::Replayed(k) => {
            assert_eq!(k.comment, first);
            assert_eq!(k.fingerprint, fingerprint(POST, None, "hello"));
        }
        other => panic!("a repeat answered {other:?}"),
    }
    // Another body under the same key is answered with the stored key (the caller decides).
    assert!(matches!(keyed_create(s, 1, "k-1", "other").await, CommentOutcome::Replayed(_)));
    assert_eq!(s.events.head().await.expect("head"), head, "a repeat wrote an event");
    // The same key of another caller is another key.
    assert!(matches!(keyed_create(s, 2, "k-1", "hello").await, CommentOutcome::Done(Some(_))));
    // Twice in one batch: the second sees the first.
    let ops = [
        WriteOp::KeyedComment(record(3, "twice"), None, keyed(3, "k-3", "twice")),
        WriteOp::KeyedComment(record(3, "twice"), None, keyed(3, "k-3", "twice")),
    ];
    let out = super::one_batch(s, ops.to_vec()).await;
    assert!(matches!(&out[0], WriteOutcome::Comment(CommentOutcome::Done(Some(_)))), "{out:?}");
    assert!(matches!(&out[1], WriteOutcome::Comment(CommentOutcome::Replayed(_))), "{out:?}");
    assert_eq!(top_level_count(s).await, 3);
    let found = s.idempotency.find_key(UserId(1), &keyed(1, "k-1", "").key, POST).await.expect("find");
    assert_eq!(found.map(|k| k.comment.id), Some(first.id));
    assert_eq!(s.idempotency.key_count().await.expect("count"), 3);
}

/// A create that makes no comment (its parent is gone) stores no key: a retry may create.
pub async fn a_key_is_stored_only_with_its_comment(s: &Stores) {
    let mut reply = record(1, "reply");
    reply.parent = Some(CommentId(12345));
    let out = s.writer.submit_keyed_comment(reply, None, keyed(1, "k-r", "reply")).await.expect("create");
    assert_eq!(out.outcome, CommentOutcome::NotFound);
    let key = keyed(1, "k-r", "reply").key;
    assert_eq!(s.idempotency.find_key(UserId(1), &key, POST).await.expect("find"), None);
    assert_eq!(s.idempotency.key_count().await.expect("count"), 0);
}

/// In one batch, creates under keys resolve in arrival order: a repeat after a create that
/// made nothing (its parent is gone) tries again and may create; a repeat of a create that
/// made its comment is answered with it, whatever its body; creates in between, and on both
/// sides of a delete of their parent, see what the batch did before them.
pub async fn keys_in_one_batch_resolve_in_arrival_order(s: &Stores) {
    let parent = match keyed_create(s, 9, "parent", "parent").await {
        CommentOutcome::Done(Some(r)) => r.id,
        other => panic!("parent create answered {other:?}"),
    };
    let reply = |author: u64, to: u64, key: &str, text: &str| {
        let mut r = record(author, text);
        r.parent = Some(CommentId(to));
        let mut k = keyed(author, key, text);
        k.fingerprint = fingerprint(POST, Some(CommentId(to)), text);
        WriteOp::KeyedComment(r, None, k)
    };
    let ops = vec![
        // Key "a": its parent is missing, then the same key with another request creates.
        reply(1, 12345, "a", "to nobody"),
        WriteOp::KeyedComment(record(1, "top"), None, keyed(1, "a", "top")),
        // Key "b": created, then repeated with another body: answered with the first.
        reply(2, parent.0, "b", "first"),
        WriteOp::KeyedComment(record(2, "second"), None, keyed(2, "b", "second")),
        // Key "c" before the parent's delete, key "d" after it (under the placeholder the
        // delete leaves, since "c" replied).
        reply(3, parent.0, "c", "before"),
        WriteOp::Comment(likewise_core::write::CommentOp::Delete { id: parent, actor: UserId(9) }),
        reply(4, parent.0, "d", "after"),
        // A plain create between keyed ones.
        WriteOp::Comment(likewise_core::write::CommentOp::Create(record(5, "plain"), None)),
    ];
    let out = super::one_batch(s, ops).await;
    let comment = |o: &WriteOutcome| match o {
        WriteOutcome::Comment(c) => c.clone(),
        other => panic!("not a comment outcome: {other:?}"),
    };
    assert_eq!(comment(&out[0]), CommentOutcome::NotFound, "{out:?}");
    let a = match comment(&out[1]) {
        CommentOutcome::Done(Some(r)) => r,
        other => panic!("the repeat after nothing answered {other:?}"),
    };
    let b = match comment(&out[2]) {
        CommentOutcome::Done(Some(r)) => r,
        other => panic!("key b answered {other:?}"),
    };
    match comment(&out[3]) {
        CommentOutcome::Replayed(k) => {
            assert_eq!(k.comment, b);
            assert_eq!(k.fingerprint, fingerprint(POST, Some(parent), "first"));
        }
        other => panic!("key b's repeat answered {other:?}"),
    }
    assert!(matches!(comment(&out[4]), CommentOutcome::Done(Some(_))), "{out:?}");
    // The parent has replies: the delete leaves a placeholder, which a later reply keeps.
    assert!(matches!(comment(&out[5]), CommentOutcome::Done(_)), "{out:?}");
    assert!(matches!(comment(&out[7]), CommentOutcome::Done(Some(_))), "{out:?}");
    let found = s.idempotency.find_key(UserId(1), &keyed(1, "a", "").key, POST).await.expect("find");
    assert_eq!(found.map(|k| (k.comment.id, k.fingerprint)), Some((a.id, fingerprint(POST, None, "top"))));
    let found = s.idempotency.find_key(UserId(2), &keyed(2, "b", "").key, POST).await.expect("find");
    assert_eq!(found.map(|k| k.comment.id), Some(b.id));
    let after = s.idempotency.find_key(UserId(4), &keyed(4, "d", "").key, POST).await.expect("find");
    match comment(&out[6]) {
        CommentOutcome::Done(Some(r)) => assert_eq!(after.map(|k| k.comment.id), Some(r.id)),
        other => panic!("a reply under the placeholder answered {other:?}"),
    }
}

/// Keys older than the cut are removed, newer ones kept; a removed key is free again.
pub async fn expired_keys_are_removed(s: &Stores) {
    assert!(matches!(keyed_create(s, 1, "old", "a").await, CommentOutcome::Done(Some(_))));
    let cut = crate::now_ms() + 1;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    assert!(matches!(keyed_create(s, 1, "new", "b").await, CommentOutcome::Done(Some(_))));
    assert_eq!(s.idempotency.purge_keys(cut).await.expect("purge"), 1);
    assert_eq!(s.idempotency.purge_keys(cut).await.expect("purge again"), 0);
    let old = keyed(1, "old", "a").key;
    assert_eq!(s.idempotency.find_key(UserId(1), &old, POST).await.expect("find"), None);
    assert!(
        s.idempotency.find_key(UserId(1), &keyed(1, "new", "b").key, POST).await.expect("find").is_some()
    );
    assert_eq!(s.idempotency.key_count().await.expect("count"), 1);
    assert!(matches!(keyed_create(s, 1, "old", "a").await, CommentOutcome::Done(Some(_))));
}
