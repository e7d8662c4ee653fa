//! `likewise`: the engagement service. See `likewise --help`.

use clap::Parser;

// glibc malloc took ~19% of the server's CPU under the like storm (profiled with perf);
// mimalloc's thread-local free lists remove most of it. See docs/benchmarks.md. The
// `system-alloc` feature keeps the system allocator, so heap profilers that hook malloc
// (heaptrack) see every allocation: docs/reliability.md.
// Either way wrapped in `cap::Cap` (no limit), which counts live heap bytes: `/metrics`
// reports them (`likewise_heap_allocated_bytes`) so the soak can tell a leak from allocator
// overhead. The count is one atomic add per allocation (measured: docs/benchmarks.md).
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: cap::Cap<mimalloc::MiMalloc> = cap::Cap::new(mimalloc::MiMalloc, usize::MAX);
#[cfg(feature = "system-alloc")]
#[global_allocator]
static GLOBAL: cap::Cap<std::alloc::System> = cap::Cap::new(std::alloc::System, usize::MAX);
use likewise::commands::{Cli, run};

fn main() -> std::process::ExitCode {
    let _ = likewise_app::startup::HEAP_BYTES.set(|| GLOBAL.allocated());
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
