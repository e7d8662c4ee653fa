//! A durable stream consumer with JetStream's delivery semantics, seen through `EventLog`.
//!
//! The stream's side ([`Durable`]) delivers in stream order from a start sequence, gives
//! every delivery the next consumer sequence, and delivers again, after newer messages, what
//! stays unacknowledged past the ack wait; an acknowledgement covers everything before it
//! (`AckPolicy::All`). Faults: a fetch brings nothing or part of what is there (slow), a
//! fetch's reply is lost (the stream counts it delivered), an acknowledgement is lost.
//!
//! The client side follows what the production adapter (`likewise-scaleout`'s `StreamLog`,
//! which needs a NATS server) does with those deliveries: delivered-but-uncommitted messages
//! are served again to a read from the same position, a redelivery of something buffered is
//! dropped, and a gap in consumer sequences (a lost reply) re-creates the consumer after the
//! reader's position. Its own tests run it against a real NATS server.

use super::state::{ACK_WAIT_MS, Durable, Sim};
use async_trait::async_trait;
use likewise_core::event::Event;
use likewise_core::ports::EventLog;
use likewise_core::ports::cluster::Scope;
use likewise_core::{StoreError, StoreResult};
use std::sync::Mutex;

/// The client's buffer.
#[derive(Default)]
struct Client {
    /// Delivered, not committed: (stream sequence, events), ascending.
    delivered: Vec<(u64, Vec<Event>)>,
    /// The last consumer sequence seen.
    last_delivery: u64,
    /// The highest position committed (or the one the consumer was created at): a gap
    /// re-creates the consumer after it, so that whatever the reader may still ask for again
    /// is delivered again.
    floor: u64,
}

/// One durable consumer, as a worker holds it.
pub struct SimLog {
    sim: Sim,
    name: String,
    client: Mutex<Client>,
}

/// (Re-)create durable `name` so that its next delivery is the first message after `offset`.
fn position(w: &mut super::state::Inner, name: &str, scope: Scope, offset: u64) {
    w.durables.insert(
        name.to_string(),
        Durable { scope, next: offset + 1, pending: Default::default(), delivered: 0 },
    );
}

fn in_scope(scope: Scope, m: &super::state::Msg) -> bool {
    match scope {
        Scope::All => true,
        Scope::Shard(s) => s == m.shard,
        Scope::Part(k) => k == m.part,
    }
}

impl SimLog {
    /// A durable consumer `name` of `scope` positioned after `offset`.
    pub fn create(sim: Sim, name: &str, scope: Scope, offset: u64) -> Self {
        position(&mut sim.lock(), name, scope, offset);
        SimLog {
            sim,
            name: name.to_string(),
            client: Mutex::new(Client { floor: offset, ..Client::default() }),
        }
    }

    fn client(&self) -> std::sync::MutexGuard<'_, Client> {
        match self.client.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The stream delivers up to `want` messages: expired unacknowledged ones again first,
    /// then new ones. Returns (stream seq, consumer seq, events).
    fn deliver(w: &mut super::state::Inner, name: &str, want: usize) -> Vec<(u64, u64, Vec<Event>)> {
        let now = w.now_ms;
        let Some(mut d) = w.durables.remove(name) else { return Vec::new() };
        let mut out = Vec::new();
        let expired: Vec<u64> =
            d.pending.iter().filter(|(_, at)| **at + ACK_WAIT_MS <= now).map(|(s, _)| *s).collect();
        for seq in expired.into_iter().take(want) {
            if let Some(m) = w.stream.iter().find(|m| m.seq == seq) {
                d.delivered += 1;
                d.pending.insert(seq, now);
                out.push((seq, d.delivered, m.events.clone()));
            }
        }
        let start = d.next;
        for m in w.stream.iter().filter(|m| m.seq >= start && in_scope(d.scope, m)) {
            if out.len() >= want {
                break;
            }
            d.delivered += 1;
            d.pending.insert(m.seq, now);
            d.next = m.seq + 1;
            out.push((m.seq, d.delivered, m.events.clone()));
        }
        w.durables.insert(name.to_string(), d);
        out
    }

    /// One read: the buffer past `after`, then one fetch. `Err(gap)` when a delivery was
    /// never seen.
    fn fetch_after(&self, after: u64, max: usize) -> StoreResult<Result<Vec<Event>, (u64, u64)>> {
        let mut w = self.sim.lock();
        let mut c = self.client();
        let mut out = Vec::new();
        for (_, events) in c.delivered.iter().filter(|(s, _)| *s > after) {
            if out.len() >= max {
                break;
            }
            out.extend(events.iter().copied());
        }
        if out.len() >= max {
            return Ok(Ok(out));
        }
        let slow = w.rates.slow_fetch;
        let want = if w.roll(slow) { w.rng.range(0, 3) as usize } else { 64 };
        let got = Self::deliver(&mut w, &self.name, want);
        let lost = w.rates.lost_fetch;
        if !got.is_empty() && w.roll(lost) {
            return Ok(Ok(out)); // the reply never arrives; the stream counted it delivered
        }
        for (seq, delivery, events) in got {
            if delivery != c.last_delivery + 1 {
                return Ok(Err((c.last_delivery + 1, delivery)));
            }
            c.last_delivery = delivery;
            if c.delivered.last().is_some_and(|(s, _)| *s >= seq) {
                continue; // a redelivery of something still buffered
            }
            if seq > after {
                out.extend(events.iter().copied());
            }
            c.delivered.push((seq, events));
        }
        Ok(Ok(out))
    }
}

#[async_trait]
impl EventLog for SimLog {
    async fn read_after(&self, after: u64, max: usize) -> StoreResult<Vec<Event>> {
        let max = max.clamp(1, 10_000);
        self.sim.lock().read_fault("fetching from the stream")?;
        match self.fetch_after(after, max)? {
            Ok(out) => Ok(out),
            Err(_gap) => {
                // As on start: re-create the consumer right after the committed position (not
                // the reader's: it may read again from below it, after a failed commit).
                let floor = self.client().floor;
                {
                    let mut w = self.sim.lock();
                    let scope = w.durables.get(&self.name).map_or(Scope::All, |d| d.scope);
                    position(&mut w, &self.name, scope, floor);
                }
                *self.client() = Client { floor, ..Client::default() };
                match self.fetch_after(after, max)? {
                    Ok(out) => Ok(out),
                    Err(_) => Err(StoreError::Engine("stream deliveries lost twice in a row".into())),
                }
            }
        }
    }

    async fn committed(&self, upto: u64) -> StoreResult<()> {
        let mut w = self.sim.lock();
        w.read_fault("acknowledging")?;
        let lost = w.rates.lost_ack;
        let lost = w.roll(lost);
        let mut c = self.client();
        c.floor = c.floor.max(upto);
        if let Some(pos) = c.delivered.iter().rposition(|(seq, _)| *seq <= upto) {
            let acked = c.delivered[pos].0;
            c.delivered.drain(..=pos);
            if !lost && let Some(d) = w.durables.get_mut(&self.name) {
                d.pending.retain(|s, _| *s > acked);
            }
        }
        Ok(())
    }

    async fn head(&self) -> StoreResult<u64> {
        Ok(self.sim.lock().head())
    }

    async fn truncate(&self, _upto: u64) -> StoreResult<u64> {
        Ok(0)
    }
}
