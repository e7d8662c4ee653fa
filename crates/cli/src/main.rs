//! `likewise`: the engagement service. See `likewise --help`.

use clap::Parser;

// glibc malloc took ~19% of the server's CPU under the like storm (profiled with perf);
// mimalloc's thread-local free lists remove most of it. See docs/benchmarks.md. The
// `system-alloc` feature keeps the system allocator, so heap profilers that hook malloc
// (heaptrack) see every allocation: docs/reliability.md.
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use likewise::commands::{Cli, run};

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
