//! A speculative-decoding step on device memory, the way an engine runs it: the checkpoint pool
//! and its spec ring live in device memory, the step's tensors are uploaded once (an engine
//! already has them on the device), and the verify of every layer plus the fold run on one
//! stream with no allocation, copy or synchronisation; the stream's error word is read at the
//! end. Runs on the GPU when one is usable, else on the emulator (same kernel source).
//!
//! `cargo run --release --example device_step`

use replayssm::config::{resolve, EngineFlags};
use replayssm::memory::{counters, DeviceAct, DeviceSeqlens, DeviceVec, Stream};
use replayssm::{
    ActBuffer, Backend, CheckpointPool, DType, Device, Gate, HeadDims, RecurrentInputs, SpecRing, Variant,
};

/// Deterministic values in `lo..hi` (an engine's activations stand here).
fn values(n: usize, seed: u32, lo: f32, hi: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2654435761).max(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            lo + (hi - lo) * (x >> 8) as f32 / 16_777_216.0
        })
        .collect()
}

fn main() -> replayssm::Result<()> {
    let backend = Backend::best();
    let stream = Stream::new(backend)?;
    let dims = HeadDims {
        h: 2,
        hv: 4,
        k: 64,
        v: 64,
    };
    let (layers, slots, window) = (2, 8, 4);

    // Set-up, once: the pool and its ring, built from the server flags (the gates hold).
    let config = resolve(&EngineFlags::spec_ring(Variant::Gdn))?;
    let mut pool = CheckpointPool::new_device(backend, &config, dims, layers, slots)?;
    let mut ring = SpecRing::for_pool(&pool, window, DType::BF16, true)?;

    // One step's tensors: 3 requests of 4 draft tokens on slots 5, 0 and 2.
    let n = 12;
    let act = |len, seed| {
        DeviceAct::from_host(
            &stream,
            &ActBuffer::from_f32(DType::BF16, &values(len, seed, -1.0, 1.0)),
        )
    };
    let (q, k, v) = (
        act(n * dims.h * dims.k, 1)?,
        act(n * dims.h * dims.k, 2)?,
        act(n * dims.hv * dims.v, 3)?,
    );
    let g = DeviceVec::from_host(&stream, &values(n * dims.hv, 4, -0.5, -0.01))?;
    let beta = DeviceVec::from_host(&stream, &values(n * dims.hv, 5, 0.1, 0.9))?;
    let cu_seqlens = DeviceVec::from_host(&stream, &[0, 4, 8, 12])?;
    let request_slots = DeviceVec::from_host(&stream, &[5, 0, 2])?;
    let accept_lens = DeviceVec::from_host(&stream, &[3, 1, 4])?;
    let mut o = DeviceAct::poisoned(backend, DType::BF16, n * dims.hv * dims.v)?;
    let inputs = RecurrentInputs::<Device> {
        variant: Variant::Gdn,
        dims,
        q: q.dense(n, dims.h * dims.k),
        k: k.dense(n, dims.h * dims.k),
        v: v.dense(n, dims.hv * dims.v),
        gate: Gate::Precomputed {
            g: g.as_slice(),
            beta: beta.as_slice(),
        },
        cu_seqlens: DeviceSeqlens {
            cu: cu_seqlens.as_slice(),
            max_seqlen: 4,
        },
        slots: request_slots.as_slice(),
        scale: 1.0 / (dims.k as f32).sqrt(),
        qk_l2norm: true,
    };

    // The step: verify every layer (outputs + ring records), then fold the accepted prefix.
    let before = counters();
    for layer in 0..layers {
        stream.verify(
            &inputs,
            None,
            &pool,
            layer,
            &mut o.dense_mut(n, dims.hv * dims.v),
            Some(&mut ring),
        )?;
    }
    stream.fold(&mut pool, &ring, request_slots.as_slice(), accept_lens.as_slice(), None)?;
    let during = counters();
    stream.check_errors()?;

    let out = o.to_host(&stream)?.to_f32();
    println!(
        "{backend}: verified {n} draft tokens in {layers} layers and folded 3+1+4 accepted tokens; \
         allocations and transfers during the step: {:?} -> {:?}; o[0..4] = {:?}",
        before,
        during,
        &out[..4]
    );
    assert_eq!(before, during, "a step on device memory allocates and copies nothing");
    assert!(out.iter().all(|x| x.is_finite()), "every output written");
    Ok(())
}
