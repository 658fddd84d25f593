//! The bad-input campaign of the library's entry points (issue 19): the C ABI and the kernel layer
//! behind it, on the emulated backend, fed a catalogue of bad inputs and then a seeded random
//! campaign. For every input: a status (never a crash), a message naming the field, nothing
//! written by a refused call (every buffer bit-identical), nothing written outside any buffer
//! (guard regions), and the host's index checks agreeing with the kernels' device checks in both
//! directions (what the host refuses the device flags, what the host accepts the device does not
//! flag). The CLI, case files and Python binding have their own campaigns (tools/tests/cli.rs,
//! python/tests/test_hostile.py).

mod common;

use std::ptr;

use common::refusals::Refusal;
use common::say;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use replayssm::capi::*;
use replayssm::ffi;
use replayssm_status::*;

const EMU: i32 = replayssm_backend::REPLAYSSM_BACKEND_EMULATED as i32;

// A small problem every entry can run: 2 layers, 4 slots, window and cache length 4 (the deferred
// fold's ring: two halves of WD = 2; the buffered verify's ring: L = 4 positions, T = 2), 2
// requests of 2 tokens, H = 1, HV = 2, K = 32, V = 8, f32
// activations, precomputed GDN gates.
const NL: usize = 2;
const NS: usize = 4;
const W: usize = 4;
const L: usize = 4;
const B: usize = 2;
const T: usize = 2;
const N: usize = B * T;
const H: usize = 1;
const HV: usize = 2;
const K: usize = 32;
const V: usize = 8;
/// The deferred fold's W: its ring holds two halves of WD positions, the W positions above.
const WD: usize = W / 2;
const GUARD: usize = 32;
const GUARD_BITS: u32 = 0x7fc0_0bad;

fn last_error() -> String {
    // SAFETY: the library returns a NUL-terminated thread-local string.
    unsafe { std::ffi::CStr::from_ptr(replayssm_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// A buffer between two guard regions of known bits.
#[derive(Clone, PartialEq)]
struct Guarded<T: Copy + PartialEq> {
    data: Vec<T>,
}

impl<T: Copy + PartialEq> Guarded<T> {
    fn new(values: impl IntoIterator<Item = T>, guard: T) -> Self {
        let mut data = vec![guard; GUARD];
        data.extend(values);
        data.extend(std::iter::repeat_n(guard, GUARD));
        Guarded { data }
    }
    fn ptr(&mut self) -> *mut T {
        self.data[GUARD..].as_mut_ptr()
    }
    fn body(&self) -> &[T] {
        &self.data[GUARD..self.data.len() - GUARD]
    }
    fn body_mut(&mut self) -> &mut [T] {
        let n = self.data.len();
        &mut self.data[GUARD..n - GUARD]
    }
    fn guards_intact(&self, guard: T) -> bool {
        let n = self.data.len();
        self.data[..GUARD]
            .iter()
            .chain(&self.data[n - GUARD..])
            .all(|&x| x == guard)
    }
}

fn floats(n: usize, rng: &mut ChaCha8Rng, lo: f32, hi: f32) -> Guarded<f32> {
    Guarded::new((0..n).map(|_| rng.gen_range(lo..hi)), f32::from_bits(GUARD_BITS))
}
fn ints(values: &[i32]) -> Guarded<i32> {
    Guarded::new(values.iter().copied(), GUARD_BITS as i32)
}

/// Every buffer of every entry, valid for the fixture's sizes.
#[derive(Clone, PartialEq)]
struct World {
    q: Guarded<f32>,
    k: Guarded<f32>,
    v: Guarded<f32>,
    g: Guarded<f32>,
    beta: Guarded<f32>,
    o: Guarded<f32>,
    state: Guarded<f32>,
    snapshots: Guarded<f32>,
    ring_v: Guarded<f32>,
    ring_k: Guarded<f32>,
    ring_g: Guarded<f32>,
    ring_beta: Guarded<f32>,
    ring_d: Guarded<f32>,
    dring_k: Guarded<f32>,
    dring_g: Guarded<f32>,
    /// The buffered verify's corrections [NL, NS, HV, L, V].
    ring_u: Guarded<f32>,
    slots: Guarded<i32>,
    cu: Guarded<i32>,
    parent: Guarded<i32>,
    lens: Guarded<i32>,
    paths: Guarded<i32>,
    track_slots: Guarded<i32>,
    track_steps: Guarded<i32>,
    positions: Guarded<i32>,
    force: Guarded<i32>,
    cursors: Guarded<i32>,
    pending: Guarded<i32>,
    /// The buffered cursors' flush lengths [B] (out).
    flush: Guarded<i32>,
    word: Guarded<u32>,
}

impl World {
    fn new(seed: u64) -> World {
        let rng = &mut ChaCha8Rng::seed_from_u64(seed);
        World {
            q: floats(N * H * K, rng, -1.0, 1.0),
            k: floats(N * H * K, rng, -1.0, 1.0),
            v: floats(N * HV * V, rng, -1.0, 1.0),
            g: floats(N * HV, rng, -0.5, -0.01),
            beta: floats(N * HV, rng, 0.1, 0.9),
            o: floats(N * HV * V, rng, -1.0, 1.0),
            state: floats(NL * NS * HV * V * K, rng, -0.5, 0.5),
            snapshots: floats(B * T * HV * V * K, rng, -0.5, 0.5),
            ring_v: floats(NL * NS * HV * W * V, rng, -1.0, 1.0),
            ring_k: floats(NL * NS * H * W * K, rng, -1.0, 1.0),
            ring_g: floats(NL * NS * HV * W, rng, -0.5, -0.01),
            ring_beta: floats(NL * NS * HV * W, rng, 0.1, 0.9),
            ring_d: floats(NL * NS * HV * L * V, rng, -0.1, 0.1),
            dring_k: floats(NL * NS * H * L * K, rng, -0.2, 0.2),
            dring_g: floats(NL * NS * HV * L, rng, -0.5, -0.01),
            ring_u: floats(NL * NS * HV * L * V, rng, -0.2, 0.2),
            // Slots 1 and 3 are live; 0 and 2 are free (track targets).
            slots: ints(&[1, 3]),
            cu: ints(&[0, 2, 4]),
            parent: ints(&[-1, 0, -1, 0]),
            lens: ints(&[2, 1]),
            paths: ints(&[0, 1, -1, -1, 0, -1, -1, -1]),
            track_slots: ints(&[0, -1]),
            track_steps: ints(&[1, -1]),
            positions: ints(&[1, 0]),
            force: ints(&[0, 0]),
            cursors: ints(&[0, 1, 0, 0]),
            // The deferred fold's pending table [NS, 2 + WD]: slot 1 has 2 records in half 0,
            // slot 3 one in half 1 (positions 2..4), the free slots nothing.
            pending: ints(&[0, 0, -1, -1, 2, 0, 0, 1, 0, 0, -1, -1, 1, 1, 2, -1]),
            flush: ints(&[-7, -7]),
            word: Guarded::new([0u32], GUARD_BITS),
        }
    }

    fn guards_intact(&self) -> Result<(), &'static str> {
        let g = f32::from_bits(GUARD_BITS);
        let fl: [(&str, &Guarded<f32>); 16] = [
            ("q", &self.q),
            ("k", &self.k),
            ("v", &self.v),
            ("g", &self.g),
            ("beta", &self.beta),
            ("o", &self.o),
            ("state", &self.state),
            ("snapshots", &self.snapshots),
            ("ring_v", &self.ring_v),
            ("ring_k", &self.ring_k),
            ("ring_g", &self.ring_g),
            ("ring_beta", &self.ring_beta),
            ("ring_d", &self.ring_d),
            ("decode ring_k", &self.dring_k),
            ("decode ring_g", &self.dring_g),
            ("ring_u", &self.ring_u),
        ];
        for (name, b) in fl {
            // Compare bits: the guard is a NaN.
            if !b.data[..GUARD]
                .iter()
                .chain(&b.data[b.data.len() - GUARD..])
                .all(|x| x.to_bits() == g.to_bits())
            {
                return Err(name);
            }
        }
        let is: [(&str, &Guarded<i32>); 12] = [
            ("slots", &self.slots),
            ("cu_seqlens", &self.cu),
            ("parent", &self.parent),
            ("accept_lens", &self.lens),
            ("accept_paths", &self.paths),
            ("track_slots", &self.track_slots),
            ("track_steps", &self.track_steps),
            ("positions", &self.positions),
            ("force_flush", &self.force),
            ("cursors", &self.cursors),
            ("pending", &self.pending),
            ("flush_lens", &self.flush),
        ];
        for (name, b) in is {
            if !b.guards_intact(GUARD_BITS as i32) {
                return Err(name);
            }
        }
        if !self.word.guards_intact(GUARD_BITS) {
            return Err("error_word");
        }
        Ok(())
    }

    /// Bitwise equality (f32 NaNs included).
    fn same_bits(&self, other: &World) -> bool {
        let f =
            |a: &Guarded<f32>, b: &Guarded<f32>| a.data.iter().zip(&b.data).all(|(x, y)| x.to_bits() == y.to_bits());
        f(&self.q, &other.q)
            && f(&self.o, &other.o)
            && f(&self.state, &other.state)
            && f(&self.snapshots, &other.snapshots)
            && f(&self.ring_v, &other.ring_v)
            && f(&self.ring_k, &other.ring_k)
            && f(&self.ring_g, &other.ring_g)
            && f(&self.ring_beta, &other.ring_beta)
            && f(&self.ring_d, &other.ring_d)
            && f(&self.dring_k, &other.dring_k)
            && f(&self.dring_g, &other.dring_g)
            && f(&self.ring_u, &other.ring_u)
            && self.flush == other.flush
            && self.positions == other.positions
            && self.cursors == other.cursors
            && self.pending == other.pending
            && self.paths == other.paths
            && self.word == other.word
    }
}

/// One C ABI entry: its params over a world, its C ABI call and its kernel-layer launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    Recurrent,
    Verify,
    Fold,
    Replay,
    Decode,
    Materialize,
    Cursors,
    VerifyFold,
    Defer,
    VerifyBuffered,
    Buffered,
}

const ENTRIES: [Entry; 11] = [
    Entry::Recurrent,
    Entry::Verify,
    Entry::Fold,
    Entry::Replay,
    Entry::Decode,
    Entry::Materialize,
    Entry::Cursors,
    Entry::VerifyFold,
    Entry::Defer,
    Entry::VerifyBuffered,
    Entry::Buffered,
];

/// The params of any entry (each a plain C struct).
#[derive(Clone, Copy)]
enum Params {
    Recurrent(replayssm_recurrent_params),
    Verify(replayssm_verify_params),
    Fold(replayssm_fold_params),
    Replay(replayssm_replay_params),
    Decode(replayssm_decode_params, bool),
    Cursors(replayssm_cursor_params),
    VerifyFold(replayssm_verify_fold_params),
    Defer(replayssm_defer_params),
    VerifyBuffered(replayssm_verify_buffered_params),
    Buffered(replayssm_buffered_params),
}

macro_rules! token_fields {
    ($p:expr, $w:expr, $rows:expr) => {{
        $p.tokens.q = $w.q.ptr().cast();
        $p.tokens.k = $w.k.ptr().cast();
        $p.tokens.v = $w.v.ptr().cast();
        $p.tokens.g = $w.g.ptr();
        $p.tokens.beta = $w.beta.ptr();
        $p.tokens.o = $w.o.ptr().cast();
        $p.base.error_word = $w.word.ptr();
        $p.tokens.q_stride = (H * K) as i64;
        $p.tokens.k_stride = (H * K) as i64;
        $p.tokens.v_stride = (HV * V) as i64;
        $p.tokens.o_stride = (HV * V) as i64;
        $p.base.H = H as i32;
        $p.base.HV = HV as i32;
        $p.base.K = K as i32;
        $p.base.V = V as i32;
        $p.tokens.scale = (K as f32).powf(-0.5);
        $p.base.dtype = 0;
        $p.base.variant = 0;
        $p.base.qk_l2norm = 1;
    }};
}

/// The fields V and VF share (same names in both params): a tree verify of layer 1 over the
/// world's tokens and ring; the caller sets `window`.
macro_rules! verify_fields {
    ($p:expr, $w:expr) => {{
        token_fields!($p, $w, N);
        $p.cu_seqlens = $w.cu.ptr();
        $p.parent = $w.parent.ptr();
        $p.base.slots = $w.slots.ptr();
        $p.base.state = $w.state.ptr();
        $p.ring.v = $w.ring_v.ptr().cast();
        $p.ring.k = $w.ring_k.ptr().cast();
        $p.ring.g = $w.ring_g.ptr();
        $p.ring.beta = $w.ring_beta.ptr();
        $p.num_tokens = N as i32;
        $p.base.batch = B as i32;
        $p.max_seqlen = T as i32;
        $p.base.num_slots = NS as i32;
        $p.base.num_layers = NL as i32;
        $p.base.layer = 1;
    }};
}

impl Entry {
    /// Valid params of this entry over `w` (pointers into it).
    fn params(self, w: &mut World) -> Params {
        match self {
            Entry::Recurrent => {
                let mut p = replayssm_recurrent_params::default();
                token_fields!(p, w, N);
                p.cu_seqlens = w.cu.ptr();
                p.base.slots = w.slots.ptr();
                // R's pool is one layer: [NS, HV, V, K] (the first layer of the world's).
                p.base.state = w.state.ptr();
                p.snapshots = w.snapshots.ptr();
                p.num_tokens = N as i32;
                p.base.batch = B as i32;
                p.max_seqlen = T as i32;
                p.base.num_slots = NS as i32;
                p.base.num_layers = 1;
                p.write_state = 1;
                Params::Recurrent(p)
            }
            Entry::Verify => {
                let mut p = replayssm_verify_params::default();
                verify_fields!(p, w);
                p.ring.window = W as i32;
                Params::Verify(p)
            }
            Entry::Fold => Params::Fold(replayssm_fold_params {
                base: replayssm_base_params {
                    state: w.state.ptr(),
                    slots: w.slots.ptr(),
                    error_word: w.word.ptr(),
                    batch: B as i32,
                    num_slots: NS as i32,
                    num_layers: NL as i32,
                    H: H as i32,
                    HV: HV as i32,
                    K: K as i32,
                    V: V as i32,
                    qk_l2norm: 1,
                    ..Default::default()
                },
                ring: replayssm_ring_params {
                    v: w.ring_v.ptr().cast(),
                    k: w.ring_k.ptr().cast(),
                    g: w.ring_g.ptr(),
                    beta: w.ring_beta.ptr(),
                    window: W as i32,
                    ..Default::default()
                },
                accept_lens: w.lens.ptr(),
                track_slots: w.track_slots.ptr(),
                track_steps: w.track_steps.ptr(),
                ..Default::default()
            }),
            Entry::Replay => Params::Replay(replayssm_replay_params {
                base: replayssm_base_params {
                    state: w.state.ptr(),
                    slots: w.slots.ptr(),
                    error_word: w.word.ptr(),
                    batch: B as i32,
                    num_slots: NS as i32,
                    num_layers: NL as i32,
                    layer: 1,
                    H: H as i32,
                    HV: HV as i32,
                    K: K as i32,
                    V: V as i32,
                    qk_l2norm: 1,
                    ..Default::default()
                },
                ring: replayssm_ring_params {
                    v: w.ring_v.ptr().cast(),
                    k: w.ring_k.ptr().cast(),
                    g: w.ring_g.ptr(),
                    beta: w.ring_beta.ptr(),
                    window: W as i32,
                    ..Default::default()
                },
                counts: w.lens.ptr(),
                ..Default::default()
            }),
            Entry::Decode | Entry::Materialize => {
                let mut p = replayssm_decode_params::default();
                if self == Entry::Decode {
                    token_fields!(p, w, B);
                    p.force_flush = w.force.ptr();
                } else {
                    p.base.error_word = w.word.ptr();
                    p.base.H = H as i32;
                    p.base.HV = HV as i32;
                    p.base.K = K as i32;
                    p.base.V = V as i32;
                    p.base.qk_l2norm = 1;
                }
                p.base.slots = w.slots.ptr();
                p.positions = w.positions.ptr();
                p.base.state = w.state.ptr();
                p.ring_d = w.ring_d.ptr().cast();
                p.ring_k = w.dring_k.ptr().cast();
                p.ring_g = w.dring_g.ptr();
                p.base.batch = B as i32;
                p.base.num_slots = NS as i32;
                p.base.num_layers = NL as i32;
                p.base.layer = 1;
                p.cache_len = L as i32;
                Params::Decode(p, self == Entry::Materialize)
            }
            Entry::Cursors => Params::Cursors(replayssm_cursor_params {
                cursors: w.cursors.ptr(),
                slots: w.slots.ptr(),
                positions: w.positions.ptr(),
                force_flush: w.force.ptr(),
                error_word: w.word.ptr(),
                batch: B as i32,
                num_slots: NS as i32,
                cache_len: L as i32,
                op: 1,
                ..Default::default()
            }),
            Entry::VerifyFold => {
                // Tree verify (parent set) of layer 1 on the 2 WD ring, folding each live slot's
                // pending records first; row 0 snapshots its step 1 into free slot 0.
                let mut p = replayssm_verify_fold_params::default();
                verify_fields!(p.verify, w);
                p.verify.struct_size = std::mem::size_of::<replayssm_verify_params>() as u32;
                p.verify.ring.window = (2 * WD) as i32;
                p.pending = w.pending.ptr();
                p.track_slots = w.track_slots.ptr();
                p.track_steps = w.track_steps.ptr();
                Params::VerifyFold(p)
            }
            // COMMIT of the accepted lengths (GATHER writes `paths`, [B, WD] of its 8).
            Entry::Defer => Params::Defer(replayssm_defer_params {
                pending: w.pending.ptr(),
                slots: w.slots.ptr(),
                accept_lens: w.lens.ptr(),
                paths: w.paths.ptr(),
                error_word: w.word.ptr(),
                batch: B as i32,
                num_slots: NS as i32,
                window: WD as i32,
                op: replayssm_defer_op::REPLAYSSM_DEFER_COMMIT as i32,
                ..Default::default()
            }),
            Entry::VerifyBuffered => {
                // Linear chains (no parent) of layer 1 on the L-position ring, each after its
                // slot's history (cursors: slot 1 holds 1 record, slot 3 none).
                let mut p = replayssm_verify_buffered_params::default();
                verify_fields!(p.verify, w);
                p.verify.struct_size = std::mem::size_of::<replayssm_verify_params>() as u32;
                p.verify.parent = ptr::null();
                p.verify.ring.window = L as i32;
                p.cursors = w.cursors.ptr();
                p.ring_u = w.ring_u.ptr();
                Params::VerifyBuffered(p)
            }
            // COMMIT of the accepted lengths (slot 1: 1 + 2 > L - T, so it flushes).
            Entry::Buffered => Params::Buffered(replayssm_buffered_params {
                cursors: w.cursors.ptr(),
                slots: w.slots.ptr(),
                accept_lens: w.lens.ptr(),
                flush_lens: w.flush.ptr(),
                error_word: w.word.ptr(),
                batch: B as i32,
                num_slots: NS as i32,
                cache_len: L as i32,
                window: T as i32,
                op: replayssm_buffered_op::REPLAYSSM_BUFFERED_COMMIT as i32,
                ..Default::default()
            }),
        }
    }
}

/// VB's kernel-layer params of `p`: the C ABI's with the implementation fields it picks here
/// (STAGED, the whole head: V = 8).
fn vb_kernel(p: &replayssm_verify_buffered_params) -> ffi::rssm_verify_buffered_params {
    let mut k = p.kernel();
    k.verify.base.impl_ = ffi::rssm_impl_RSSM_IMPL_STAGED as i32;
    k
}

impl Params {
    fn name(&self) -> &'static str {
        match self {
            Params::Recurrent(_) => "replayssm_recurrent",
            Params::Verify(_) => "replayssm_verify",
            Params::Fold(_) => "replayssm_fold",
            Params::Replay(_) => "replayssm_replay",
            Params::Decode(_, false) => "replayssm_decode",
            Params::Decode(_, true) => "replayssm_decode_materialize",
            Params::Cursors(_) => "replayssm_decode_cursors",
            Params::VerifyFold(_) => "replayssm_verify_fold",
            Params::Defer(_) => "replayssm_defer",
            Params::VerifyBuffered(_) => "replayssm_verify_buffered",
            Params::Buffered(_) => "replayssm_buffered",
        }
    }

    /// The C ABI entry on the emulated backend.
    ///
    /// # Safety
    /// The params' pointers cover the extents their sizes describe (the campaign only makes
    /// sizes smaller than the world's buffers, or invalid).
    unsafe fn call(&self) -> replayssm_status {
        self.call_on(EMU)
    }

    /// The C ABI entry on `backend` (the legacy default stream for CUDA).
    ///
    /// # Safety
    /// As `call`, in the backend's memory.
    unsafe fn call_on(&self, backend: i32) -> replayssm_status {
        let s = ptr::null_mut();
        match self {
            Params::Recurrent(p) => replayssm_recurrent(backend, p, s),
            Params::Verify(p) => replayssm_verify(backend, p, s),
            Params::Fold(p) => replayssm_fold(backend, p, s),
            Params::Replay(p) => replayssm_replay(backend, p, s),
            Params::Decode(p, false) => replayssm_decode(backend, p, s),
            Params::Decode(p, true) => replayssm_decode_materialize(backend, p, s),
            Params::Cursors(p) => replayssm_decode_cursors(backend, p, s),
            Params::VerifyFold(p) => replayssm_verify_fold(backend, p, s),
            Params::Defer(p) => replayssm_defer(backend, p, s),
            Params::VerifyBuffered(p) => replayssm_verify_buffered(backend, p, s),
            Params::Buffered(p) => replayssm_buffered(backend, p, s),
        }
    }

    /// The kernel layer's emulated launcher (its can_implement, then the kernel: no host checks
    /// of device-side indices), as CUDA runs it under graph replay.
    ///
    /// # Safety
    /// As `call`.
    unsafe fn launch_kernel(&self) -> ffi::rssm_status {
        let s = ptr::null_mut();
        match self {
            Params::Recurrent(p) => ffi::rssm_emu_recurrent(&p.kernel(), s),
            Params::Verify(p) => ffi::rssm_emu_verify(&p.kernel(), s),
            Params::Fold(p) => ffi::rssm_emu_fold(&p.kernel(), s),
            Params::Replay(p) => ffi::rssm_emu_replay(&p.kernel(), s),
            Params::Decode(p, false) => ffi::rssm_emu_decode(&p.kernel(), s),
            Params::Decode(p, true) => {
                let mut k = p.kernel();
                k.base.layer = 0;
                ffi::rssm_emu_decode_materialize(&k, s)
            }
            Params::Cursors(p) => ffi::rssm_emu_decode_cursors(&p.kernel(), s),
            Params::VerifyFold(p) => ffi::rssm_emu_verify_fold(&p.kernel(), s),
            Params::Defer(p) => ffi::rssm_emu_defer(&p.kernel(), s),
            Params::VerifyBuffered(p) => ffi::rssm_emu_verify_buffered(&vb_kernel(p), s),
            Params::Buffered(p) => ffi::rssm_emu_buffered(&p.kernel(), s),
        }
    }
}

/// Runs `p` through the C ABI on a copy of `world`; returns the status, the message and the
/// world after the call. Panics (the test fails) on a write outside a buffer, or on a refused
/// call that changed anything.
fn run(world: &World, edit: impl FnOnce(&mut World, &mut Params), entry: Entry) -> (replayssm_status, String, World) {
    let mut w = world.clone();
    let mut p = entry.params(&mut w);
    edit(&mut w, &mut p);
    let before = w.clone();
    // SAFETY: `p` points into `w`, sized for the fixture; edits only shrink sizes or break them.
    let st = unsafe { p.call() };
    let msg = last_error();
    if let Err(buf) = w.guards_intact() {
        panic!("{}: wrote outside {buf} ({st:?}: {msg})", p.name());
    }
    if st != REPLAYSSM_OK {
        assert!(
            w.same_bits(&before),
            "{}: a refused call changed a buffer ({msg})",
            p.name()
        );
        assert!(
            msg.starts_with(p.name()),
            "{}: message {msg:?} does not name the entry",
            p.name()
        );
    }
    (st, msg, w)
}

type Edit = fn(&mut World, &mut Params);

/// An edit that puts both rows on the second row's live slot.
fn same_slot(w: &mut World, _: &mut Params) {
    let s = w.slots.body()[1];
    w.slots.body_mut()[0] = s;
}

/// An edit that sets one field of one entry's params (`set!(Fold, flags = 1)`).
macro_rules! set {
    ($variant:ident, $($field:ident).+ = $value:expr) => {
        |_: &mut World, p: &mut Params| {
            if let Params::$variant(q, ..) = p {
                q.$($field).+ = $value;
            }
        }
    };
}

/// The named catalogue: (entry, what, edit, expected status, needle the message must contain).
/// A catalogued bad input: entry, what, edit, expected status, needle of the message.
type Named = (Entry, &'static str, Edit, replayssm_status, &'static str);

fn catalogue() -> Vec<Named> {
    use Entry::*;
    const INV: replayssm_status = REPLAYSSM_ERR_INVALID_ARGUMENT;
    // Item 1: duplicate and conflicting slots, on every entry.
    let mut cases: Vec<Named> = ENTRIES
        .iter()
        .map(|&e| {
            (
                e,
                "duplicate live slots",
                same_slot as Edit,
                INV,
                "slots[0] and slots[1] are both 3",
            )
        })
        .collect();
    let rest: Vec<Named> = vec![
        (
            Fold,
            "track slot = another row's live slot",
            |w, _| w.track_slots.body_mut()[0] = 3,
            INV,
            "track_slots[0] = 3 is also slots[1]",
        ),
        (
            Fold,
            "track slot = its own live slot",
            |w, _| w.track_slots.body_mut()[0] = 1,
            INV,
            "track_slots[0] = 1 is also slots[0]",
        ),
        (
            Fold,
            "duplicate track slots",
            |w, _| {
                w.track_slots.body_mut().copy_from_slice(&[2, 2]);
                w.track_steps.body_mut().copy_from_slice(&[0, 0]);
            },
            INV,
            "track_slots[0] and track_slots[1] are both 2",
        ),
        // Item 2: a track step outside the committed steps.
        (
            Fold,
            "track step = accept length",
            |w, _| w.track_steps.body_mut()[0] = 2,
            INV,
            "track_steps[0] = 2 is outside 0..2",
        ),
        (
            Fold,
            "track step negative",
            |w, _| w.track_steps.body_mut()[0] = -1,
            INV,
            "track_steps[0] = -1",
        ),
        (
            Fold,
            "track on a row that commits nothing",
            |w, _| w.lens.body_mut()[0] = 0,
            INV,
            "row 0 commits 0 steps",
        ),
        (
            Fold,
            "track on a null row",
            |w, _| {
                w.slots.body_mut()[0] = -1;
            },
            INV,
            "(a null row)",
        ),
        // Other device-side values, host-visible here.
        (
            Fold,
            "slot out of range",
            |w, _| w.slots.body_mut()[1] = 4,
            INV,
            "slots[1] = 4 is out of range",
        ),
        (
            Fold,
            "accept length over the window",
            |w, _| w.lens.body_mut()[1] = 5,
            INV,
            "accept_lens[1] = 5 is outside 0..=4",
        ),
        (
            Replay,
            "count negative",
            |w, _| w.lens.body_mut()[1] = -1,
            INV,
            "counts[1] = -1",
        ),
        (
            Recurrent,
            "cu_seqlens decreasing",
            |w, _| w.cu.body_mut()[1] = 5,
            INV,
            "cu_seqlens[0..=1] = 0..5",
        ),
        // Tokens outside every request (they came back unwritten, e.g. NaN, with no error).
        (
            Recurrent,
            "cu_seqlens not starting at 0",
            |w, _| w.cu.body_mut()[0] = 1,
            INV,
            "cu_seqlens[0] = 1 and cu_seqlens[2] = 4: they must be 0 and num_tokens = 4",
        ),
        (
            Verify,
            "cu_seqlens ending before the last token",
            |w, _| w.cu.body_mut()[2] = 3,
            INV,
            "cu_seqlens[0] = 0 and cu_seqlens[2] = 3",
        ),
        (
            VerifyFold,
            "cu_seqlens not starting at 0",
            |w, _| w.cu.body_mut()[0] = 1,
            INV,
            "a token outside every request would get no output",
        ),
        (
            Verify,
            "parent of a later node",
            |w, _| w.parent.body_mut()[1] = 1,
            INV,
            "parent[1] = 1",
        ),
        (
            Decode,
            "position past the cache",
            |w, _| w.positions.body_mut()[0] = 4,
            INV,
            "positions[0] = 4 (slot 1) is outside 0..4",
        ),
        (
            Cursors,
            "advance of a bad position",
            |w, _| w.positions.body_mut()[1] = -3,
            INV,
            "positions[1] = -3",
        ),
        (
            Cursors,
            "snapshot of a bad cursor",
            |w, p| {
                w.cursors.body_mut()[3] = 9;
                if let Params::Cursors(c) = p {
                    c.op = 0;
                }
            },
            INV,
            "cursors[slots][1] = 9",
        ),
        (
            Fold,
            "path not increasing",
            |w, p| {
                w.paths.body_mut()[..2].copy_from_slice(&[1, 0]);
                if let Params::Fold(f) = p {
                    f.accept_lens = ptr::null();
                    f.accept_paths = w.paths.ptr();
                    f.path_width = W as i32;
                    f.track_slots = ptr::null();
                    f.track_steps = ptr::null();
                }
            },
            INV,
            "accept_paths[0][1] = 0",
        ),
        // Item 10: refusals that name the field.
        (
            Verify,
            "ring window smaller than max_seqlen",
            set!(Verify, ring.window = 1),
            INV,
            "window = 1 is smaller than max_seqlen = 2",
        ),
        // The checkpoint pool's pitches (a page-major pool sets them): below a slot, overlapping
        // layers, not whole float4s.
        (
            Verify,
            "state slot pitch below a slot",
            set!(Verify, base.state_slot_stride = 4),
            INV,
            "state_slot_stride = 4 is smaller than one slot's checkpoint",
        ),
        (
            Fold,
            "state layers one float apart",
            set!(Fold, base.state_layer_stride = 4),
            INV,
            "state_layer_stride = 4 with state_slot_stride = 0: the 2 layers' checkpoints overlap",
        ),
        (
            Recurrent,
            "negative state slot pitch",
            set!(Recurrent, base.state_slot_stride = -4),
            INV,
            "state_slot_stride = -4: expected 0 (packed) or a multiple of 4",
        ),
        (
            Decode,
            "state slot pitch not whole float4s",
            set!(Decode, base.state_slot_stride = 1 << 20 | 2),
            INV,
            "state_slot_stride = 1048578",
        ),
        (
            Replay,
            "state slot pitch past 2^40",
            set!(Replay, base.state_slot_stride = 1 << 44),
            INV,
            "state_slot_stride = 17592186044416",
        ),
        (
            Fold,
            "huge num_layers",
            set!(Fold, base.num_layers = 1 << 20),
            INV,
            "num_layers = 1048576",
        ),
        (
            Fold,
            "V = 2^31 - 1",
            set!(Fold, base.V = i32::MAX),
            INV,
            "V (value head dim) = 2147483647, must be in 1..=65536",
        ),
        (
            Recurrent,
            "V = 2^31 - 1",
            set!(Recurrent, base.V = i32::MAX),
            INV,
            "V (value head dim) = 2147483647",
        ),
        (
            Fold,
            "state extent overflows",
            |_, p| {
                if let Params::Fold(f) = p {
                    f.base.num_slots = i32::MAX;
                    f.base.HV = 65535;
                    f.base.V = 65536;
                    f.base.K = 256;
                }
            },
            INV,
            "state: ",
        ),
        // Item 11: non-zero flags / reserved, strides that overflow 64-bit addressing.
        (Recurrent, "flags set", set!(Recurrent, flags = 4), INV, "flags = 0x4"),
        (
            Verify,
            "reserved set",
            set!(Verify, base.reserved = 1),
            INV,
            "reserved = 1",
        ),
        (Fold, "flags set", set!(Fold, flags = 1), INV, "flags = 0x1"),
        (
            Cursors,
            "flags set",
            set!(Cursors, flags = 0x8000_0000),
            INV,
            "flags = 0x80000000",
        ),
        (
            Decode,
            "ring_dtype out of range",
            set!(Decode, ring_dtype = -1),
            INV,
            "ring_dtype (0 = f32, 1 = f16, 2 = bf16) = -1",
        ),
        (
            Decode,
            "a bf16 ring with f16 activations",
            |_, p| {
                if let Params::Decode(q, ..) = p {
                    q.base.dtype = 1;
                    q.ring_dtype = 2;
                }
            },
            REPLAYSSM_ERR_UNSUPPORTED,
            "ring_dtype = 2: decode records are f32 (0) or the activations' dtype (dtype = 1)",
        ),
        (
            Decode,
            "ring_d not aligned to its elements",
            |_, p| {
                if let Params::Decode(q, ..) = p {
                    q.ring_d = q.ring_d.cast::<u8>().wrapping_add(2).cast();
                }
            },
            INV,
            "is not aligned to its 4-byte elements",
        ),
        (
            Decode,
            "a bf16 ring with f32 activations",
            set!(Decode, ring_dtype = 2),
            REPLAYSSM_ERR_UNSUPPORTED,
            "ring_dtype = 2: decode records are f32 (0) or the activations' dtype (dtype = 0)",
        ),
        (
            Recurrent,
            "q stride x tokens overflows",
            set!(Recurrent, tokens.q_stride = i64::MAX / 2),
            INV,
            "q: 4 rows of stride",
        ),
        (
            Decode,
            "o stride x rows overflows",
            set!(Decode, tokens.o_stride = i64::MAX),
            INV,
            "o: 2 rows of stride",
        ),
        (
            Verify,
            "v stride x tokens wraps",
            set!(Verify, tokens.v_stride = 1 << 62),
            INV,
            "v: 4 rows of stride 4611686018427387904",
        ),
        (
            Cursors,
            "batch huge",
            set!(Cursors, batch = 1 << 20),
            INV,
            "batch = 1048576",
        ),
    ];
    cases.extend(rest);
    cases.extend(deferred_catalogue());
    cases.extend(buffered_catalogue());
    cases
}

/// The buffered speculative verify's entries (VB and its cursor kernel): the L-position ring, the
/// cursors, the corrections, the op and header.
fn buffered_catalogue() -> Vec<Named> {
    use Entry::{Buffered, VerifyBuffered};
    const INV: replayssm_status = REPLAYSSM_ERR_INVALID_ARGUMENT;
    vec![
        // VB's cursors, as it reads them (live slots only): the window must fit after the history.
        (
            VerifyBuffered,
            "cursor past L - len",
            |w, _| w.cursors.body_mut()[1] = 3,
            INV,
            "cursors[slots][0] = 3 (slot 1) is outside 0..=2 (cache_len 4 - window 2",
        ),
        (
            VerifyBuffered,
            "negative cursor",
            |w, _| w.cursors.body_mut()[3] = -1,
            INV,
            "cursors[slots][1] = -1 (slot 3) is outside 0..=2",
        ),
        (
            VerifyBuffered,
            "cursor i32::MIN",
            |w, _| w.cursors.body_mut()[3] = i32::MIN,
            INV,
            "cursors[slots][1] = -2147483648",
        ),
        (
            VerifyBuffered,
            "cursors NULL",
            set!(VerifyBuffered, cursors = ptr::null()),
            INV,
            "cursors is NULL",
        ),
        (
            VerifyBuffered,
            "ring_u NULL",
            set!(VerifyBuffered, ring_u = ptr::null_mut()),
            INV,
            "ring_u is NULL",
        ),
        (
            VerifyBuffered,
            "ring of 65 positions",
            set!(VerifyBuffered, verify.ring.window = 65),
            INV,
            "ring.window (L) = 65, must be in 1..=64: VB stages a slot's history in shared memory",
        ),
        (
            VerifyBuffered,
            "ring of 0 positions",
            set!(VerifyBuffered, verify.ring.window = 0),
            INV,
            "ring.window (L) = 0, must be in 1..=64",
        ),
        (
            VerifyBuffered,
            "ring smaller than max_seqlen",
            set!(VerifyBuffered, verify.ring.window = 1),
            INV,
            "window = 1 is smaller than max_seqlen = 2",
        ),
        (
            VerifyBuffered,
            "a tree (parent set)",
            |w, p| {
                if let Params::VerifyBuffered(q) = p {
                    q.verify.parent = w.parent.ptr();
                }
            },
            INV,
            "parent is set: VB verifies linear chains",
        ),
        (
            VerifyBuffered,
            "no ring",
            |_, p| {
                if let Params::VerifyBuffered(q) = p {
                    q.verify.ring.v = ptr::null_mut();
                    q.verify.ring.k = ptr::null_mut();
                    q.verify.ring.g = ptr::null_mut();
                    q.verify.ring.beta = ptr::null_mut();
                }
            },
            INV,
            "VB writes the new window after the history: set ring.v, ring.k, ring.g, ring.beta",
        ),
        (
            VerifyBuffered,
            "half a ring",
            set!(VerifyBuffered, verify.ring.beta = ptr::null_mut()),
            INV,
            "ring.v, ring.k, ring.g, ring.beta: set all four",
        ),
        (
            VerifyBuffered,
            "no block fits the shared memory",
            |_, p| {
                if let Params::VerifyBuffered(q) = p {
                    // KDA, K = 256, L = 64, T = 16 (sizes only: nothing is read past the checks).
                    q.verify.base.variant = 1;
                    q.verify.base.K = 256;
                    q.verify.tokens.q_stride = 256;
                    q.verify.tokens.k_stride = 256;
                    q.verify.ring.window = 64;
                    q.verify.max_seqlen = 16;
                }
            },
            INV,
            "cache_len = 64 with T = 16, K = 256, V = 8 (KDA): one VB block's shared memory exceeds",
        ),
        (
            VerifyBuffered,
            "slot out of range",
            |w, _| w.slots.body_mut()[1] = 4,
            INV,
            "slots[1] = 4 is out of range",
        ),
        (
            VerifyBuffered,
            "cu_seqlens not starting at 0",
            |w, _| w.cu.body_mut()[0] = 1,
            INV,
            "a token outside every request would get no output",
        ),
        (
            VerifyBuffered,
            "layer = num_layers",
            set!(VerifyBuffered, verify.base.layer = 2),
            INV,
            "layer = 2, must be in 0..=1",
        ),
        (
            VerifyBuffered,
            "flags set",
            set!(VerifyBuffered, flags = 4),
            INV,
            "flags = 0x4",
        ),
        (
            VerifyBuffered,
            "reserved set",
            set!(VerifyBuffered, verify.ring.reserved = 3),
            INV,
            "verify.ring.reserved = 3",
        ),
        (
            VerifyBuffered,
            "struct_size of the verify's struct",
            set!(
                VerifyBuffered,
                struct_size = std::mem::size_of::<replayssm_verify_params>() as u32
            ),
            REPLAYSSM_ERR_STRUCT_SIZE,
            "replayssm_verify_buffered_params.struct_size is 296",
        ),
        (
            VerifyBuffered,
            "the nested verify's struct_size",
            set!(VerifyBuffered, verify.struct_size = 0),
            REPLAYSSM_ERR_STRUCT_SIZE,
            "replayssm_verify_buffered_params.verify.struct_size is 0",
        ),
        // The cursor kernel: its op, sizes, per-op arrays and the cursors it reads.
        (
            Buffered,
            "op 3",
            set!(Buffered, op = 3),
            INV,
            "op (0 = COMMIT, 1 = FLUSH, 2 = RESET) = 3, must be in 0..=2",
        ),
        (
            Buffered,
            "T over the max",
            set!(Buffered, window = 17),
            INV,
            "window (T, the longest draft window of a step) = 17, must be in 1..=16",
        ),
        (
            Buffered,
            "T zero",
            set!(Buffered, window = 0),
            INV,
            "window (T, the longest draft window of a step) = 0",
        ),
        (
            Buffered,
            "L below 2 T",
            set!(Buffered, cache_len = 3),
            INV,
            "cache_len = 3 is below 2 T = 4",
        ),
        (
            Buffered,
            "L over 64",
            set!(Buffered, cache_len = 65),
            INV,
            "cache_len = 65, must be in 1..=64",
        ),
        (
            Buffered,
            "batch over the max",
            set!(Buffered, batch = 65536),
            INV,
            "batch = 65536, must be in 1..=65535",
        ),
        (
            Buffered,
            "cursors NULL",
            set!(Buffered, cursors = ptr::null_mut()),
            INV,
            "cursors is NULL",
        ),
        (
            Buffered,
            "COMMIT without accept_lens",
            set!(Buffered, accept_lens = ptr::null()),
            INV,
            "accept_lens is NULL",
        ),
        (
            Buffered,
            "FLUSH without flush_lens",
            |_, p| {
                if let Params::Buffered(q) = p {
                    q.op = replayssm_buffered_op::REPLAYSSM_BUFFERED_FLUSH as i32;
                    q.flush_lens = ptr::null_mut();
                }
            },
            INV,
            "flush_lens is NULL",
        ),
        (
            Buffered,
            "cursor past L - T",
            |w, _| w.cursors.body_mut()[3] = 3,
            INV,
            "cursors[slots][1] = 3 (slot 3) is outside 0..=2",
        ),
        (
            Buffered,
            "FLUSH of a negative cursor",
            |w, p| {
                w.cursors.body_mut()[1] = -5;
                if let Params::Buffered(q) = p {
                    q.op = replayssm_buffered_op::REPLAYSSM_BUFFERED_FLUSH as i32;
                }
            },
            INV,
            "cursors[slots][0] = -5",
        ),
        (
            Buffered,
            "accept length over T",
            |w, _| w.lens.body_mut()[1] = 3,
            INV,
            "accept_lens[1] = 3 is outside 0..=2",
        ),
        (
            Buffered,
            "slot out of range",
            |w, _| w.slots.body_mut()[0] = 4,
            INV,
            "slots[0] = 4 is out of range",
        ),
        (Buffered, "flags set", set!(Buffered, flags = 1), INV, "flags = 0x1"),
        (
            Buffered,
            "reserved set",
            set!(Buffered, reserved = 9),
            INV,
            "reserved = 9",
        ),
        (
            Buffered,
            "struct_size short",
            set!(Buffered, struct_size = 64),
            REPLAYSSM_ERR_STRUCT_SIZE,
            "replayssm_buffered_params.struct_size is 64",
        ),
    ]
}

/// Slot `s`'s entry of the pending table ([NS, 2 + WD]: n, half, WD ring positions).
fn entry(w: &mut World, s: usize) -> &mut [i32] {
    &mut w.pending.body_mut()[s * (2 + WD)..(s + 1) * (2 + WD)]
}

/// The deferred fold's entries (VF and the defer kernel): their pending table, two-window ring,
/// op and header.
fn deferred_catalogue() -> Vec<Named> {
    use Entry::*;
    const INV: replayssm_status = REPLAYSSM_ERR_INVALID_ARGUMENT;
    vec![
        // The pending table, as VF reads it (live slots only).
        (
            VerifyFold,
            "pending n over W",
            |w, _| entry(w, 1)[0] = 3,
            INV,
            "pending[slot 1].n = 3 records, must be in 0..=2",
        ),
        (
            VerifyFold,
            "pending n negative",
            |w, _| entry(w, 3)[0] = -1,
            INV,
            "pending[slot 3].n = -1 records, must be in 0..=2",
        ),
        (
            VerifyFold,
            "pending n = i32::MIN",
            |w, _| entry(w, 1)[0] = i32::MIN,
            INV,
            "pending[slot 1].n = -2147483648 records",
        ),
        (
            VerifyFold,
            "pending half 2",
            |w, _| entry(w, 1)[1] = 2,
            INV,
            "pending[slot 1].half = 2, must be 0 or 1",
        ),
        (
            VerifyFold,
            "pending half -1",
            |w, _| entry(w, 3)[1] = -1,
            INV,
            "pending[slot 3].half = -1, must be 0 or 1",
        ),
        (
            VerifyFold,
            "pending positions not increasing",
            |w, _| entry(w, 1).copy_from_slice(&[2, 0, 1, 0]),
            INV,
            "pending[slot 1] positions [1, 0]: each must be in half 0 (0..2) and increasing",
        ),
        (
            VerifyFold,
            "pending positions repeated",
            |w, _| entry(w, 1).copy_from_slice(&[2, 0, 1, 1]),
            INV,
            "pending[slot 1] positions [1, 1]",
        ),
        (
            VerifyFold,
            "pending position in the other half",
            |w, _| entry(w, 3)[2] = 1,
            INV,
            "pending[slot 3] positions [1]: each must be in half 1 (2..4) and increasing",
        ),
        (
            VerifyFold,
            "pending position past the ring",
            |w, _| entry(w, 3)[2] = 4,
            INV,
            "pending[slot 3] positions [4]",
        ),
        (
            VerifyFold,
            "pending position negative",
            |w, _| entry(w, 1)[2] = i32::MIN,
            INV,
            "pending[slot 1] positions [-2147483648, 1]",
        ),
        (
            VerifyFold,
            "pending NULL",
            set!(VerifyFold, pending = ptr::null()),
            INV,
            "pending is NULL",
        ),
        // The two-window ring.
        (
            VerifyFold,
            "window odd",
            set!(VerifyFold, verify.ring.window = 3),
            INV,
            "window = 3: the deferred ring holds two windows, so it must be 2 W with W in 1..=16",
        ),
        (
            VerifyFold,
            "W over the max",
            set!(VerifyFold, verify.ring.window = 34),
            INV,
            "window = 34: the deferred ring holds two windows",
        ),
        (
            VerifyFold,
            "W smaller than max_seqlen",
            set!(VerifyFold, verify.max_seqlen = 3),
            INV,
            "max_seqlen = 3 exceeds W = 2 (window / 2)",
        ),
        (
            VerifyFold,
            "window smaller than max_seqlen",
            set!(VerifyFold, verify.ring.window = 1),
            INV,
            "window = 1 is smaller than max_seqlen = 2",
        ),
        (
            VerifyFold,
            "no ring",
            |_, p| {
                if let Params::VerifyFold(q) = p {
                    q.verify.ring.v = ptr::null_mut();
                    q.verify.ring.k = ptr::null_mut();
                    q.verify.ring.g = ptr::null_mut();
                    q.verify.ring.beta = ptr::null_mut();
                }
            },
            INV,
            "VF writes the new window to the ring: set ring.v, ring.k, ring.g, ring.beta",
        ),
        (
            VerifyFold,
            "half a ring",
            set!(VerifyFold, verify.ring.g = ptr::null_mut()),
            INV,
            "ring.v, ring.k, ring.g, ring.beta: set all four",
        ),
        // The track, against the pending counts.
        (
            VerifyFold,
            "track step = the pending count",
            |w, _| w.track_steps.body_mut()[0] = 2,
            INV,
            "track_steps[0] = 2 is outside 0..2",
        ),
        (
            VerifyFold,
            "track slot with records pending",
            |w, _| entry(w, 0).copy_from_slice(&[1, 0, 0, -1]),
            INV,
            "track_slots[0] = 0 has 1 records pending (pending[0][0] = 1)",
        ),
        (
            VerifyFold,
            "track on a slot with nothing pending",
            |w, _| entry(w, 1)[0] = 0,
            INV,
            "track_steps[0] = 1 is outside 0..0: row 0 commits 0 steps",
        ),
        (
            VerifyFold,
            "track slot = a live slot",
            |w, _| w.track_slots.body_mut()[0] = 3,
            INV,
            "track_slots[0] = 3 is also slots[1]",
        ),
        (
            VerifyFold,
            "track slot out of range",
            |w, _| w.track_slots.body_mut()[0] = 4,
            INV,
            "track_slots[0] = 4 is out of range",
        ),
        (
            VerifyFold,
            "track_steps without track_slots",
            set!(VerifyFold, track_slots = ptr::null()),
            INV,
            "track_slots and track_steps: set both or neither",
        ),
        // The verify's own indices and fields.
        (
            VerifyFold,
            "parent of a later node",
            |w, _| w.parent.body_mut()[3] = 1,
            INV,
            "parent[3] = 1 (request 1, node 1)",
        ),
        (
            VerifyFold,
            "slot out of range",
            |w, _| w.slots.body_mut()[0] = 4,
            INV,
            "slots[0] = 4 is out of range",
        ),
        (
            VerifyFold,
            "layer = num_layers",
            set!(VerifyFold, verify.base.layer = 2),
            INV,
            "layer = 2, must be in 0..=1",
        ),
        (VerifyFold, "flags set", set!(VerifyFold, flags = 2), INV, "flags = 0x2"),
        (
            VerifyFold,
            "reserved set",
            set!(VerifyFold, verify.base.reserved = 7),
            INV,
            "reserved = 7",
        ),
        (
            VerifyFold,
            "struct_size of the verify's struct",
            set!(
                VerifyFold,
                struct_size = std::mem::size_of::<replayssm_verify_params>() as u32
            ),
            REPLAYSSM_ERR_STRUCT_SIZE,
            "replayssm_verify_fold_params.struct_size is 296",
        ),
        (
            VerifyFold,
            "v stride x tokens wraps",
            set!(VerifyFold, verify.tokens.v_stride = 1 << 62),
            INV,
            "v: 4 rows of stride 4611686018427387904",
        ),
        // The defer kernel: its op, sizes, per-op arrays and the table it reads.
        (
            Defer,
            "op 3",
            set!(Defer, op = 3),
            INV,
            "op (0 = COMMIT, 1 = GATHER, 2 = RESET) = 3, must be in 0..=2",
        ),
        (
            Defer,
            "op negative",
            set!(Defer, op = i32::MIN),
            INV,
            "op (0 = COMMIT, 1 = GATHER, 2 = RESET) = -2147483648",
        ),
        (
            Defer,
            "W over the max",
            set!(Defer, window = 17),
            INV,
            "window (W) = 17, must be in 1..=16",
        ),
        (
            Defer,
            "W zero",
            set!(Defer, window = 0),
            INV,
            "window (W) = 0, must be in 1..=16",
        ),
        (
            Defer,
            "batch over the max",
            set!(Defer, batch = 65536),
            INV,
            "batch = 65536, must be in 1..=65535",
        ),
        (
            Defer,
            "num_slots zero",
            set!(Defer, num_slots = 0),
            INV,
            "num_slots = 0, must be at least 1",
        ),
        (
            Defer,
            "pending NULL",
            set!(Defer, pending = ptr::null_mut()),
            INV,
            "pending is NULL",
        ),
        (
            Defer,
            "GATHER without paths",
            |_, p| {
                if let Params::Defer(q) = p {
                    q.op = replayssm_defer_op::REPLAYSSM_DEFER_GATHER as i32;
                    q.paths = ptr::null_mut();
                }
            },
            INV,
            "paths is NULL",
        ),
        (
            Defer,
            "COMMIT with neither lengths nor paths",
            set!(Defer, accept_lens = ptr::null()),
            INV,
            "COMMIT: give exactly one of accept_lens and accept_paths",
        ),
        (
            Defer,
            "COMMIT with both lengths and paths",
            |w, p| {
                if let Params::Defer(q) = p {
                    q.accept_paths = w.paths.ptr();
                    q.path_width = WD as i32;
                }
            },
            INV,
            "COMMIT: give exactly one of accept_lens and accept_paths",
        ),
        (
            Defer,
            "path_width without paths",
            set!(Defer, path_width = 2),
            INV,
            "path_width must be 0 without accept_paths",
        ),
        (
            Defer,
            "path_width over W",
            |w, p| {
                if let Params::Defer(q) = p {
                    q.accept_lens = ptr::null();
                    q.accept_paths = w.paths.ptr();
                    q.path_width = 3;
                }
            },
            INV,
            "path_width (columns of accept_paths) = 3, must be in 1..=2",
        ),
        (
            Defer,
            "accept length over W",
            |w, _| w.lens.body_mut()[1] = 3,
            INV,
            "accept_lens[1] = 3 is outside 0..=2",
        ),
        (
            Defer,
            "accepted path not increasing",
            |w, p| {
                w.paths.body_mut()[..2].copy_from_slice(&[1, 0]);
                if let Params::Defer(q) = p {
                    q.accept_lens = ptr::null();
                    q.accept_paths = w.paths.ptr();
                    q.path_width = WD as i32;
                }
            },
            INV,
            "accept_paths[0][1] = 0",
        ),
        (
            Defer,
            "slot out of range",
            |w, _| w.slots.body_mut()[1] = -2,
            INV,
            "slots[1] = -2 is out of range",
        ),
        (
            Defer,
            "COMMIT over a half that is neither 0 nor 1",
            |w, _| entry(w, 3)[1] = 9,
            INV,
            "pending[slot 3].half = 9, must be 0 or 1",
        ),
        (
            Defer,
            "GATHER of a count over W",
            |w, p| {
                entry(w, 1)[0] = 5;
                if let Params::Defer(q) = p {
                    q.op = replayssm_defer_op::REPLAYSSM_DEFER_GATHER as i32;
                }
            },
            INV,
            "pending[slot 1].n = 5 records, must be in 0..=2",
        ),
        (
            Defer,
            "GATHER of positions out of order",
            |w, p| {
                entry(w, 1).copy_from_slice(&[2, 0, 1, 0]);
                if let Params::Defer(q) = p {
                    q.op = replayssm_defer_op::REPLAYSSM_DEFER_GATHER as i32;
                }
            },
            INV,
            "pending[slot 1] positions [1, 0]",
        ),
        (
            Defer,
            "flags set",
            set!(Defer, flags = 1 << 31),
            INV,
            "flags = 0x80000000",
        ),
        (Defer, "reserved set", set!(Defer, reserved = -1), INV, "reserved = -1"),
        (
            Defer,
            "struct_size short",
            set!(Defer, struct_size = 64),
            REPLAYSSM_ERR_STRUCT_SIZE,
            "replayssm_defer_params.struct_size is 64",
        ),
    ]
}

#[test]
fn every_catalogued_bad_input_is_refused_with_its_field_and_nothing_written() {
    let world = World::new(7);
    // The fixture itself is valid for every entry (the campaign breaks one thing at a time).
    for e in ENTRIES {
        let (st, msg, w) = run(&world, |_, _| {}, e);
        assert_eq!(st, REPLAYSSM_OK, "{e:?}: the valid fixture was refused: {msg}");
        assert_eq!(w.word.body()[0], 0, "{e:?}: the valid fixture set device error bits");
    }
    let cases = catalogue();
    let n = cases.len();
    for (entry, what, edit, status, needle) in cases {
        let (st, msg, _) = run(&world, edit, entry);
        assert_eq!(st, status, "{entry:?} {what}: {msg}");
        assert!(
            msg.contains(needle),
            "{entry:?} {what}: message {msg:?} lacks {needle:?}"
        );
    }
    say(&format!("C ABI catalogue: {n} inputs, 0 crashes, 0 silent accepts"));
}

/// The same index garbage given to the kernel layer (no host checks, as CUDA under graph replay)
/// is flagged in the device error word, never written outside a buffer, and leaves the rows it
/// skipped untouched.
/// A device-side bad input: entry, what, edit, expected error-word bits.
type Flagged = (Entry, &'static str, Edit, u32);

fn device_cases() -> Vec<Flagged> {
    let dup = ffi::RSSM_DEVERR_DUPLICATE_SLOT;
    let step = ffi::RSSM_DEVERR_TRACK_STEP;
    // Every entry, its two rows on one live slot (3). VF also flags row 0's track: a skipped row
    // commits no step to snapshot (F drops it unflagged: its track check passes before the
    // duplicate is found).
    let mut cases: Vec<Flagged> = ENTRIES
        .iter()
        .map(|&e| {
            let bits = if e == Entry::VerifyFold { dup | step } else { dup };
            (e, "duplicate slots", same_slot as Edit, bits)
        })
        .collect();
    let rest: Vec<Flagged> = vec![
        (
            Entry::Fold,
            "track slot = a live slot",
            |w, _| w.track_slots.body_mut()[0] = 3,
            dup,
        ),
        (
            Entry::Fold,
            "duplicate track slots",
            |w, _| {
                w.track_slots.body_mut().copy_from_slice(&[2, 2]);
                w.track_steps.body_mut().copy_from_slice(&[0, 0]);
            },
            dup,
        ),
        (
            Entry::Fold,
            "track step past the commit",
            |w, _| w.track_steps.body_mut()[0] = 2,
            step,
        ),
        (
            Entry::Fold,
            "track on a row committing nothing",
            |w, _| w.lens.body_mut()[0] = 0,
            step,
        ),
        (
            Entry::Fold,
            "track on a null row",
            |w, _| w.slots.body_mut()[0] = -1,
            step,
        ),
    ];
    cases.extend(rest);
    cases.extend(deferred_device_cases().into_iter().map(|(case, _)| case));
    cases.extend(buffered_device_cases());
    cases
}

/// The buffered verify's device-side garbage: VB and the cursor kernel flag a cursor (or accept
/// length) out of range and skip that row.
fn buffered_device_cases() -> Vec<Flagged> {
    use Entry::{Buffered, VerifyBuffered};
    let len = ffi::RSSM_DEVERR_BAD_LENGTH;
    let range = ffi::RSSM_DEVERR_SLOT_OUT_OF_RANGE;
    vec![
        (
            VerifyBuffered,
            "cursor past L - len",
            |w, _| w.cursors.body_mut()[1] = 3,
            len,
        ),
        (
            VerifyBuffered,
            "negative cursor",
            |w, _| w.cursors.body_mut()[3] = -1,
            len,
        ),
        (
            VerifyBuffered,
            "slot out of range",
            |w, _| w.slots.body_mut()[0] = 4,
            range,
        ),
        (Buffered, "cursor past L - T", |w, _| w.cursors.body_mut()[3] = 3, len),
        (Buffered, "accept length over T", |w, _| w.lens.body_mut()[0] = 3, len),
        (Buffered, "slot out of range", |w, _| w.slots.body_mut()[1] = -2, range),
    ]
}

/// The deferred fold's device-side garbage (VF's pending entries and track, the defer kernel's
/// table, lengths and paths), each with the row the kernel must skip (None: only a track).
fn deferred_device_cases() -> Vec<(Flagged, Option<usize>)> {
    use Entry::{Defer, VerifyFold};
    let len = ffi::RSSM_DEVERR_BAD_LENGTH;
    let tree = ffi::RSSM_DEVERR_BAD_TREE;
    let step = ffi::RSSM_DEVERR_TRACK_STEP;
    let dup = ffi::RSSM_DEVERR_DUPLICATE_SLOT;
    let range = ffi::RSSM_DEVERR_SLOT_OUT_OF_RANGE;
    fn gather(p: &mut Params) {
        if let Params::Defer(q) = p {
            q.op = replayssm_defer_op::REPLAYSSM_DEFER_GATHER as i32;
        }
    }
    vec![
        // VF, slot 3 (row 1, untracked): the request is skipped, row 0 served as with a clean table.
        (
            (VerifyFold, "pending n over W", |w, _| entry(w, 3)[0] = 3, len),
            Some(1),
        ),
        (
            (VerifyFold, "pending n negative", |w, _| entry(w, 3)[0] = -7, len),
            Some(1),
        ),
        ((VerifyFold, "pending half 2", |w, _| entry(w, 3)[1] = 2, len), Some(1)),
        (
            (
                VerifyFold,
                "pending half i32::MIN",
                |w, _| entry(w, 3)[1] = i32::MIN,
                len,
            ),
            Some(1),
        ),
        (
            (
                VerifyFold,
                "pending position in the other half",
                |w, _| entry(w, 3)[2] = 0,
                tree,
            ),
            Some(1),
        ),
        (
            (
                VerifyFold,
                "pending position past the ring",
                |w, _| entry(w, 3)[2] = i32::MAX,
                tree,
            ),
            Some(1),
        ),
        (
            (
                VerifyFold,
                "pending position negative",
                |w, _| entry(w, 3)[2] = -1,
                tree,
            ),
            Some(1),
        ),
        // Slot 1 (row 0, tracked): skipped, and its track with it (nothing committed to snapshot).
        (
            (
                VerifyFold,
                "pending positions out of order on the tracked row",
                |w, _| entry(w, 1).copy_from_slice(&[2, 0, 1, 0]),
                tree | step,
            ),
            Some(0),
        ),
        (
            (
                VerifyFold,
                "pending n = i32::MAX on the tracked row",
                |w, _| entry(w, 1)[0] = i32::MAX,
                len | step,
            ),
            Some(0),
        ),
        (
            (
                VerifyFold,
                "track step past the pending count",
                |w, _| w.track_steps.body_mut()[0] = 2,
                step,
            ),
            None,
        ),
        (
            (
                VerifyFold,
                "track slot = a live slot",
                |w, _| w.track_slots.body_mut()[0] = 3,
                dup,
            ),
            None,
        ),
        (
            (
                VerifyFold,
                "track slot with records pending",
                |w, _| entry(w, 0).copy_from_slice(&[1, 0, 0, -1]),
                ffi::RSSM_DEVERR_TRACK_SLOT,
            ),
            None,
        ),
        (
            (
                VerifyFold,
                "parent of a later node",
                |w, _| w.parent.body_mut()[3] = 1,
                tree,
            ),
            Some(1),
        ),
        // The defer kernel: the flagged row's entry (and gathered paths) as before, the other row
        // committed or gathered as with clean inputs.
        ((Defer, "COMMIT over half 9", |w, _| entry(w, 3)[1] = 9, len), Some(1)),
        ((Defer, "COMMIT over half -1", |w, _| entry(w, 1)[1] = -1, len), Some(0)),
        (
            (Defer, "COMMIT of a length over W", |w, _| w.lens.body_mut()[1] = 3, len),
            Some(1),
        ),
        (
            (
                Defer,
                "COMMIT of a negative length",
                |w, _| w.lens.body_mut()[0] = -1,
                len,
            ),
            Some(0),
        ),
        (
            (
                Defer,
                "COMMIT of a path out of order",
                |w, p| {
                    w.paths.body_mut()[..2].copy_from_slice(&[1, 0]);
                    if let Params::Defer(q) = p {
                        q.accept_lens = ptr::null();
                        q.accept_paths = w.paths.ptr();
                        q.path_width = WD as i32;
                    }
                },
                tree,
            ),
            Some(0),
        ),
        (
            (
                Defer,
                "GATHER of a count over W",
                |w, p| {
                    entry(w, 1)[0] = 5;
                    gather(p);
                },
                len,
            ),
            Some(0),
        ),
        (
            (
                Defer,
                "GATHER of a half 3",
                |w, p| {
                    entry(w, 3)[1] = 3;
                    gather(p);
                },
                len,
            ),
            Some(1),
        ),
        (
            (
                Defer,
                "GATHER of a position in the other half",
                |w, p| {
                    entry(w, 3)[2] = 0;
                    gather(p);
                },
                tree,
            ),
            Some(1),
        ),
        (
            (
                Defer,
                "GATHER of positions out of order",
                |w, p| {
                    entry(w, 1).copy_from_slice(&[2, 0, 1, 0]);
                    gather(p);
                },
                tree,
            ),
            Some(0),
        ),
        (
            (Defer, "slot out of range", |w, _| w.slots.body_mut()[1] = 4, range),
            Some(1),
        ),
        // Last: the host refuses these (checks::params::defer reads the whole entry for COMMIT
        // too), but the kernel's COMMIT checks only the half and overwrites the entry: a slot
        // whose records were never folded (VF skipped it) would lose them silently on CUDA.
        (
            (Defer, "COMMIT over a count over W", |w, _| entry(w, 1)[0] = 3, len),
            Some(0),
        ),
        (
            (
                Defer,
                "COMMIT over positions out of order",
                |w, _| entry(w, 1).copy_from_slice(&[2, 0, 1, 0]),
                tree,
            ),
            Some(0),
        ),
    ]
}

#[test]
fn the_kernels_flag_duplicate_slots_and_bad_track_steps_and_skip_those_rows() {
    let world = World::new(11);
    let dup = ffi::RSSM_DEVERR_DUPLICATE_SLOT;
    let per_slot = HV * V * K;
    for (entry, what, edit, bit) in device_cases() {
        let mut w = world.clone();
        let mut p = entry.params(&mut w);
        edit(&mut w, &mut p);
        let before = w.clone();
        // SAFETY: as in `run`; only device-side index values are garbage.
        let st = unsafe { p.launch_kernel() };
        assert_eq!(st, ffi::rssm_status_RSSM_OK, "{entry:?} {what}");
        w.guards_intact()
            .unwrap_or_else(|b| panic!("{entry:?} {what}: wrote outside {b}"));
        let word = w.word.body()[0];
        assert_eq!(word, bit, "{entry:?} {what}: error word {word:#x}");
        // Every row on a duplicated slot was skipped: that slot's checkpoints (every layer), ring
        // records and cursor are as before.
        let slots = w.slots.body().to_vec();
        if bit & dup != 0 && slots[0] == slots[1] {
            let s = slots[0] as usize;
            for l in 0..NL {
                let at = (l * NS + s) * per_slot;
                let same = w.state.body()[at..at + per_slot]
                    .iter()
                    .zip(&before.state.body()[at..at + per_slot])
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{entry:?} {what}: slot {s} of layer {l} written");
            }
            assert!(
                w.ring_v.body() == before.ring_v.body(),
                "{entry:?} {what}: ring written"
            );
            assert!(
                w.ring_d.body() == before.ring_d.body(),
                "{entry:?} {what}: decode ring written"
            );
            assert!(w.cursors == before.cursors, "{entry:?} {what}: cursor written");
            assert!(w.pending == before.pending, "{entry:?} {what}: pending entry written");
        }
        if entry == Entry::Fold && bit != dup {
            // No snapshot was stored in the track slot 0 (or 2): its checkpoints are unchanged.
            for t in [0usize, 2] {
                for l in 0..NL {
                    let at = (l * NS + t) * per_slot;
                    assert!(
                        w.state.body()[at..at + per_slot] == before.state.body()[at..at + per_slot],
                        "{entry:?} {what}: track slot {t} written"
                    );
                }
            }
        }
    }
}

/// Tokens outside every request (cu_seqlens not starting at 0, or ending before num_tokens): on
/// the kernel layer (no host checks, as CUDA under graph replay) BAD_SEQLENS is flagged, the first
/// (last) request is skipped, and its outputs and the uncovered tokens' are zero, never left as
/// they were (NaN here), on every entry that takes cu_seqlens and each verify implementation.
#[test]
fn tokens_outside_every_request_are_flagged_and_zeroed_by_the_kernels() {
    let world = World::new(17);
    let row = HV * V;
    let edits: [(&str, Edit, std::ops::Range<usize>); 3] = [
        ("cu_seqlens[0] = 1", |w, _| w.cu.body_mut()[0] = 1, 0..2),
        ("cu_seqlens[2] = 3", |w, _| w.cu.body_mut()[2] = 3, 2..4),
        (
            "cu_seqlens = [1, 2, 2]",
            |w, _| w.cu.body_mut().copy_from_slice(&[1, 2, 2]),
            0..4,
        ),
    ];
    let mut n = 0;
    // (entry, staged): V runs both implementations.
    for (entry, staged) in [
        (Entry::Recurrent, false),
        (Entry::Verify, false),
        (Entry::Verify, true),
        (Entry::VerifyFold, false),
        (Entry::VerifyBuffered, false),
    ] {
        for (what, edit, uncovered) in &edits {
            let mut w = world.clone();
            w.o.body_mut().fill(f32::NAN);
            let mut p = entry.params(&mut w);
            edit(&mut w, &mut p);
            // SAFETY: as in `run`; only device-side index values are garbage.
            let st = unsafe {
                match (&p, staged) {
                    (Params::Verify(v), true) => {
                        let mut k = v.kernel();
                        k.base.impl_ = ffi::rssm_impl_RSSM_IMPL_STAGED as i32;
                        k.base.block_rows = 16;
                        ffi::rssm_emu_verify(&k, ptr::null_mut())
                    }
                    _ => p.launch_kernel(),
                }
            };
            assert_eq!(st, ffi::rssm_status_RSSM_OK, "{entry:?} staged={staged} {what}");
            w.guards_intact()
                .unwrap_or_else(|b| panic!("{entry:?} {what}: wrote outside {b}"));
            let word = w.word.body()[0];
            assert_ne!(
                word & ffi::RSSM_DEVERR_BAD_SEQLENS,
                0,
                "{entry:?} staged={staged} {what}: error word {word:#x}"
            );
            let o = w.o.body();
            for t in uncovered.clone() {
                assert!(
                    o[t * row..(t + 1) * row].iter().all(|x| x.to_bits() == 0),
                    "{entry:?} staged={staged} {what}: token {t} outside every request: {:?}",
                    &o[t * row..(t + 1) * row]
                );
            }
            n += 1;
        }
    }
    say(&format!(
        "uncovered tokens: {n} kernel launches, each flagged and zeroed"
    ));
}

/// The deferred fold's kernels on garbage (the kernel layer: no host checks): the bit flagged,
/// the flagged row skipped (VF: its checkpoints, ring records and track slot as before, its
/// outputs zero; defer: its pending entry as before, its gathered paths -1), the other row served
/// exactly as with clean inputs, nothing written outside a buffer.
#[test]
fn the_deferred_fold_flags_garbage_pending_entries_and_skips_that_row() {
    let world = World::new(13);
    // Runs `edit` through the kernel layer; with `clean`, the same op on clean inputs instead
    // (the same lengths or paths form): the reference of the row that is not skipped.
    let launch = |entry: Entry, edit: Edit, clean: bool| {
        let mut w = world.clone();
        let mut p = entry.params(&mut w);
        edit(&mut w, &mut p);
        if clean {
            let mut c = world.clone();
            let mut q = entry.params(&mut c);
            if let (Params::Defer(a), Params::Defer(b)) = (&p, &mut q) {
                b.op = a.op;
                if !a.accept_paths.is_null() {
                    c.paths.body_mut()[..2 * WD].copy_from_slice(&[0, 1, -1, -1]);
                    b.accept_lens = ptr::null();
                    b.accept_paths = c.paths.ptr();
                    b.path_width = WD as i32;
                }
            }
            (w, p) = (c, q);
        }
        let before = w.clone();
        // SAFETY: as in `run`; only device-side index values are garbage.
        let st = unsafe { p.launch_kernel() };
        assert_eq!(st, ffi::rssm_status_RSSM_OK, "{entry:?}: launch");
        w.guards_intact()
            .unwrap_or_else(|b| panic!("{entry:?}: wrote outside {b}"));
        (p, before, w)
    };
    let per_slot = HV * V * K;
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
    let state_of = |w: &World, l: usize, s: usize| bits(&w.state.body()[(l * NS + s) * per_slot..][..per_slot]);
    // Each ring's records of slot s in layer l ([NL, NS, rows per slot]).
    let ring_of = |w: &World, l: usize, s: usize| -> Vec<Vec<u32>> {
        [
            (&w.ring_v, HV * W * V),
            (&w.ring_k, H * W * K),
            (&w.ring_g, HV * W),
            (&w.ring_beta, HV * W),
        ]
        .iter()
        .map(|(r, n)| bits(&r.body()[(l * NS + s) * n..][..*n]))
        .collect()
    };
    let e = 2 + WD;
    let cases = deferred_device_cases();
    let n = cases.len();
    for ((entry, what, edit, bit), skipped) in cases {
        let (p, before, w) = launch(entry, edit, false);
        let word = w.word.body()[0];
        assert_eq!(word, bit, "{entry:?} {what}: error word {word:#x}");
        let (_, _, clean) = launch(entry, edit, true);
        assert_eq!(clean.word.body()[0], 0, "{entry:?} {what}: the clean run flagged");
        let gather = matches!(p, Params::Defer(q) if q.op == replayssm_defer_op::REPLAYSSM_DEFER_GATHER as i32);
        let (slots, cu) = (w.slots.body(), w.cu.body());
        for r in 0..B {
            let Ok(s) = usize::try_from(slots[r]) else { continue };
            if s >= NS {
                continue;
            }
            let skip = skipped == Some(r);
            if entry == Entry::VerifyFold {
                let tokens = cu[r] as usize * HV * V..cu[r + 1] as usize * HV * V;
                let o = bits(&w.o.body()[tokens.clone()]);
                if skip {
                    for l in 0..NL {
                        assert!(
                            state_of(&w, l, s) == state_of(&before, l, s),
                            "{what}: slot {s} of layer {l} written"
                        );
                        assert!(
                            ring_of(&w, l, s) == ring_of(&before, l, s),
                            "{what}: slot {s}'s ring records of layer {l} written"
                        );
                    }
                    assert!(
                        o.iter().all(|&x| x == 0),
                        "{what}: outputs of the skipped request {r} not zero"
                    );
                } else {
                    assert!(
                        state_of(&w, 1, s) == state_of(&clean, 1, s),
                        "{what}: row {r}'s fold changed"
                    );
                    assert!(
                        ring_of(&w, 1, s) == ring_of(&clean, 1, s),
                        "{what}: row {r}'s ring records changed"
                    );
                    assert!(o == bits(&clean.o.body()[tokens]), "{what}: row {r}'s outputs changed");
                }
            } else {
                let entry_of = |x: &World| x.pending.body()[s * e..(s + 1) * e].to_vec();
                let row_of = |x: &World| x.paths.body()[r * WD..(r + 1) * WD].to_vec();
                if skip {
                    assert_eq!(
                        entry_of(&w),
                        entry_of(&before),
                        "{what}: the skipped slot {s}'s entry written"
                    );
                } else {
                    assert_eq!(
                        entry_of(&w),
                        entry_of(&clean),
                        "{what}: slot {s}'s entry differs from a clean run"
                    );
                }
                if !gather {
                    assert_eq!(row_of(&w), row_of(&before), "{what}: COMMIT wrote paths");
                } else if skip {
                    assert_eq!(row_of(&w), [-1; WD], "{what}: the skipped row {r} gathered");
                } else {
                    assert_eq!(row_of(&w), row_of(&clean), "{what}: row {r} gathered");
                }
            }
        }
        if entry == Entry::VerifyFold && bit & ffi::RSSM_DEVERR_TRACK_STEP != 0 {
            // No snapshot was stored in the track slot (0).
            for l in 0..NL {
                assert!(
                    state_of(&w, l, 0) == state_of(&before, l, 0),
                    "{what}: track slot 0 written"
                );
            }
        }
    }
    say(&format!(
        "deferred fold kernel layer: {n} garbage inputs flagged, their rows skipped"
    ));
}

/// What a campaign input breaks and what the entry must do with it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Expect {
    /// Outside the documented limits: must be refused.
    Refuse,
    /// Device-side index values: the host checks decide, and must agree with the kernels.
    Indices,
    /// Still within the buffers (a smaller size, an optional pointer dropped): either outcome,
    /// but an accepted call must stay inside its buffers and set no device error bit.
    Either,
}

fn pick<T: Copy>(rng: &mut ChaCha8Rng, xs: &[T]) -> T {
    xs[rng.gen_range(0..xs.len())]
}

/// Integers a garbage field tends to hold.
fn garbage_i32(rng: &mut ChaCha8Rng) -> i32 {
    match rng.gen_range(0..4) {
        0 => pick(rng, &[i32::MIN, -65536, -2, -1, 0, 1 << 16, 65537, 1 << 30, i32::MAX]),
        1 => rng.gen_range(-3..12),
        2 => rng.gen(),
        _ => -(rng.gen_range(1..100)),
    }
}

/// Breaks one scalar field of `p` (chosen by `rng`) to a value outside its documented limits,
/// or shrinks a size (within the buffers); returns what the entry must do.
fn mutate_field(p: &mut Params, rng: &mut ChaCha8Rng) -> Expect {
    // Fields every entry has that are refused outright when out of range.
    macro_rules! dims {
        ($q:expr, $($b:ident).+) => {{
            let q = $q;
            match rng.gen_range(0..10) {
                0 => q.$($b).+.H = pick(rng, &[0, -1, i32::MIN, 3]),
                1 => q.$($b).+.HV = pick(rng, &[0, -2, 65536, i32::MAX]),
                2 => q.$($b).+.K = pick(rng, &[0, 16, 33, 48, 512, -32, i32::MAX]),
                3 => q.$($b).+.V = pick(rng, &[0, -8, 65537, i32::MAX]),
                4 => q.$($b).+.dtype = pick(rng, &[-1, 3, 7, i32::MAX]),
                5 => q.$($b).+.variant = pick(rng, &[-1, 2, i32::MIN]),
                6 => q.$($b).+.qk_l2norm = pick(rng, &[-1, 2, 255]),
                7 => q.flags = rng.gen_range(1..=u32::MAX),
                8 => q.struct_size = pick(rng, &[0, 4, 8, q.struct_size + 8, q.struct_size - 8, u32::MAX]),
                _ => {
                    // A smaller V stays inside every buffer.
                    q.$($b).+.V = rng.gen_range(1..V as i32);
                    return Expect::Either;
                }
            }
            Expect::Refuse
        }};
    }
    macro_rules! tokens {
        ($q:expr, $rows:expr, $($t:ident).+; $($b:ident).+) => {{
            let q = $q;
            match rng.gen_range(0..8) {
                0 => q.$($t).+.q = ptr::null(),
                1 => q.$($t).+.v = ptr::null(),
                2 => q.$($t).+.o = ptr::null_mut(),
                3 => q.$($t).+.a = q.$($t).+.g.cast(),  // both gate forms
                4 => q.$($t).+.g = ptr::null(), // half a gate
                5 => q.$($t).+.scale = pick(rng, &[f32::NAN, f32::INFINITY, -f32::INFINITY]),
                6 => {
                    let s = pick(rng, &[-1i64, 0, 1, i64::MIN, i64::MAX, 1 << 62, i64::MAX / 3]);
                    match rng.gen_range(0..4) {
                        0 => q.$($t).+.q_stride = s,
                        1 => q.$($t).+.k_stride = s,
                        2 => q.$($t).+.v_stride = s,
                        _ => q.$($t).+.o_stride = s,
                    }
                }
                _ => q.$($b).+.error_word = ptr::null_mut(), // optional: no device word
            }
            if q.$($b).+.error_word.is_null() {
                Expect::Either
            } else {
                Expect::Refuse
            }
        }};
    }
    match p {
        Params::Recurrent(q) => match rng.gen_range(0..4) {
            0 => dims!(q, base),
            1 => tokens!(q, N, tokens; base),
            2 => {
                match rng.gen_range(0..6) {
                    0 => q.base.batch = pick(rng, &[0, -1, 65536, i32::MAX]),
                    1 => q.num_tokens = pick(rng, &[-1, i32::MIN]),
                    2 => q.max_seqlen = pick(rng, &[0, -5]),
                    3 => q.base.num_slots = pick(rng, &[0, -1, i32::MIN]),
                    4 => q.write_state = pick(rng, &[2, -1, 77]),
                    // No dtype: the rule names record_dtype, its value and the three dtypes.
                    _ => q.record_dtype = pick(rng, &[3, -1, 1 << 20, i32::MIN]),
                }
                Expect::Refuse
            }
            _ => {
                match rng.gen_range(0..3) {
                    0 => q.snapshots = ptr::null_mut(),
                    1 => q.write_state = 0,
                    _ => q.base.num_slots = rng.gen_range(1..NS as i32), // may orphan a live slot
                }
                Expect::Either
            }
        },
        Params::Verify(q) => match rng.gen_range(0..4) {
            0 => dims!(q, base),
            1 => tokens!(q, N, tokens; base),
            2 => {
                match rng.gen_range(0..8) {
                    0 => q.base.batch = pick(rng, &[0, -1, 65536]),
                    1 => q.max_seqlen = pick(rng, &[0, 17, -1, i32::MAX]),
                    2 => q.base.layer = pick(rng, &[-1, NL as i32, i32::MAX]),
                    3 => q.base.num_layers = pick(rng, &[0, -1]),
                    4 => q.ring.window = pick(rng, &[0, -4, 1]),
                    5 => q.ring.k = ptr::null_mut(),
                    6 => q.base.slots = ptr::null(),
                    _ => q.base.reserved = 1,
                }
                Expect::Refuse
            }
            _ => {
                match rng.gen_range(0..3) {
                    0 => q.parent = ptr::null(), // a chain instead of a tree
                    1 => {
                        q.ring.v = ptr::null_mut();
                        q.ring.k = ptr::null_mut();
                        q.ring.g = ptr::null_mut();
                        q.ring.beta = ptr::null_mut();
                    }
                    _ => q.base.layer = 0,
                }
                Expect::Either
            }
        },
        Params::Fold(q) => match rng.gen_range(0..3) {
            0 => dims!(q, base),
            1 => {
                match rng.gen_range(0..9) {
                    0 => q.base.batch = pick(rng, &[0, -1, 65536]),
                    1 => q.base.num_layers = pick(rng, &[0, -1, 1 << 16, i32::MAX]),
                    2 => q.ring.window = pick(rng, &[0, -1, i32::MIN]),
                    3 => q.base.state = ptr::null_mut(),
                    4 => q.ring.beta = ptr::null_mut(),
                    5 => q.accept_lens = ptr::null(),
                    6 => q.track_steps = ptr::null(),
                    7 => q.path_width = pick(rng, &[1, -1, 5]),
                    _ => q.base.num_slots = pick(rng, &[0, -7]),
                }
                Expect::Refuse
            }
            _ => {
                match rng.gen_range(0..3) {
                    0 => {
                        q.track_slots = ptr::null();
                        q.track_steps = ptr::null();
                    }
                    1 => q.base.num_layers = 1,
                    _ => q.base.error_word = ptr::null_mut(),
                }
                Expect::Either
            }
        },
        Params::Replay(q) => match rng.gen_range(0..3) {
            0 => dims!(q, base),
            1 => {
                match rng.gen_range(0..5) {
                    0 => q.base.batch = pick(rng, &[0, -1, 1 << 16]),
                    1 => q.base.layer = pick(rng, &[-1, NL as i32, i32::MIN]),
                    2 => q.counts = ptr::null(),
                    3 => q.ring.window = pick(rng, &[0, -1]),
                    _ => q.ring.v = ptr::null_mut(),
                }
                Expect::Refuse
            }
            _ => {
                q.base.layer = 0;
                Expect::Either
            }
        },
        Params::Decode(q, materialize) => match rng.gen_range(0..3) {
            0 => dims!(q, base),
            1 if !*materialize => tokens!(q, B, tokens; base),
            _ => {
                match rng.gen_range(0..7) {
                    0 => q.base.batch = pick(rng, &[0, -1, 65536]),
                    1 => q.cache_len = pick(rng, &[0, -1, 65537, i32::MAX]),
                    2 => q.positions = ptr::null(),
                    3 => q.ring_d = ptr::null_mut(),
                    4 => {
                        // Materialise replays every layer: it ignores `layer`.
                        q.base.layer = pick(rng, &[-1, NL as i32]);
                        if *materialize {
                            return Expect::Either;
                        }
                    }
                    5 => q.base.num_layers = pick(rng, &[0, -3]),
                    _ => q.ring_dtype = pick(rng, &[3, -1, 1 << 20, i32::MIN]),
                }
                Expect::Refuse
            }
        },
        Params::VerifyFold(q) => match rng.gen_range(0..4) {
            0 => dims!(q, verify.base),
            1 => tokens!(q, N, verify.tokens; verify.base),
            2 => {
                match rng.gen_range(0..10) {
                    0 => q.verify.base.batch = pick(rng, &[0, -1, 65536]),
                    // Over W = window / 2, over the verify's limit, or not positive.
                    1 => q.verify.max_seqlen = pick(rng, &[0, 3, 17, -1, i32::MAX]),
                    2 => q.verify.base.layer = pick(rng, &[-1, NL as i32, i32::MAX]),
                    3 => q.verify.base.num_layers = pick(rng, &[0, -1, 1 << 20]),
                    // Odd, W over the max, W under max_seqlen, or not positive (never a larger
                    // even window: the buffers hold 2 WD positions).
                    4 => q.verify.ring.window = pick(rng, &[0, -4, 1, 2, 3, 5, 34, i32::MAX, i32::MIN]),
                    5 => match rng.gen_range(0..3) {
                        0 => q.verify.ring.k = ptr::null_mut(),
                        1 => {
                            q.verify.ring.v = ptr::null_mut();
                            q.verify.ring.k = ptr::null_mut();
                            q.verify.ring.g = ptr::null_mut();
                            q.verify.ring.beta = ptr::null_mut();
                        }
                        _ => q.verify.base.state = ptr::null_mut(),
                    },
                    6 => q.pending = ptr::null(),
                    7 => {
                        if rng.gen_bool(0.5) {
                            q.track_slots = ptr::null();
                        } else {
                            q.track_steps = ptr::null();
                        }
                    }
                    8 => q.verify.base.slots = ptr::null(),
                    _ => q.verify.base.reserved = garbage_i32(rng) | 1,
                }
                Expect::Refuse
            }
            _ => {
                match rng.gen_range(0..4) {
                    0 => q.verify.parent = ptr::null(), // a chain instead of a tree
                    1 => {
                        q.track_slots = ptr::null();
                        q.track_steps = ptr::null();
                    }
                    2 => q.verify.base.layer = 0,
                    _ => q.verify.base.num_slots = rng.gen_range(1..NS as i32), // may orphan a live slot
                }
                Expect::Either
            }
        },
        Params::Defer(q) => {
            match rng.gen_range(0..13) {
                0 => q.op = pick(rng, &[-1, 3, 4, i32::MAX, i32::MIN]),
                1 => q.batch = pick(rng, &[0, -1, 65536, i32::MAX]),
                2 => q.num_slots = pick(rng, &[0, -1, i32::MIN]),
                3 => q.window = pick(rng, &[0, -2, 17, i32::MAX]),
                4 => q.pending = ptr::null_mut(),
                5 => q.slots = ptr::null(),
                6 => q.accept_lens = ptr::null(), // COMMIT with neither form
                7 => {
                    // COMMIT with both forms, or a width without paths.
                    if rng.gen_bool(0.5) {
                        q.accept_paths = q.paths.cast_const();
                    }
                    q.path_width = pick(rng, &[1, 2, -1, i32::MAX]);
                }
                8 => {
                    q.op = replayssm_defer_op::REPLAYSSM_DEFER_GATHER as i32;
                    q.paths = ptr::null_mut();
                }
                9 => q.flags = rng.gen_range(1..=u32::MAX),
                10 => q.reserved = garbage_i32(rng) | 1,
                11 => q.struct_size = pick(rng, &[0, 8, q.struct_size - 4, q.struct_size + 8, u32::MAX]),
                _ => {
                    // Still inside the buffers: another op, a narrower W (the table read as
                    // [NS, 2 + W]), fewer rows or slots, the path form, no device word.
                    match rng.gen_range(0..6) {
                        0 => q.op = rng.gen_range(1..3),
                        1 => q.window = 1,
                        2 => q.batch = 1,
                        3 => q.num_slots = rng.gen_range(1..NS as i32),
                        4 => {
                            q.accept_lens = ptr::null();
                            q.accept_paths = q.paths.cast_const();
                            q.path_width = rng.gen_range(1..=WD as i32);
                        }
                        _ => q.error_word = ptr::null_mut(),
                    }
                    return Expect::Either;
                }
            }
            Expect::Refuse
        }
        Params::VerifyBuffered(q) => match rng.gen_range(0..4) {
            0 => dims!(q, verify.base),
            1 => tokens!(q, N, verify.tokens; verify.base),
            2 => {
                match rng.gen_range(0..10) {
                    0 => q.verify.base.batch = pick(rng, &[0, -1, 65536]),
                    1 => q.verify.max_seqlen = pick(rng, &[0, 17, -1, i32::MAX]),
                    2 => q.verify.base.layer = pick(rng, &[-1, NL as i32, i32::MAX]),
                    3 => q.verify.base.num_layers = pick(rng, &[0, -1, 1 << 20]),
                    // Past 64, under max_seqlen, or not positive (never a longer ring within 64:
                    // the buffers hold L positions).
                    4 => q.verify.ring.window = pick(rng, &[0, -4, 1, 65, i32::MAX, i32::MIN]),
                    5 => match rng.gen_range(0..3) {
                        0 => q.verify.ring.g = ptr::null_mut(),
                        1 => {
                            q.verify.ring.v = ptr::null_mut();
                            q.verify.ring.k = ptr::null_mut();
                            q.verify.ring.g = ptr::null_mut();
                            q.verify.ring.beta = ptr::null_mut();
                        }
                        _ => q.verify.base.state = ptr::null_mut(),
                    },
                    6 => q.cursors = ptr::null(),
                    7 => q.ring_u = ptr::null_mut(),
                    8 => q.verify.parent = q.verify.cu_seqlens, // a tree: VB takes chains only
                    _ => q.verify.ring.reserved = garbage_i32(rng) | 1,
                }
                Expect::Refuse
            }
            _ => {
                match rng.gen_range(0..3) {
                    0 => q.verify.ring.window = 3, // a shorter ring (slot 1's history still fits)
                    1 => q.verify.base.layer = 0,
                    _ => q.verify.base.num_slots = rng.gen_range(1..NS as i32), // may orphan a live slot
                }
                Expect::Either
            }
        },
        Params::Buffered(q) => {
            match rng.gen_range(0..12) {
                0 => q.op = pick(rng, &[-1, 3, 4, i32::MAX, i32::MIN]),
                1 => q.batch = pick(rng, &[0, -1, 65536, i32::MAX]),
                2 => q.num_slots = pick(rng, &[0, -1, i32::MIN]),
                // T out of range, or L below 2 T.
                3 => q.window = pick(rng, &[0, -2, 3, 17, i32::MAX]),
                4 => q.cache_len = pick(rng, &[0, -1, 3, 65, i32::MAX, i32::MIN]),
                5 => q.cursors = ptr::null_mut(),
                6 => q.slots = ptr::null(),
                7 => q.accept_lens = ptr::null(), // COMMIT without lengths
                8 => {
                    q.op = pick(rng, &[0, 1]);
                    q.flush_lens = ptr::null_mut();
                }
                9 => q.flags = rng.gen_range(1..=u32::MAX),
                10 => q.reserved = garbage_i32(rng) | 1,
                _ => {
                    // Still inside the buffers: another op, a longer ring, fewer rows or slots,
                    // no device word.
                    match rng.gen_range(0..5) {
                        0 => q.op = rng.gen_range(1..3),
                        1 => q.cache_len = rng.gen_range(4..=64),
                        2 => q.batch = 1,
                        3 => q.num_slots = rng.gen_range(1..NS as i32),
                        _ => q.error_word = ptr::null_mut(),
                    }
                    return Expect::Either;
                }
            }
            Expect::Refuse
        }
        Params::Cursors(q) => {
            match rng.gen_range(0..7) {
                0 => q.op = pick(rng, &[-1, 3, i32::MAX]),
                1 => q.batch = pick(rng, &[0, -1, 65536]),
                2 => q.cache_len = pick(rng, &[0, -1, 65537]),
                3 => q.cursors = ptr::null_mut(),
                4 => q.flags = 1,
                5 => q.num_slots = pick(rng, &[0, -1]),
                _ => {
                    q.op = rng.gen_range(0..3);
                    return Expect::Either;
                }
            }
            Expect::Refuse
        }
    }
}

/// Writes garbage into one device-side index array the entry reads.
fn mutate_indices(w: &mut World, p: &mut Params, rng: &mut ChaCha8Rng) {
    let value = garbage_i32(rng);
    let arrays: Vec<&mut Guarded<i32>> = match p {
        Params::Recurrent(_) => vec![&mut w.slots, &mut w.cu],
        Params::Verify(_) => vec![&mut w.slots, &mut w.cu, &mut w.parent],
        Params::Fold(f) => {
            if rng.gen_bool(0.3) {
                // Path fold: garbage among the accepted paths.
                f.accept_lens = ptr::null();
                f.accept_paths = w.paths.ptr();
                f.path_width = W as i32;
                f.track_steps = w.track_steps.ptr();
            }
            vec![
                &mut w.slots,
                &mut w.lens,
                &mut w.paths,
                &mut w.track_slots,
                &mut w.track_steps,
            ]
        }
        Params::Replay(_) => vec![&mut w.slots, &mut w.lens],
        Params::Decode(..) => vec![&mut w.slots, &mut w.positions],
        Params::Cursors(c) => {
            c.op = rng.gen_range(0..3);
            vec![&mut w.slots, &mut w.positions, &mut w.cursors]
        }
        Params::VerifyFold(_) => vec![
            &mut w.slots,
            &mut w.cu,
            &mut w.parent,
            &mut w.pending,
            &mut w.track_slots,
            &mut w.track_steps,
        ],
        Params::VerifyBuffered(_) => vec![&mut w.slots, &mut w.cu, &mut w.cursors],
        Params::Buffered(b) => {
            b.op = rng.gen_range(0..3);
            vec![&mut w.slots, &mut w.lens, &mut w.cursors]
        }
        Params::Defer(d) => {
            d.op = rng.gen_range(0..3);
            if d.op == replayssm_defer_op::REPLAYSSM_DEFER_COMMIT as i32 && rng.gen_bool(0.3) {
                // Path commit: garbage among the accepted paths ([B, WD] of w.paths).
                d.accept_lens = ptr::null();
                d.accept_paths = w.paths.ptr();
                d.path_width = WD as i32;
                d.paths = ptr::null_mut();
                vec![&mut w.slots, &mut w.pending, &mut w.paths]
            } else {
                vec![&mut w.slots, &mut w.lens, &mut w.pending]
            }
        }
    };
    let n = arrays.len();
    let a = arrays.into_iter().nth(rng.gen_range(0..n)).expect("an array");
    let body = a.body_mut();
    let i = rng.gen_range(0..body.len());
    body[i] = value;
}

/// At least 100 000 random bad inputs against every C ABI entry (seeded: the same inputs on
/// every run), each checked as the catalogue is; the index garbage also goes to the kernel layer,
/// which must flag exactly when the host refuses.
#[test]
fn seeded_campaign_of_random_bad_inputs_against_every_c_abi_entry() {
    let inputs: usize = std::env::var("REPLAYSSM_CAMPAIGN_INPUTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let world = World::new(3);
    let mut rng = ChaCha8Rng::seed_from_u64(0x19_1919);
    let (mut refused, mut accepted, mut launched) = (0usize, 0usize, 0usize);
    let mut silent = Vec::new();
    for i in 0..inputs {
        let entry = ENTRIES[i % ENTRIES.len()];
        let mut w = world.clone();
        let mut p = entry.params(&mut w);
        // Index garbage in one input of five, one field edit otherwise (one at a time: a second
        // edit could legitimately undo the first, e.g. dropping the whole ring after half of it).
        let expect = if rng.gen_range(0..5) == 0 {
            mutate_indices(&mut w, &mut p, &mut rng);
            Expect::Indices
        } else {
            mutate_field(&mut p, &mut rng)
        };
        let before = w.clone();
        // SAFETY: `p` points into `w`; the mutations only shrink sizes within its buffers or
        // break fields the entry must refuse.
        let st = unsafe { p.call() };
        let msg = last_error();
        if let Err(buf) = w.guards_intact() {
            panic!("input {i} ({entry:?}, {expect:?}): wrote outside {buf}: {st:?} {msg}");
        }
        if st == REPLAYSSM_OK {
            accepted += 1;
            if expect == Expect::Refuse {
                silent.push(format!("input {i} ({entry:?}): accepted an out-of-limits field"));
            }
            let word = if p_has_word(&p) { w.word.body()[0] } else { 0 };
            if word != 0 {
                silent.push(format!(
                    "input {i} ({entry:?}): accepted by the host but the device flagged {word:#x}"
                ));
            }
        } else {
            refused += 1;
            assert!(
                w.same_bits(&before),
                "input {i} ({entry:?}): a refused call changed a buffer: {msg}"
            );
            assert!(
                msg.starts_with(p.name()) && msg.len() > p.name().len() + 2,
                "input {i} ({entry:?}): message {msg:?}"
            );
            assert_ne!(st, REPLAYSSM_ERR_INTERNAL, "input {i} ({entry:?}): {msg}");
            if expect == Expect::Indices && msg.contains('[') && p_has_word(&p) {
                // The kernel layer, given the same garbage, must flag it (and stay in bounds).
                let mut w2 = before.clone();
                let mut p2 = entry.params(&mut w2);
                copy_edits(&p, &mut p2, &w, &w2);
                // SAFETY: as above.
                let kst = unsafe { p2.launch_kernel() };
                launched += 1;
                if let Err(buf) = w2.guards_intact() {
                    panic!("input {i} ({entry:?}): the kernel wrote outside {buf} on index garbage");
                }
                if kst == ffi::rssm_status_RSSM_OK && w2.word.body()[0] == 0 {
                    silent.push(format!(
                        "input {i} ({entry:?}): the host refused ({msg}) but the device flagged nothing"
                    ));
                }
            }
        }
    }
    say(&format!(
        "C ABI campaign: {inputs} inputs ({refused} refused, {accepted} accepted, {launched} also run on the kernel layer), 0 crashes, {} silent accepts",
        silent.len()
    ));
    assert!(
        silent.is_empty(),
        "{} silent accepts, first ones:\n{}",
        silent.len(),
        silent[..silent.len().min(10)].join("\n")
    );
    assert!(
        refused > inputs / 2 && accepted > inputs / 20,
        "the campaign lost its balance: {refused} refused, {accepted} accepted"
    );
}

fn p_has_word(p: &Params) -> bool {
    match p {
        Params::Recurrent(q) => !q.base.error_word.is_null(),
        Params::Verify(q) => !q.base.error_word.is_null(),
        Params::Fold(q) => !q.base.error_word.is_null(),
        Params::Replay(q) => !q.base.error_word.is_null(),
        Params::Decode(q, _) => !q.base.error_word.is_null(),
        Params::Cursors(q) => !q.error_word.is_null(),
        Params::VerifyFold(q) => !q.verify.base.error_word.is_null(),
        Params::Defer(q) => !q.error_word.is_null(),
        Params::VerifyBuffered(q) => !q.verify.base.error_word.is_null(),
        Params::Buffered(q) => !q.error_word.is_null(),
    }
}

macro_rules! world_buffers {
    ($w:expr, $conv:ident) => {
        [
            $conv(&$w.q.data),
            $conv(&$w.k.data),
            $conv(&$w.v.data),
            $conv(&$w.g.data),
            $conv(&$w.beta.data),
            $conv(&$w.o.data),
            $conv(&$w.state.data),
            $conv(&$w.snapshots.data),
            $conv(&$w.ring_v.data),
            $conv(&$w.ring_k.data),
            $conv(&$w.ring_g.data),
            $conv(&$w.ring_beta.data),
            $conv(&$w.ring_d.data),
            $conv(&$w.dring_k.data),
            $conv(&$w.dring_g.data),
            $conv(&$w.ring_u.data),
            $conv(&$w.slots.data),
            $conv(&$w.cu.data),
            $conv(&$w.parent.data),
            $conv(&$w.lens.data),
            $conv(&$w.paths.data),
            $conv(&$w.track_slots.data),
            $conv(&$w.track_steps.data),
            $conv(&$w.positions.data),
            $conv(&$w.force.data),
            $conv(&$w.cursors.data),
            $conv(&$w.pending.data),
            $conv(&$w.flush.data),
            $conv(&$w.word.data), // last: gpu_device_cases reads the word back from it
        ]
    };
}

/// How many buffers a world has (world_buffers!), the error word last.
const BUFFERS: usize = 29;

impl World {
    /// Every buffer (guards included) as bytes, in a fixed order.
    fn byte_buffers(&self) -> [&[u8]; BUFFERS] {
        world_buffers!(self, bytes)
    }
}

/// `p` was built over buffers `from` (and possibly edited); returns the same params with every
/// pointer rebased onto `to` (buffers of the same lengths, in the same order: another world, or
/// the device copies of this one).
fn rebase(p: &Params, from: &[&[u8]; BUFFERS], to: &[*const u8; BUFFERS]) -> Params {
    let rebase = |x: *const u8| -> *const u8 {
        if x.is_null() {
            return x;
        }
        for (a, &b) in from.iter().zip(to) {
            if a.as_ptr_range().contains(&x) {
                // Same offset into a buffer of the same length (wrapping: `b` may be a device
                // address the host never dereferences).
                return b.wrapping_add(x as usize - a.as_ptr() as usize);
            }
        }
        panic!("a pointer outside the world")
    };
    macro_rules! re {
        ($q:expr, $($f:ident),*) => {{ $( $q.$f = rebase($q.$f as *const u8) as _; )* }};
    }
    // The parts every params struct composes: the base's pointers, the tokens', the ring's.
    macro_rules! base {
        ($b:expr) => {
            re!($b, state, slots, error_word)
        };
    }
    macro_rules! tokens {
        ($t:expr) => {
            re!($t, q, k, v, a, b, A_log, dt_bias, g, beta, o)
        };
    }
    macro_rules! ring {
        ($r:expr) => {
            re!($r, v, k, g, beta)
        };
    }
    let mut out = *p;
    match &mut out {
        Params::Recurrent(q) => {
            base!(q.base);
            tokens!(q.tokens);
            re!(q, cu_seqlens, snapshots);
        }
        Params::Verify(q) => {
            base!(q.base);
            tokens!(q.tokens);
            ring!(q.ring);
            re!(q, cu_seqlens, parent);
        }
        Params::Fold(q) => {
            base!(q.base);
            ring!(q.ring);
            re!(q, accept_lens, track_slots, track_steps, accept_paths);
        }
        Params::Replay(q) => {
            base!(q.base);
            ring!(q.ring);
            re!(q, counts);
        }
        Params::Decode(q, _) => {
            base!(q.base);
            tokens!(q.tokens);
            re!(q, positions, force_flush, ring_d, ring_k, ring_g);
        }
        Params::Cursors(q) => re!(q, cursors, slots, positions, force_flush, error_word),
        Params::VerifyFold(q) => {
            base!(q.verify.base);
            tokens!(q.verify.tokens);
            ring!(q.verify.ring);
            re!(q.verify, cu_seqlens, parent);
            re!(q, pending, track_slots, track_steps);
        }
        Params::Defer(q) => re!(q, pending, slots, accept_lens, accept_paths, paths, error_word),
        Params::VerifyBuffered(q) => {
            base!(q.verify.base);
            tokens!(q.verify.tokens);
            ring!(q.verify.ring);
            re!(q.verify, cu_seqlens, parent);
            re!(q, cursors, ring_u);
        }
        Params::Buffered(q) => re!(q, cursors, slots, accept_lens, flush_lens, error_word),
    }
    out
}

fn copy_edits(p: &Params, out: &mut Params, from: &World, to: &World) {
    let targets = to.byte_buffers().map(|b| b.as_ptr());
    *out = rebase(p, &from.byte_buffers(), &targets);
}

fn bytes<T>(v: &[T]) -> &[u8] {
    // SAFETY: any initialised memory is readable as bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

/// `replayssm_check_error_word` (item 9): names the bits, resets the word, refuses NULL.
#[test]
fn check_error_word_names_the_bits_and_resets_the_word() {
    let mut word = ffi::RSSM_DEVERR_DUPLICATE_SLOT | ffi::RSSM_DEVERR_TRACK_STEP;
    // SAFETY: a host word for the emulated backend.
    let st = unsafe { replayssm_check_error_word(EMU, &mut word, ptr::null_mut()) };
    assert_eq!(st, REPLAYSSM_ERR_DEVICE_REPORTED);
    let msg = last_error();
    assert!(
        msg.contains("DUPLICATE_SLOT") && msg.contains("TRACK_STEP") && msg.contains("0x60"),
        "{msg}"
    );
    assert_eq!(word, 0, "the word is reset");
    // SAFETY: as above.
    assert_eq!(
        unsafe { replayssm_check_error_word(EMU, &mut word, ptr::null_mut()) },
        REPLAYSSM_OK
    );
    // SAFETY: NULL is refused before any read.
    assert_eq!(
        unsafe { replayssm_check_error_word(EMU, ptr::null_mut(), ptr::null_mut()) },
        REPLAYSSM_ERR_INVALID_ARGUMENT
    );
    assert!(last_error().contains("word is NULL"));
    let e = replayssm::Error::DeviceReported {
        kernel: "fold",
        bits: 0x20 | 0x400,
    };
    let s = e.to_string();
    assert!(s.contains("DUPLICATE_SLOT") && s.contains("unknown bits 0x400"), "{s}");
}

/// The same device cases on a GPU through the C ABI's CUDA backend (no host checks of device
/// memory): flagged, skipped, inside every buffer. scripts/device-check runs this under
/// compute-sanitizer memcheck and racecheck (a duplicate slot that was not skipped is a race).
#[test]
fn on_the_gpu_duplicate_slots_and_bad_tracks_are_flagged_and_skipped() {
    // (Without the CUDA backend compiled in, gpu_available says so and the test skips.)
    if common::gpu_available("on_the_gpu_duplicate_slots_and_bad_tracks_are_flagged_and_skipped") {
        #[cfg(replayssm_cuda)]
        gpu_device_cases();
    }
}

#[cfg(replayssm_cuda)]
fn gpu_device_cases() {
    const CUDA: i32 = replayssm_backend::REPLAYSSM_BACKEND_CUDA as i32;
    let dup = ffi::RSSM_DEVERR_DUPLICATE_SLOT;
    let per_slot = HV * V * K;
    for (entry, what, edit, bit) in device_cases() {
        let mut w = World::new(11);
        let mut p = entry.params(&mut w);
        edit(&mut w, &mut p);
        let host = w.byte_buffers();
        let mut dev = [ptr::null_mut::<std::ffi::c_void>(); BUFFERS];
        for (d, b) in dev.iter_mut().zip(&host) {
            // SAFETY: plain CUDA runtime calls on buffers of b.len() bytes.
            unsafe {
                assert_eq!(ffi::rssm_cuda_malloc(d, b.len() as u64), 0, "cudaMalloc");
                assert_eq!(ffi::rssm_cuda_memcpy_htod(*d, b.as_ptr().cast(), b.len() as u64), 0);
            }
        }
        let pd = rebase(&p, &host, &dev.map(|d| d as *const u8));
        // SAFETY: every pointer rebased onto a device copy of the same length.
        let st = unsafe { pd.call_on(CUDA) };
        assert_eq!(st, REPLAYSSM_OK, "{entry:?} {what}: {}", last_error());
        // SAFETY: as above.
        assert_eq!(
            unsafe { ffi::rssm_cuda_synchronize() },
            0,
            "{entry:?} {what}: kernel fault"
        );
        let mut back: Vec<Vec<u8>> = host.iter().map(|b| vec![0u8; b.len()]).collect();
        for ((d, b), dst) in dev.iter().zip(&host).zip(&mut back) {
            // SAFETY: as above.
            unsafe {
                assert_eq!(
                    ffi::rssm_cuda_memcpy_dtoh(dst.as_mut_ptr().cast(), *d, b.len() as u64),
                    0
                );
                ffi::rssm_cuda_free(*d);
            }
        }
        let g = GUARD * 4; // every element is 4 bytes
        for (i, (b, h)) in back.iter().zip(&host).enumerate() {
            let n = b.len();
            assert!(
                b[..g] == h[..g] && b[n - g..] == h[n - g..],
                "{entry:?} {what}: wrote outside buffer {i}"
            );
        }
        let word = u32::from_ne_bytes(back[BUFFERS - 1][g..g + 4].try_into().expect("4 bytes"));
        assert_eq!(word, bit, "{entry:?} {what}: error word {word:#x}");
        let slots = w.slots.body();
        if bit & dup != 0 && slots[0] == slots[1] {
            let s = slots[0] as usize;
            for l in 0..NL {
                let at = g + (l * NS + s) * per_slot * 4;
                assert!(
                    back[6][at..at + per_slot * 4] == host[6][at..at + per_slot * 4],
                    "{entry:?} {what}: slot {s} of layer {l} written"
                );
            }
        }
    }
}

impl Refusal {
    fn entry(&self) -> Entry {
        match self.entry.as_str() {
            "recurrent" => Entry::Recurrent,
            "verify" | "verify_tree" => Entry::Verify,
            "fold" | "fold_tree" => Entry::Fold,
            "replay" => Entry::Replay,
            "decode" => Entry::Decode,
            "decode_materialize" => Entry::Materialize,
            "decode_cursors" => Entry::Cursors,
            "verify_fold" => Entry::VerifyFold,
            "defer" => Entry::Defer,
            "verify_buffered" => Entry::VerifyBuffered,
            "buffered" => Entry::Buffered,
            e => panic!("unknown entry {e}"),
        }
    }

    /// Applies the row's edit to a valid call of its entry: an index array element in the world,
    /// or a scalar of the params (the C ABI's field of the same meaning).
    fn apply(&self, w: &mut World, p: &mut Params) {
        let int = || self.value.parse::<i32>().expect("an integer value");
        // The tree forms: the world's verify already carries `parent`; F takes paths instead.
        if let ("fold_tree", Params::Fold(f)) = (self.entry.as_str(), &mut *p) {
            f.accept_lens = ptr::null();
            f.accept_paths = w.paths.ptr();
            f.path_width = W as i32;
            f.track_slots = ptr::null();
            f.track_steps = ptr::null();
        }
        if let Some(i) = self.index {
            if self.name == "cursors" {
                // `cursors[i]`: the cursor of row i's slot.
                let slot = w.slots.body()[i] as usize;
                w.cursors.body_mut()[slot] = int();
                return;
            }
            let array = match self.name.as_str() {
                "slots" => &mut w.slots,
                "parent" => &mut w.parent,
                "accept_paths" => &mut w.paths,
                "accept_lens" | "counts" => &mut w.lens,
                "positions" => &mut w.positions,
                "cu_seqlens" => &mut w.cu,
                "track_steps" => &mut w.track_steps,
                "track_slots" => &mut w.track_slots,
                "cursors" => &mut w.cursors,
                n => panic!("no index array {n}"),
            };
            array.body_mut()[i] = int();
            return;
        }
        let scale = || self.value.parse::<f32>().expect("a real value");
        match (self.name.as_str(), p) {
            ("layer", Params::Verify(q)) => q.base.layer = int(),
            ("layer", Params::Replay(q)) => q.base.layer = int(),
            ("layer", Params::Decode(q, _)) => q.base.layer = int(),
            ("layer", Params::VerifyFold(q)) => q.verify.base.layer = int(),
            ("layer", Params::VerifyBuffered(q)) => q.verify.base.layer = int(),
            ("max_seqlen", Params::VerifyBuffered(q)) => q.verify.max_seqlen = int(),
            ("scale", Params::VerifyBuffered(q)) => q.verify.tokens.scale = scale(),
            ("lower_bound", Params::VerifyBuffered(q)) => q.verify.tokens.lower_bound = scale(),
            ("cache_len", Params::Buffered(q)) => q.cache_len = int(),
            ("window", Params::Buffered(q)) => q.window = int(),
            ("op", Params::Buffered(q)) => q.op = int(),
            ("max_seqlen", Params::Recurrent(q)) => q.max_seqlen = int(),
            ("max_seqlen", Params::Verify(q)) => q.max_seqlen = int(),
            ("max_seqlen", Params::VerifyFold(q)) => q.verify.max_seqlen = int(),
            ("scale", Params::Recurrent(q)) => q.tokens.scale = scale(),
            ("scale", Params::Verify(q)) => q.tokens.scale = scale(),
            ("scale", Params::Decode(q, _)) => q.tokens.scale = scale(),
            ("scale", Params::VerifyFold(q)) => q.verify.tokens.scale = scale(),
            ("lower_bound", Params::Recurrent(q)) => q.tokens.lower_bound = scale(),
            ("record_dtype", Params::Recurrent(q)) => q.record_dtype = int(),
            ("lower_bound", Params::Verify(q)) => q.tokens.lower_bound = scale(),
            ("lower_bound", Params::Decode(q, _)) => q.tokens.lower_bound = scale(),
            ("lower_bound", Params::VerifyFold(q)) => q.verify.tokens.lower_bound = scale(),
            ("cache_len", Params::Cursors(q)) => q.cache_len = int(),
            (n, _) => panic!("{}: no field {n} in the table's mapping", self.entry),
        }
    }
}

/// One definition of each host rule: every row of `tests/callers/refusals.txt` is refused by the
/// C ABI with the table's words (python/tests/test_callers.py holds Python's public API to the
/// same rows), and where the row breaks a field the kernel layer sees (not an index array, which
/// the kernels check on the device), the C++ launcher's routed `can_implement` refuses it too.
#[test]
fn every_row_of_the_shared_refusal_table_is_refused_with_its_words_by_the_c_abi_and_the_kernel_layer() {
    let world = World::new(11);
    let rows = common::refusals::table();
    let mut entries = std::collections::BTreeSet::new();
    for row in &rows {
        let entry = row.entry();
        entries.insert(format!("{entry:?}"));
        let (st, msg, _) = run(&world, |w, p| row.apply(w, p), entry);
        let what = format!("{} {}", row.entry, row.name);
        assert_ne!(st, REPLAYSSM_OK, "{what}: the C ABI accepted it");
        assert!(
            msg.contains(&row.says),
            "{what}: the C ABI said {msg:?}, not {:?}",
            row.says
        );
        if row.index.is_none() {
            let mut w = world.clone();
            let mut p = entry.params(&mut w);
            row.apply(&mut w, &mut p);
            // SAFETY: as in `run`; the kernel layer checks the struct before it launches.
            let st = unsafe { p.launch_kernel() };
            assert_ne!(
                st,
                ffi::rssm_status_RSSM_OK,
                "{what}: the kernel layer's can_implement accepted it"
            );
        }
    }
    assert_eq!(
        entries.len(),
        ENTRIES.len(),
        "the table must cover every entry: {entries:?}"
    );
    say(&format!(
        "shared refusal table: {} rows over {} entries",
        rows.len(),
        entries.len()
    ));
}
