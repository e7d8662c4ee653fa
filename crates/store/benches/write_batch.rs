//! Criterion bench of the embedded store's durable batched write: one `apply` + one `sync`
//! of N distinct likes on ONE post (the hot-post write path without HTTP or queueing).
//!
//! Run: `cargo bench -p likewise-store --bench write_batch`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use likewise_core::ids::UserId;
use likewise_core::like::{LikeAction, LikeOp, Target};
use likewise_core::ports::WriteEngine;
use likewise_core::write::WriteOp;
use likewise_store::embedded::{EmbeddedOptions, EmbeddedStore};

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = EmbeddedStore::open(dir.path(), &EmbeddedOptions::default()).expect("open");
    let mut next_user = 1u64;
    let mut group = c.benchmark_group("durable_like_batch_one_post");
    for size in [1_000usize, 8_192] {
        group.throughput(Throughput::Elements(size as u64));
        group.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, &size| {
            b.iter(|| {
                let ops: Vec<WriteOp> = (0..size)
                    .map(|_| {
                        next_user += 1;
                        WriteOp::Like(LikeOp {
                            target: Target::post(42),
                            user: UserId(next_user),
                            action: LikeAction::Like,
                            target_author: UserId(7),
                            post: 42,
                            ts_ms: next_user,
                            trace: None,
                        })
                    })
                    .collect();
                store.apply(&ops).expect("apply");
                store.sync().expect("sync");
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
