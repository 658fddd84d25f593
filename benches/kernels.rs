//! Kernels R, V and F on each available backend. On a GPU this times the whole safe call
//! (uploads included); event-timed kernel-only figures against the bytes floor belong to the
//! performance harness. On the CPU it tracks the emulator's own cost.
use criterion::{criterion_group, criterion_main, Criterion};
use replayssm::backend::Backend;
use replayssm::config::{resolve, EngineFlags};
use replayssm::ring::{RingShape, SpecRing};
use replayssm::spec::{fold, verify};
use replayssm::workload::{RecurrentData, WorkloadSpec};
use replayssm::CheckpointPool;
use replayssm::{ActBuffer, DType, HeadDims, RecurrentOutputs, Variant};

fn bench(c: &mut Criterion) {
    let dims = HeadDims {
        h: 4,
        hv: 8,
        k: 128,
        v: 128,
    };
    let spec = WorkloadSpec {
        variant: Variant::Gdn,
        dims,
        dtype: DType::BF16,
        seqlens: vec![4; 4],
        null_requests: vec![],
        spare_slots: 0,
        raw_gate: true,
        qk_l2norm: true,
    };
    let data = RecurrentData::random(&spec, 1);
    let n = data.num_tokens();
    let shape = RingShape {
        variant: Variant::Gdn,
        dims,
        dtype: DType::BF16,
        layers: 1,
        slots: 4,
        window: 4,
    };
    let tag = "B4_T4_HV8_K128_V128_bf16";
    for backend in Backend::ALL {
        if let Err(why) = backend.availability() {
            eprintln!("bench {backend}: skipped: {why}");
            continue;
        }
        let mut o = ActBuffer::nan(DType::BF16, n * dims.hv * dims.v);
        let mut state = data.state.clone();
        c.bench_function(&format!("recurrent/{backend}/{tag}"), |b| {
            b.iter(|| {
                let mut out = RecurrentOutputs {
                    o: o.dense_mut(n, dims.hv * dims.v),
                    state: &mut state,
                    write_state: false,
                    snapshots: None,
                };
                replayssm::recurrent(backend, &data.inputs(), &mut out).expect("recurrent")
            })
        });
        let cfg = resolve(&EngineFlags::spec_ring(shape.variant)).expect("spec configuration");
        let mut pool = CheckpointPool::new(&cfg, shape.dims, shape.layers, shape.slots).expect("pool");
        pool.state_mut().copy_from_slice(&data.state);
        let mut ring = SpecRing::for_pool(&pool, shape.window, shape.dtype, true).expect("ring");
        c.bench_function(&format!("verify/{backend}/{tag}"), |b| {
            b.iter(|| {
                verify(
                    backend,
                    &data.inputs(),
                    &pool,
                    0,
                    &mut o.dense_mut(n, dims.hv * dims.v),
                    Some(&mut ring),
                )
                .expect("verify")
            })
        });
        c.bench_function(&format!("fold/{backend}/{tag}"), |b| {
            b.iter(|| fold(backend, &mut pool, &ring, &data.slots, &[4, 4, 4, 4], None).expect("fold"))
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
