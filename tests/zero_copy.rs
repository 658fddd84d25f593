//! A serving step through the safe Rust API allocates nothing and copies nothing between host and
//! device once its buffers exist: a verify + fold step (kernels V and F) and a buffered-decode
//! step (cursor snapshot, kernel D per layer, cursor advance). Counted: the library's Rust heap
//! allocations on the calling thread (a counting global allocator) and the CUDA layer's device allocations and
//! host<->device copies (`replayssm::memory::counters`). The emulator's own C++ scratch (its
//! simulated threads) is outside Rust's allocator and not counted.
//!
//! Both memories are measured: host-memory calls on Emulated, and device-memory calls through a
//! `Stream` (pools, rings and inputs in device memory) on Emulated in CI and on Cuda where a GPU
//! is present (`scripts/device-check`). Host memory on Cuda is refused, never staged, so there
//! is no copy to count there.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use common::spec;
use common::spec_chain::pool_for;
use replayssm::config::{resolve, EngineFlags};
use replayssm::kernels::decode::DecodeRows;
use replayssm::memory::{counters, TransferCounters};
use replayssm::memory::{DeviceAct, DeviceVec, Stream};
use replayssm::{
    decode, fold, verify, ActBuffer, Backend, CheckpointPool, DType, DecodeRing, DecodeStep, ForceFlush, HeadDims,
    SpecRing, Track, Variant,
};
use replayssm_tools::staged::DeviceTokens;
use replayssm_tools::workload::RecurrentData;

struct Counting;

thread_local! {
    // Only the measuring thread counts: libtest's own threads allocate at any time.
    static COUNTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

fn counting() -> bool {
    COUNTING.try_with(|c| c.get()).unwrap_or(false)
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counting() {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if counting() {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap allocations on this thread and the CUDA counters' change across `f` (the tests run one
/// at a time, `SERIAL`, so no other test moves the CUDA counters meanwhile).
fn measure(f: impl FnOnce()) -> (u64, TransferCounters) {
    let before = counters();
    ALLOCATIONS.store(0, Ordering::SeqCst);
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    let after = counters();
    (
        ALLOCATIONS.load(Ordering::SeqCst),
        TransferCounters {
            device_allocations: after.device_allocations - before.device_allocations,
            host_to_device: after.host_to_device - before.host_to_device,
            device_to_host: after.device_to_host - before.device_to_host,
        },
    )
}

/// One test at a time: the CUDA counters are process-wide.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn dims() -> HeadDims {
    HeadDims {
        h: 1,
        hv: 2,
        k: 32,
        v: 32,
    }
}

/// Runs `steps` verify + fold steps on `backend` and returns what the last one counted.
fn spec_steps(backend: Backend, steps: usize) -> (u64, TransferCounters) {
    // Three requests of 4 draft tokens on 4 slots, two layers, a ring of window 4.
    let data = RecurrentData::random(&spec(Variant::Gdn, dims(), DType::BF16, &[4, 4, 4]), 11);
    let (shape, mut pool) = pool_for(&data, 2, 4, 12);
    let mut ring = SpecRing::new(shape, true).unwrap();
    let d = data.dims;
    let n = data.num_tokens();
    let mut o = ActBuffer::nan(data.dtype, n * d.hv * d.v);
    let accept = [3, 1, 4];
    // A radix-cache track snapshot on row 0 into a slot no request holds.
    let free = (0..shape.slots as i32)
        .find(|s| !data.slots.contains(s))
        .expect("the workload leaves a free slot");
    let (track_slots, track_steps) = ([free, -1, -1], [1, -1, -1]);
    let inputs = data.inputs();
    let mut last = (0, TransferCounters::default());
    for _ in 0..steps {
        let mut ov = o.dense_mut(n, d.hv * d.v);
        last = measure(|| {
            for layer in 0..2 {
                verify(backend, &inputs, None, &pool, layer, &mut ov, Some(&mut ring)).unwrap();
            }
            let track = Track {
                slots: &track_slots[..],
                steps: &track_steps[..],
            };
            fold(backend, &mut pool, &ring, &data.slots, &accept, Some(track)).unwrap();
        });
    }
    last
}

/// Runs `steps` buffered-decode steps (snapshot, D on each of two layers, advance).
fn decode_steps(backend: Backend, steps: usize) -> (u64, TransferCounters) {
    let data = RecurrentData::random(&spec(Variant::Kda, dims(), DType::BF16, &[1, 1, 1]), 21);
    let cfg = resolve(&EngineFlags::buffered_decode(Variant::Kda, 4)).unwrap();
    let slots = data.state.len() / data.dims.state_elems();
    let mut pool = CheckpointPool::new(&cfg, data.dims, 2, slots).unwrap();
    let mut ring = DecodeRing::attach(&pool).unwrap();
    for &s in &data.slots {
        ring.allocate(s as usize).unwrap();
    }
    let d = data.dims;
    let b = data.slots.len();
    let mut o = ActBuffer::nan(data.dtype, b * d.hv * d.v);
    let inputs = data.decode_inputs();
    let mut step = DecodeStep::default();
    let mut last = (0, TransferCounters::default());
    for _ in 0..steps {
        let mut ov = o.dense_mut(b, d.hv * d.v);
        last = measure(|| {
            ring.begin_step_into(&mut step, &data.slots, ForceFlush::None).unwrap();
            for layer in 0..2 {
                decode(backend, &inputs, &mut pool, &mut ring, &step, layer, &mut ov).unwrap();
            }
            ring.finish_step_ref(&step).unwrap();
        });
    }
    last
}

/// Device-memory verify + fold steps on a stream of `backend`: everything uploaded once before,
/// then `steps` steps; returns what the last one counted.
fn device_spec_steps(backend: Backend, steps: usize) -> (u64, TransferCounters) {
    let data = RecurrentData::random(&spec(Variant::Gdn, dims(), DType::BF16, &[4, 4, 4]), 12);
    let (shape, pool) = pool_for(&data, 2, 4, 13);
    let stream = Stream::new(backend).unwrap();
    let mut dpool = pool.to_device(&stream).unwrap();
    let mut ring = SpecRing::for_pool(&dpool, shape.window, data.dtype, true).unwrap();
    let tokens = DeviceTokens::upload(&stream, &data.inputs()).unwrap();
    let d = data.dims;
    let n = data.num_tokens();
    let mut o = DeviceAct::poisoned(backend, data.dtype, n * d.hv * d.v).unwrap();
    let free = (0..shape.slots as i32).find(|s| !data.slots.contains(s)).unwrap();
    let up = |v: &[i32]| DeviceVec::from_host(&stream, v).unwrap();
    let (slots, accept, ts, st) = (up(&data.slots), up(&[3, 1, 4]), up(&[free, -1, -1]), up(&[1, -1, -1]));
    let inputs = tokens.inputs();
    let mut last = (0, TransferCounters::default());
    for _ in 0..steps {
        last = measure(|| {
            for layer in 0..2 {
                let mut ov = o.dense_mut(n, d.hv * d.v);
                stream
                    .verify(&inputs, None, &dpool, layer, &mut ov, Some(&mut ring))
                    .unwrap();
            }
            let track = Track {
                slots: ts.as_slice(),
                steps: st.as_slice(),
            };
            stream
                .fold(&mut dpool, &ring, slots.as_slice(), accept.as_slice(), Some(track))
                .unwrap();
        });
    }
    stream.check_errors().unwrap();
    last
}

/// Device-memory decode steps (snapshot, D on two layers, advance) on a stream of `backend`.
fn device_decode_steps(backend: Backend, steps: usize) -> (u64, TransferCounters) {
    let data = RecurrentData::random(&spec(Variant::Kda, dims(), DType::BF16, &[1, 1, 1]), 22);
    let cfg = resolve(&EngineFlags::buffered_decode(Variant::Kda, 4)).unwrap();
    let ns = data.state.len() / data.dims.state_elems();
    let stream = Stream::new(backend).unwrap();
    let mut pool = CheckpointPool::new_device(backend, &cfg, data.dims, 2, ns).unwrap();
    let mut ring = DecodeRing::attach(&pool).unwrap();
    let tokens = DeviceTokens::upload(&stream, &data.inputs()).unwrap();
    let d = data.dims;
    let b = data.slots.len();
    let up = |v: &[i32]| DeviceVec::from_host(&stream, v).unwrap();
    let (slots, flush) = (up(&data.slots), up(&[0, 0, 0]));
    let mut positions = DeviceVec::<i32>::zeros(backend, b).unwrap();
    let mut o = DeviceAct::poisoned(backend, data.dtype, b * d.hv * d.v).unwrap();
    let inputs = tokens.decode_inputs();
    let mut last = (0, TransferCounters::default());
    for _ in 0..steps {
        last = measure(|| {
            stream
                .decode_snapshot(&mut ring, slots.as_slice(), positions.as_mut_slice())
                .unwrap();
            let rows = DecodeRows {
                slots: slots.as_slice(),
                positions: positions.as_slice(),
                force_flush: Some(flush.as_slice()),
            };
            for layer in 0..2 {
                let mut ov = o.dense_mut(b, d.hv * d.v);
                stream
                    .decode(&inputs, &mut pool, &mut ring, &rows, layer, &mut ov)
                    .unwrap();
            }
            stream.decode_advance(&mut ring, &rows).unwrap();
        });
    }
    stream.check_errors().unwrap();
    last
}

#[test]
fn an_emulated_device_memory_verify_and_fold_step_allocates_and_copies_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (allocs, copies) = device_spec_steps(Backend::Emulated, 3);
    assert_eq!(allocs, 0, "heap allocations in a device verify + fold step");
    assert_eq!(copies, TransferCounters::default(), "device allocations or transfers");
}

#[test]
fn an_emulated_device_memory_decode_step_allocates_and_copies_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (allocs, copies) = device_decode_steps(Backend::Emulated, 3);
    assert_eq!(allocs, 0, "heap allocations in a device decode step");
    assert_eq!(copies, TransferCounters::default(), "device allocations or transfers");
}

#[test]
fn the_transfer_counters_see_an_upload() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let stream = Stream::new(Backend::Emulated).unwrap();
    let mut v = DeviceVec::<i32>::zeros(Backend::Emulated, 3).unwrap();
    let (_, c) = measure(|| v.upload(&stream, &[1, 2, 3]).unwrap());
    assert_eq!(c.host_to_device, 1, "an upload must be counted");
}

#[test]
fn the_counter_sees_an_allocation() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (allocs, _) = measure(|| {
        std::hint::black_box(vec![1u8; 64]);
    });
    assert_eq!(allocs, 1, "the counting allocator must see a Vec");
}

#[test]
fn an_emulated_verify_and_fold_step_allocates_and_copies_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The first step grows the per-thread scratch buffers; the steps after it are the steady state.
    let (allocs, copies) = spec_steps(Backend::Emulated, 3);
    assert_eq!(allocs, 0, "heap allocations in a verify + fold step");
    assert_eq!(
        copies,
        TransferCounters::default(),
        "device allocations or host<->device copies"
    );
}

#[test]
fn an_emulated_decode_step_allocates_and_copies_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (allocs, copies) = decode_steps(Backend::Emulated, 3);
    assert_eq!(allocs, 0, "heap allocations in a decode step");
    assert_eq!(
        copies,
        TransferCounters::default(),
        "device allocations or host<->device copies"
    );
}

#[test]
fn cuda_device_memory_steps_allocate_and_copy_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !common::gpu_available("cuda_device_memory_steps_allocate_and_copy_nothing") {
        return;
    }
    let (allocs, spec) = device_spec_steps(Backend::Cuda, 3);
    let (dallocs, dec) = device_decode_steps(Backend::Cuda, 3);
    common::say(&format!(
        "CUDA device-memory verify + fold step: {allocs} heap allocations, {spec:?}; decode step: {dallocs} heap allocations, {dec:?}"
    ));
    assert_eq!((allocs, spec), (0, TransferCounters::default()), "verify + fold step");
    assert_eq!((dallocs, dec), (0, TransferCounters::default()), "decode step");
}
