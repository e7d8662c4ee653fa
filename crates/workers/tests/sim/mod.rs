//! The deterministic simulation of the event consumers (see `tests/simulation.rs`).
//!
//! - [`rng`]: the seeded generator every choice of a run comes from.
//! - [`state`]: the simulated world behind the ports: the like rows (the truth), the shards'
//!   outboxes, the stream with its durable consumers, counters, inboxes, the reverse index,
//!   offsets, the clock, and the fault injector.
//! - [`ports`]: the ports the real consumers call, served from that state: counters,
//!   notifications, reverse index, likers, outbox, event stream, bus.
//! - [`stream`]: a durable stream consumer with JetStream's delivery semantics, seen through
//!   the `EventLog` port.
//! - [`world`]: the scheduler: client writes, consumer steps, crashes and clock jumps.
//! - [`check`]: the properties checked after every step and once the run is quiet.

pub mod check;
pub mod ports;
pub mod rng;
pub mod state;
pub mod stream;
pub mod world;
