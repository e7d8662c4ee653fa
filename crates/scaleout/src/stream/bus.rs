//! The cluster bus on NATS core (the `Bus` port): cache invalidations, aggregator commits
//! (new counts, ranking events) and live notifications between the nodes of a deployment.
//!
//! Messages are `[node id: 8 bytes][payload]` on `<prefix>.cluster.<what>`, fire and forget,
//! published in the order they were sent (one publisher task), so a node never applies an
//! older counter value after a newer one from the same aggregator, nor a comment's
//! invalidation before the move its status change registered. A node ignores its own
//! messages. The wire forms below are this adapter's: nothing else reads them.

use async_trait::async_trait;
use futures::StreamExt;
use likewise_core::StoreResult;
use likewise_core::comment::uncounted::Move;
use likewise_core::counter::{CounterField, CounterKey};
use likewise_core::event::{EVENT_V3_LEN, Event, encoded_len};
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{Target, TargetKind};
use likewise_core::notify::{NotifItem, NotifKey, NotifKind};
use likewise_core::ports::cluster::{Broadcast, Bus, BusInbox, BusMessage, Invalidation};

/// Wire form of an invalidation, e.g. `post 42`.
/// Wire form, e.g. `post 42`.
pub fn encode_invalidation(inv: &Invalidation) -> String {
    match inv {
        Invalidation::Post(p) => format!("post {}", p.0),
        Invalidation::User(u) => format!("user {}", u.0),
        Invalidation::Follows(u) => format!("follows {}", u.0),
        Invalidation::Settings(u) => format!("settings {}", u.0),
        Invalidation::Blocks(u) => format!("blocks {}", u.0),
        Invalidation::Restrict(a, b) => format!("restrict {} {}", a.0, b.0),
        Invalidation::HiddenWords(u) => format!("hidden {}", u.0),
        Invalidation::Top(p) => format!("top {}", p.0),
        Invalidation::Comment(c) => format!("comment {}", c.0),
    }
}

/// Parse the wire form.
pub fn decode_invalidation(s: &str) -> Option<Invalidation> {
    let mut it = s.split(' ');
    let kind = it.next()?;
    let a: u64 = it.next()?.parse().ok()?;
    let inv = match kind {
        "post" => Invalidation::Post(PostId(a)),
        "user" => Invalidation::User(UserId(a)),
        "follows" => Invalidation::Follows(UserId(a)),
        "settings" => Invalidation::Settings(UserId(a)),
        "blocks" => Invalidation::Blocks(UserId(a)),
        "restrict" => Invalidation::Restrict(UserId(a), UserId(it.next()?.parse().ok()?)),
        "hidden" => Invalidation::HiddenWords(UserId(a)),
        "top" => Invalidation::Top(PostId(a)),
        "comment" => Invalidation::Comment(CommentId(a)),
        _ => return None,
    };
    it.next().is_none().then_some(inv)
}

/// Wire form of a count move, e.g. `+ 42 1001 0 11 -1`: registered (`+`) or withdrawn
/// (`-`), then post, comment, parent (0: none), author and delta.
pub fn encode_move(m: &Move, made: bool) -> String {
    format!(
        "{} {} {} {} {} {}",
        if made { '+' } else { '-' },
        m.post.0,
        m.comment.0,
        m.parent.map_or(0, |p| p.0),
        m.author.0,
        m.delta
    )
}

/// Parse [`encode_move`]'s form.
pub fn decode_move(s: &str) -> Option<(Move, bool)> {
    let f: Vec<&str> = s.split(' ').collect();
    let [made, post, comment, parent, author, delta] = f.as_slice() else { return None };
    let made = match *made {
        "+" => true,
        "-" => false,
        _ => return None,
    };
    let n = |v: &str| v.parse::<u64>().ok();
    let m = Move {
        post: PostId(n(post)?),
        comment: CommentId(n(comment)?),
        parent: Some(n(parent)?).filter(|p| *p != 0).map(CommentId),
        author: UserId(n(author)?),
        delta: delta.parse().ok()?,
    };
    Some((m, made))
}

/// Wire form of an inbox item: space-separated numbers, recent actors comma-separated.
pub fn encode_item(it: &NotifItem) -> String {
    let recent: Vec<String> = it.recent.iter().map(|u| u.0.to_string()).collect();
    format!(
        "{} {} {} {} {} {} {} {}",
        it.id,
        it.key.recipient.0,
        it.key.post.0,
        it.key.kind.code(),
        it.comment.map_or(0, |c| c.0),
        it.actor_count,
        it.updated_ms,
        recent.join(",")
    )
}

/// Parse [`encode_item`]'s form.
pub fn decode_item(s: &str) -> Option<NotifItem> {
    let f: Vec<&str> = s.split(' ').collect();
    if f.len() != 8 {
        return None;
    }
    let n = |i: usize| f[i].parse::<u64>().ok();
    let recent = if f[7].is_empty() {
        Vec::new()
    } else {
        f[7].split(',').map(|u| u.parse().ok().map(UserId)).collect::<Option<Vec<_>>>()?
    };
    Some(NotifItem {
        id: n(0)?,
        key: NotifKey {
            recipient: UserId(n(1)?),
            post: PostId(n(2)?),
            kind: NotifKind::from_code(u8::try_from(n(3)?).ok()?)?,
        },
        comment: n(4).filter(|c| *c != 0).map(CommentId),
        actor_count: n(5)?,
        recent,
        updated_ms: n(6)?,
    })
}

/// Most counter values per bus message (keeps messages far below NATS's 1 MiB).
pub const COUNTERS_PER_MESSAGE: usize = 4_096;

/// Wire form of an aggregator commit: the log position, new absolute counter values and the
/// events that matter to rankings (comment events and comment likes), each event its sequence
/// and its log record (`Event::encode`; a record of any format this build reads is read back,
/// so nodes of the previous release are understood during a rolling upgrade).
pub fn encode_counters(epoch: u64, values: &[(CounterKey, i64)], events: &[Event]) -> Vec<u8> {
    let mut b = Vec::with_capacity(16 + values.len() * 18 + events.len() * (8 + EVENT_V3_LEN));
    b.extend_from_slice(&epoch.to_be_bytes());
    b.extend_from_slice(&(values.len() as u32).to_be_bytes());
    for (k, v) in values {
        b.push(k.target.kind.code());
        b.extend_from_slice(&k.target.id.to_be_bytes());
        b.push(k.field.code());
        b.extend_from_slice(&v.to_be_bytes());
    }
    b.extend_from_slice(&(events.len() as u32).to_be_bytes());
    for e in events {
        b.extend_from_slice(&e.seq.to_be_bytes());
        // Rankings need no trace context, and without it the record stays one that nodes of
        // the release before format 4 read.
        Event { trace: None, ..*e }.encode_into(&mut b);
    }
    b
}

/// A decoded aggregator commit.
pub type CounterUpdate = (u64, Vec<(CounterKey, i64)>, Vec<Event>);

/// Parse [`encode_counters`]'s form.
pub fn decode_counters(b: &[u8]) -> Option<CounterUpdate> {
    let mut at = 0usize;
    let take = |at: &mut usize, n: usize| -> Option<&[u8]> {
        let s = b.get(*at..*at + n)?;
        *at += n;
        Some(s)
    };
    let u64_of = |s: &[u8]| s.try_into().ok().map(u64::from_be_bytes);
    let epoch = u64_of(take(&mut at, 8)?)?;
    let n = u32::from_be_bytes(take(&mut at, 4)?.try_into().ok()?) as usize;
    let mut values = Vec::with_capacity(n.min(COUNTERS_PER_MESSAGE));
    for _ in 0..n {
        let kind = TargetKind::from_code(take(&mut at, 1)?[0])?;
        let id = u64_of(take(&mut at, 8)?)?;
        let field = CounterField::from_code(take(&mut at, 1)?[0])?;
        let v = i64::from_be_bytes(take(&mut at, 8)?.try_into().ok()?);
        values.push((CounterKey { target: Target { kind, id }, field }, v));
    }
    let m = u32::from_be_bytes(take(&mut at, 4)?.try_into().ok()?) as usize;
    let mut events = Vec::with_capacity(m.min(COUNTERS_PER_MESSAGE));
    for _ in 0..m {
        let seq = u64_of(take(&mut at, 8)?)?;
        // A record's length follows from its format byte.
        let len = encoded_len(*b.get(at)?)?;
        events.push(Event::decode(seq, take(&mut at, len)?).ok()?);
    }
    (at == b.len()).then_some((epoch, values, events))
}

/// Subjects of the cluster bus.
fn bus_subject(prefix: &str, what: &str) -> String {
    format!("{prefix}.cluster.{what}")
}

/// One node's end of the cluster bus.
pub struct NatsBus {
    client: async_nats::Client,
    tx: tokio::sync::mpsc::UnboundedSender<(String, Vec<u8>)>,
    prefix: String,
    node: u64,
}

impl NatsBus {
    /// A bus on `client`, under `prefix`, for a node with the random ID `node`.
    pub fn new(client: async_nats::Client, prefix: String, node: u64) -> Self {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Vec<u8>)>();
        let publisher = client.clone();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                // Everything queued, then one flush: the client's own flushing can hold a
                // quiet connection's last messages back, and an invalidation must not wait.
                let mut next = Some(first);
                while let Some((subject, msg)) = next {
                    if let Err(e) = publisher.publish(subject, msg.into()).await {
                        tracing::warn!(error = %e, "cluster bus publish failed");
                    }
                    next = rx.try_recv().ok();
                }
                if let Err(e) = publisher.flush().await {
                    tracing::warn!(error = %e, "cluster bus flush failed");
                }
            }
        });
        NatsBus { client, tx, prefix, node }
    }

    /// Publish `[node id: 8 bytes][payload]` on `<prefix>.cluster.<what>`.
    fn send(&self, what: &str, payload: &[u8]) {
        let mut msg = Vec::with_capacity(8 + payload.len());
        msg.extend_from_slice(&self.node.to_be_bytes());
        msg.extend_from_slice(payload);
        let _ = self.tx.send((bus_subject(&self.prefix, what), msg));
    }
}

impl Broadcast for NatsBus {
    fn invalidate(&self, inv: Invalidation) {
        self.send("inval", encode_invalidation(&inv).as_bytes());
    }

    fn counters(&self, epoch: u64, values: &[(CounterKey, i64)], events: &[Event]) {
        let mut chunks = values.chunks(COUNTERS_PER_MESSAGE);
        // The events ride with the last chunk, after every value they may depend on.
        let last = chunks.next_back().unwrap_or(&[]);
        for c in chunks {
            self.send("counts", &encode_counters(epoch, c, &[]));
        }
        for (i, ev) in events.chunks(COUNTERS_PER_MESSAGE).enumerate() {
            self.send("counts", &encode_counters(epoch, if i == 0 { last } else { &[] }, ev));
        }
        if events.is_empty() && !last.is_empty() {
            self.send("counts", &encode_counters(epoch, last, &[]));
        }
    }

    fn count_move(&self, m: Move, made: bool) {
        self.send("moves", encode_move(&m, made).as_bytes());
    }

    fn notifications(&self, items: &[NotifItem]) {
        if items.is_empty() {
            return;
        }
        let lines: Vec<String> = items.iter().map(encode_item).collect();
        self.send("live", lines.join("\n").as_bytes());
    }
}

#[async_trait]
impl Bus for NatsBus {
    async fn subscribe(&self) -> StoreResult<Box<dyn BusInbox>> {
        let sub = self
            .client
            .subscribe(bus_subject(&self.prefix, "*"))
            .await
            .map_err(|e| super::nats_err(format!("subscribing to the cluster bus: {e}")))?;
        Ok(Box::new(NatsInbox {
            sub,
            node: self.node,
            inval: bus_subject(&self.prefix, "inval"),
            counts: bus_subject(&self.prefix, "counts"),
            moves: bus_subject(&self.prefix, "moves"),
        }))
    }
}

/// A node's subscription to the bus.
struct NatsInbox {
    sub: async_nats::Subscriber,
    node: u64,
    inval: String,
    counts: String,
    moves: String,
}

#[async_trait]
impl BusInbox for NatsInbox {
    async fn recv(&mut self) -> Option<BusMessage> {
        loop {
            let msg = self.sub.next().await?;
            let Some((from, body)) = msg.payload.split_first_chunk::<8>() else { continue };
            if u64::from_be_bytes(*from) == self.node {
                continue;
            }
            if msg.subject.as_str() == self.counts {
                match decode_counters(body) {
                    Some((epoch, values, events)) => {
                        return Some(BusMessage::Counters { epoch, values, events });
                    }
                    None => {
                        tracing::warn!("undecodable counter update on the cluster bus");
                        continue;
                    }
                }
            }
            let Ok(text) = std::str::from_utf8(body) else { continue };
            if msg.subject.as_str() == self.inval {
                if let Some(inv) = decode_invalidation(text) {
                    return Some(BusMessage::Invalidate(inv));
                }
            } else if msg.subject.as_str() == self.moves {
                if let Some((mv, made)) = decode_move(text) {
                    return Some(BusMessage::CountMove { mv, made });
                }
            } else {
                return Some(BusMessage::Notifications(text.lines().filter_map(decode_item).collect()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalidations_round_trip() {
        for inv in [
            Invalidation::Post(PostId(42)),
            Invalidation::User(UserId(7)),
            Invalidation::Follows(UserId(1)),
            Invalidation::Settings(UserId(2)),
            Invalidation::Blocks(UserId(3)),
            Invalidation::Restrict(UserId(4), UserId(5)),
            Invalidation::HiddenWords(UserId(6)),
            Invalidation::Top(PostId(9)),
            Invalidation::Comment(CommentId(10)),
        ] {
            assert_eq!(decode_invalidation(&encode_invalidation(&inv)), Some(inv));
        }
        assert_eq!(decode_invalidation("post"), None);
        assert_eq!(decode_invalidation("post 1 2"), None);
        assert_eq!(decode_invalidation("nope 1"), None);
    }

    #[test]
    fn count_moves_round_trip() {
        let m =
            Move { post: PostId(42), comment: CommentId(1001), parent: None, author: UserId(11), delta: -1 };
        for made in [true, false] {
            assert_eq!(decode_move(&encode_move(&m, made)), Some((m, made)));
        }
        let reply = Move { parent: Some(CommentId(1000)), delta: 1, ..m };
        assert_eq!(decode_move(&encode_move(&reply, true)), Some((reply, true)));
        assert_eq!(decode_move("+ 42 1001 0 11"), None);
        assert_eq!(decode_move("* 42 1001 0 11 1"), None);
    }

    #[test]
    fn items_round_trip() {
        let it = NotifItem {
            id: 130,
            key: NotifKey { recipient: UserId(7), post: PostId(42), kind: NotifKind::Replied },
            comment: Some(CommentId(99)),
            actor_count: 3,
            recent: vec![UserId(1), UserId(2)],
            updated_ms: 1_700_000_000_000,
        };
        assert_eq!(decode_item(&encode_item(&it)), Some(it.clone()));
        let none = NotifItem { comment: None, recent: Vec::new(), ..it };
        assert_eq!(decode_item(&encode_item(&none)), Some(none));
        assert_eq!(decode_item("1 2 3"), None);
    }

    #[test]
    fn counter_updates_round_trip() {
        let values = vec![
            (CounterKey { target: Target::post(42), field: CounterField::Likes }, 500),
            (CounterKey { target: Target::comment(7), field: CounterField::Replies }, -1),
        ];
        let like = Event::like(9, true, Target::comment(7), UserId(1), UserId(2), 1_000, 42);
        let reply = Event {
            kind: likewise_core::event::EventKind::CommentDeleted,
            parent: 6,
            delta: -1,
            mention: Some(UserId(3)),
            ..like
        };
        let events = vec![like, reply];
        let b = encode_counters(77, &values, &events);
        assert_eq!(decode_counters(&b), Some((77, values.clone(), events)));
        assert_eq!(decode_counters(&b[..b.len() - 1]), None);
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(decode_counters(&longer), None);
        // A node of the previous release sends format-2 records (no @mention).
        let mut old = encode_counters(77, &values, &[]);
        old.truncate(old.len() - 4);
        old.extend_from_slice(&1u32.to_be_bytes());
        old.extend_from_slice(&reply.seq.to_be_bytes());
        let mut record = reply.encode()[..likewise_core::event::EVENT_V2_LEN].to_vec();
        record[0] = likewise_core::event::EVENT_FORMAT_V2;
        old.extend_from_slice(&record);
        assert_eq!(decode_counters(&old), Some((77, values, vec![Event { mention: None, ..reply }])));
    }
}
