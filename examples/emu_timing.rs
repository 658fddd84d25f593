//! Times one launch of each kernel on the emulator (developer aid for the emulator's speed).
use std::time::Instant;

use replayssm::backend::Backend;
use replayssm::ring::{RingShape, SpecRing};
use replayssm::spec::{fold, verify, PoolRef};
use replayssm::workload::{RecurrentData, WorkloadSpec};
use replayssm::{ActBuffer, DType, HeadDims, RecurrentOutputs, Variant};

fn main() {
    for dims in [
        HeadDims {
            h: 1,
            hv: 2,
            k: 32,
            v: 32,
        },
        HeadDims {
            h: 2,
            hv: 4,
            k: 128,
            v: 128,
        },
    ] {
        let spec = WorkloadSpec {
            variant: Variant::Gdn,
            dims,
            dtype: DType::BF16,
            seqlens: vec![4; 3],
            null_requests: vec![],
            spare_slots: 4,
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
            slots: 7,
            window: 4,
        };
        let mut ring = SpecRing::new(shape, true).unwrap();
        let mut pool = vec![0.1f32; shape.pool_elems()];
        let reps = 20;
        let t0 = Instant::now();
        for _ in 0..reps {
            let mut o = ActBuffer::nan(DType::BF16, n * dims.hv * dims.v);
            let mut state = data.state.clone();
            replayssm::recurrent(
                Backend::Emulated,
                &data.inputs(),
                &mut RecurrentOutputs {
                    o: o.dense_mut(n, dims.hv * dims.v),
                    state: &mut state,
                    write_state: true,
                    snapshots: None,
                },
            )
            .unwrap();
        }
        let r = t0.elapsed() / reps;
        let t0 = Instant::now();
        for _ in 0..reps {
            let mut o = ActBuffer::nan(DType::BF16, n * dims.hv * dims.v);
            verify(
                Backend::Emulated,
                &data.inputs(),
                &PoolRef {
                    shape,
                    state: &pool,
                    layer: 0,
                },
                &mut o.dense_mut(n, dims.hv * dims.v),
                Some(&mut ring),
            )
            .unwrap();
        }
        let v = t0.elapsed() / reps;
        let t0 = Instant::now();
        for _ in 0..reps {
            fold(Backend::Emulated, &mut pool, &ring, &data.slots, &[4, 4, 4], None).unwrap();
        }
        let f = t0.elapsed() / reps;
        println!("{dims:?}: recurrent {r:?}, verify {v:?}, fold {f:?} per launch");
    }
}
