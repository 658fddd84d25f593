//! Kernel R throughput on each available backend. On a GPU this times the whole safe call
//! (uploads included); the event-timed kernel-only figures against the bytes floor come with the
//! performance harness. On the CPU it tracks the emulator's own cost.
use criterion::{criterion_group, criterion_main, Criterion};
use replayssm::backend::Backend;
use replayssm::workload::{RecurrentData, WorkloadSpec};
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
    for backend in Backend::ALL {
        if let Err(why) = backend.availability() {
            eprintln!("bench recurrent/{backend}: skipped: {why}");
            continue;
        }
        c.bench_function(&format!("recurrent/{backend}/B4_T4_HV8_K128_V128_bf16"), |b| {
            let mut o = ActBuffer::nan(DType::BF16, n * dims.hv * dims.v);
            let mut state = data.state.clone();
            b.iter(|| {
                replayssm::recurrent(
                    backend,
                    &data.inputs(),
                    &mut RecurrentOutputs {
                        o: o.dense_mut(n, dims.hv * dims.v),
                        state: &mut state,
                        write_state: false,
                        snapshots: None,
                    },
                )
                .expect("recurrent")
            })
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
