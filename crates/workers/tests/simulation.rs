//! Deterministic simulation of the event consumers.
//!
//! The real aggregators, reverse-index writers and relays of two shards, the notifier and the
//! ranker run over simulated ports (`sim/`) under a seeded scheduler, with a simulated clock.
//! Injected: crashes at any port call (before or after its write lands) and between steps;
//! failed commits and commits whose answer is lost; slow, lost and repeated stream deliveries
//! and lost acknowledgements, the way JetStream redelivers; clock jumps, forward and back,
//! and API nodes whose clocks disagree. Properties: see `sim/check.rs`.
//!
//! `LIKEWISE_SIM_SEEDS=N` runs seeds 0..N (2,000 by default, as CI does; the planted bugs of
//! docs/reliability.md fail 15-90% of seeds, the rarer ones need long runs); `LIKEWISE_SIM_SEED=N` replays
//! one, printing its trace:
//! `LIKEWISE_SIM_SEED=N cargo test -p likewise-workers --test simulation -- --nocapture`.
//! `LIKEWISE_SIM_KEEP_GOING=1` runs every seed and counts the failing ones (to measure how
//! quickly a planted bug is found).
//!
//! Every seed runs with one notifier, and every odd one again with the notifier partitioned
//! over two processes whose partitions change hands (`sim/world.rs`; half the seeds, to keep
//! the run short); `LIKEWISE_SIM_PARTITIONED=1` replays a seed's partitioned run.

mod sim;

use std::panic::AssertUnwindSafe;

/// Seeds found failing once, kept as regression cases (run first, every time).
const REGRESSIONS: &[u64] = &[
    // A like released and stored past the committed offset, then read again with its unlike
    // after a failed commit: the unlike cancelled it in the holder and the actor stayed.
    24,
    // A lost stream delivery repositioned the consumer after the reader's position, then a
    // failed commit made the notifier read again from below it: two held likes were gone.
    148,
    // A like released, then withdrawn by its unlike, was read again after a restart and
    // released before the replay reached the unlike: its actor arrived in the item twice.
    39162,
    // A relay held back past the stream's duplicate window published a row twice (the
    // documented limit); the scheduler now retries it in time, as the relay does.
    65801,
];

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Run one seed; the failure and the run's trace on error.
fn run_seed(
    rt: &tokio::runtime::Runtime,
    seed: u64,
    base: &likewise_engine::Stores,
    partitioned: bool,
) -> Result<Vec<String>, (String, Vec<String>)> {
    let mut world = sim::world::World::new(seed, base, partitioned);
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| rt.block_on(world.run())));
    match result {
        Ok(Ok(())) => Ok(std::mem::take(&mut world.trace)),
        Ok(Err(e)) => {
            let mut trace = std::mem::take(&mut world.trace);
            trace.extend(world.dump());
            Err((e, trace))
        }
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err((format!("panicked: {msg}"), std::mem::take(&mut world.trace)))
        }
    }
}

#[test]
fn consumers_keep_their_properties_under_faults() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
    let dir = likewise_store::testing::scratch_dir();
    let base = likewise_store::testing::open_small(dir.path());
    let replay = env_u64("LIKEWISE_SIM_SEED");
    let seeds: Vec<u64> = match replay {
        Some(s) => vec![s],
        None => {
            REGRESSIONS.iter().copied().chain(0..env_u64("LIKEWISE_SIM_SEEDS").unwrap_or(2_000)).collect()
        }
    };
    let keep_going = std::env::var_os("LIKEWISE_SIM_KEEP_GOING").is_some();
    let modes = |seed: u64| -> Vec<bool> {
        match replay {
            Some(_) => vec![std::env::var_os("LIKEWISE_SIM_PARTITIONED").is_some()],
            None if seed % 2 == 1 => vec![false, true],
            None => vec![false],
        }
    };
    let mut failed: Vec<(u64, bool, String)> = Vec::new();
    let mut runs = 0;
    let started = std::time::Instant::now();
    for &seed in &seeds {
        for partitioned in modes(seed) {
            runs += 1;
            let env = if partitioned { "LIKEWISE_SIM_PARTITIONED=1 " } else { "" };
            match run_seed(&rt, seed, &base, partitioned) {
                Ok(trace) => {
                    if replay.is_some() {
                        println!("{}", trace.join("\n"));
                        println!("seed={seed}: every property held");
                    }
                }
                Err((failure, _)) if keep_going => failed.push((seed, partitioned, failure)),
                Err((failure, trace)) => {
                    let shown =
                        if replay.is_some() { &trace[..] } else { &trace[trace.len().saturating_sub(40)..] };
                    panic!(
                        "{}\n\nseed={seed}: {failure}\nreplay: {env}LIKEWISE_SIM_SEED={seed} cargo test -p likewise-workers --test simulation -- --nocapture",
                        shown.join("\n")
                    );
                }
            }
        }
    }
    println!("{} seeds, {runs} runs in {:.1} s", seeds.len(), started.elapsed().as_secs_f64());
    base.close().expect("close");
    let partitioned = failed.iter().filter(|(_, p, _)| *p).count();
    if let Some((seed, p, failure)) = failed.first() {
        let env = if *p { "LIKEWISE_SIM_PARTITIONED=1 " } else { "" };
        panic!(
            "{} of {} runs failed ({partitioned} partitioned); the first, seed={seed}: {failure}\nreplay: {env}LIKEWISE_SIM_SEED={seed} cargo test -p likewise-workers --test simulation -- --nocapture",
            failed.len(),
            runs
        );
    }
}
