//! The host checks of every kernel's params struct (`ffi::rssm_*_params`), with a message naming
//! the field, its value and the limit: the one source behind the C ABI (and so Python and the
//! cudarc interop) and the Rust wrappers, which run them on the params they build just before
//! launching. Index arrays are read only where they are host memory (EMULATED); on CUDA the
//! kernels apply the same rules (`checks::indices`) and flag the device error word. The kernel
//! layer's `can_implement` (C++) is the last line behind these. Crate-internal: they read the
//! params' pointers, which only the library's own callers (the C ABI's documented contract, the
//! wrappers' own buffers) vouch for.

use std::borrow::Cow;

use crate::backend::Backend;
use crate::checks::indices::{self, host_ints, live_slots};
use crate::error::{Error, Result};
use crate::ffi;

type Check = Result<()>;

/// What a check may assume about the memory behind the params: whether the launch needs 16-byte
/// aligned bases (the CUDA kernels' vector loads) and whether the index arrays are host memory it
/// may read (the callers' checks on EMULATED). The kernel layer's `can_implement` sees only the
/// struct: it reads no array.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reach {
    pub(crate) vector_aligned: bool,
    pub(crate) host_indices: bool,
}

impl From<Backend> for Reach {
    fn from(backend: Backend) -> Reach {
        Reach {
            vector_aligned: backend == Backend::Cuda,
            host_indices: backend == Backend::Emulated,
        }
    }
}

/// Index array of caller memory, read in place where it can be.
type Ints<'a> = Cow<'a, [i32]>;

fn bad(message: impl Into<String>) -> Error {
    Error::BadParam(message.into())
}

fn unsupported(message: impl Into<String>) -> Error {
    Error::UnsupportedParam(message.into())
}

fn nonnull<T>(p: *const T, name: &str) -> Check {
    if p.is_null() {
        return Err(bad(format!("{name} is NULL")));
    }
    Ok(())
}

fn at_least(v: i64, min: i64, name: &str) -> Check {
    if v < min {
        return Err(bad(format!("{name} = {v}, must be at least {min}")));
    }
    Ok(())
}

fn in_range(v: impl Into<i64>, lo: impl Into<i64>, hi: impl Into<i64>, name: &str) -> Check {
    match crate::limits::outside(name, v.into(), lo.into(), hi.into()) {
        Some(why) => Err(bad(why)),
        None => Ok(()),
    }
}

// The rules the typed Rust API states on its own values as well: one definition each, called by
// the params checks below and by the wrappers' validation (`tokens`, `state::pool`,
// `kernels::verify`), so a refusal reads the same from Rust, the C ABI and Python.

/// The attention scale is finite.
pub fn scale(scale: f32) -> Check {
    if !scale.is_finite() {
        return Err(bad(format!("scale = {scale} is not finite")));
    }
    Ok(())
}

/// The raw gate's form: `lower_bound` 0 (either sign) is the softplus gate; any other value is
/// the safe gate's bound, which must be finite and negative (`g` lies in `[lower_bound, 0]`: a
/// positive one would grow the state, a non-finite one makes every `g` non-finite).
pub fn lower_bound(lower_bound: f32) -> Check {
    if lower_bound == 0.0 || (lower_bound.is_finite() && lower_bound < 0.0) {
        return Ok(());
    }
    Err(bad(format!(
        "lower_bound = {lower_bound}, must be 0 (softplus gate) or finite and negative (the safe gate)"
    )))
}

/// `lower_bound` against the gate it comes with: [`lower_bound`]'s rule, and a safe gate only
/// on a raw gate (`raw`) of KDA (`kda`; GDN's kernels compile the softplus form alone).
pub fn gate_form(lower_bound_value: f32, raw: bool, kda: bool) -> Check {
    lower_bound(lower_bound_value)?;
    if lower_bound_value != 0.0 && !kda {
        return Err(unsupported(format!(
            "lower_bound = {lower_bound_value} with variant GDN: the safe gate is KDA's (Kimi); GDN's gate is softplus"
        )));
    }
    if !raw && lower_bound_value != 0.0 {
        return Err(bad(format!(
            "lower_bound = {lower_bound_value}: the safe gate is formed from the raw gate; with a precomputed gate (g, beta) it must be 0"
        )));
    }
    Ok(())
}

/// `layer` is a layer of a pool of `num_layers` layers.
pub fn layer(layer: i64, num_layers: i64) -> Check {
    in_range(layer, 0, num_layers - 1, "layer")
}

/// A verify's draft tokens per request: `1..=MAX_VERIFY_WINDOW` (the window V is compiled for).
pub fn draft_tokens(max_seqlen: i64) -> Check {
    in_range(
        max_seqlen,
        1,
        ffi::RSSM_MAX_VERIFY_WINDOW,
        "max_seqlen (draft tokens per request)",
    )
}

/// A decode ring's length (the A4 gate words the same rule).
pub fn cache_len(cache_len: i64) -> Check {
    match crate::limits::cache_len_outside(cache_len) {
        Some(why) => Err(bad(why)),
        None => Ok(()),
    }
}

/// Vector loads of 16 bytes need 16-byte aligned bases on the device.
fn aligned16<T>(reach: Reach, p: *const T, name: &str) -> Check {
    if reach.vector_aligned && !p.is_null() && (p as usize) % 16 != 0 {
        return Err(bad(format!(
            "{name} ({p:p}) is not 16-byte aligned (the CUDA kernels load it 16 bytes at a time)"
        )));
    }
    Ok(())
}

/// `p` is aligned to its `bytes`-byte elements (a misaligned element access faults on the GPU and
/// is undefined on the host).
fn element_aligned<T>(p: *const T, bytes: i64, name: &str) -> Check {
    if !p.is_null() && (p as usize) % bytes as usize != 0 {
        return Err(bad(format!(
            "{name} ({p:p}) is not aligned to its {bytes}-byte elements"
        )));
    }
    Ok(())
}

/// Bytes spanned by `rows` rows `stride` elements apart, `row` elements each: the kernels index
/// them with 64-bit offsets, so the span must not overflow (nor exceed what a pointer can reach).
fn extent(name: &str, rows: i64, stride: i64, row: i64, elem_bytes: i64) -> Check {
    let span = if rows <= 0 {
        Some(0)
    } else {
        (rows - 1)
            .checked_mul(stride)
            .and_then(|x| x.checked_add(row))
            .and_then(|x| x.checked_mul(elem_bytes))
    };
    match span {
        Some(bytes) if bytes <= isize::MAX as i64 => Ok(()),
        _ => Err(bad(format!(
            "{name}: {rows} rows of stride {stride} (row {row} elements of {elem_bytes} bytes) overflow 64-bit addressing (limit {} bytes)",
            isize::MAX
        ))),
    }
}

/// Bytes of a dense array of `dims` elements of `elem_bytes`: must fit 64-bit addressing.
fn dense(name: &str, dims: &[i32], elem_bytes: i64) -> Check {
    let elems = dims.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d.max(0) as i64));
    extent(name, 1, 0, elems.unwrap_or(i64::MAX), elem_bytes)
}

/// Bytes of one activation element.
fn act_bytes(dtype: i32) -> i64 {
    if dtype == 0 {
        4
    } else {
        2
    }
}

/// Head dims, dtype, variant and the l2norm flag, as every kernel needs them.
fn problem(h: i32, hv: i32, k: i32, v: i32, dtype: i32, variant: i32, qk_l2norm: i32) -> Check {
    at_least(h as i64, 1, "H")?;
    at_least(hv as i64, 1, "HV")?;
    in_range(v, 1, ffi::RSSM_MAX_V as i32, "V (value head dim)")?;
    in_range(hv, 1, 65535, "HV")?;
    if hv % h != 0 {
        return Err(bad(format!(
            "HV = {hv} is not a multiple of H = {h} (each key head serves HV/H value heads)"
        )));
    }
    if !crate::limits::supported_head_dim(k as usize) {
        return Err(unsupported(format!(
            "K = {k}: the kernels are compiled for head dims {:?}",
            crate::limits::KERNEL_HEAD_DIMS
        )));
    }
    in_range(dtype, 0, 2, "dtype (0 = f32, 1 = f16, 2 = bf16)")?;
    in_range(variant, 0, 1, "variant (0 = GDN, 1 = KDA)")?;
    in_range(qk_l2norm, 0, 1, "qk_l2norm")
}

/// The token part of R's, V's and D's params (`rssm_token_params`) over `rows` tokens: pointers,
/// exactly one gate form, strides, scale, extents.
fn tokens(b: &ffi::rssm_base_params, t: &ffi::rssm_token_params, rows: i32) -> Check {
    nonnull(t.q, "q")?;
    nonnull(t.k, "k")?;
    nonnull(t.v, "v")?;
    nonnull(t.o, "o")?;
    let raw = !t.a.is_null() || !t.b.is_null() || !t.A_log.is_null() || !t.dt_bias.is_null();
    let pre = !t.g.is_null() || !t.beta.is_null();
    if raw == pre {
        return Err(bad(
            "give exactly one gate form: raw (a, b, A_log, dt_bias) or precomputed (g, beta)",
        ));
    }
    if raw {
        nonnull(t.a, "a (raw gate)")?;
        nonnull(t.b, "b (raw gate)")?;
        nonnull(t.A_log, "A_log (raw gate)")?;
        nonnull(t.dt_bias, "dt_bias (raw gate)")?;
    } else {
        nonnull(t.g, "g (precomputed gate)")?;
        nonnull(t.beta, "beta (precomputed gate)")?;
    }
    gate_form(t.lower_bound, raw, b.variant == 1)?;
    let (h, hv, k, v) = (b.H as i64, b.HV as i64, b.K as i64, b.V as i64);
    at_least(t.q_stride, h * k, "q_stride (elements per token, at least H*K)")?;
    at_least(t.k_stride, h * k, "k_stride (elements per token, at least H*K)")?;
    at_least(t.v_stride, hv * v, "v_stride (elements per token, at least HV*V)")?;
    at_least(t.o_stride, hv * v, "o_stride (elements per token, at least HV*V)")?;
    let gate_row = if b.variant == 1 { hv * k } else { hv };
    if raw {
        at_least(
            t.a_stride,
            gate_row,
            "a_stride (elements per token, HV or HV*K for KDA)",
        )?;
        at_least(t.b_stride, hv, "b_stride (elements per token, at least HV)")?;
    }
    scale(t.scale)?;
    let (rows, act) = (rows as i64, act_bytes(b.dtype));
    extent("q", rows, t.q_stride, h * k, act)?;
    extent("k", rows, t.k_stride, h * k, act)?;
    extent("v", rows, t.v_stride, hv * v, act)?;
    extent("o", rows, t.o_stride, hv * v, act)?;
    if raw {
        extent("a", rows, t.a_stride, gate_row, act)?;
        extent("b", rows, t.b_stride, hv, act)?;
    }
    Ok(())
}

/// The params base (`rssm_base_params`) of every kernel over the pool: head dims, dtype, variant,
/// the rows and the pool (its layer in range, state and slots present, its extent and pitches, the
/// state's alignment).
fn base(b: &ffi::rssm_base_params, reach: Reach) -> Check {
    problem(b.H, b.HV, b.K, b.V, b.dtype, b.variant, b.qk_l2norm)?;
    pool(b.batch, b.num_slots, b.num_layers)?;
    layer(b.layer.into(), b.num_layers.into())?;
    nonnull(b.slots, "slots")?;
    nonnull(b.state, "state")?;
    dense("state", &[b.num_layers, b.num_slots, b.HV, b.V, b.K], 4)?;
    aligned16(reach, b.state, "state")?;
    state_pitches(
        b.state_slot_stride,
        b.state_layer_stride,
        b.num_layers,
        b.num_slots,
        b.HV,
        b.V,
        b.K,
    )
}

/// Pool geometry: the rows, the slots and the layers.
fn pool(batch: i32, num_slots: i32, num_layers: i32) -> Check {
    in_range(batch, 1, 65535, "batch")?;
    at_least(num_slots as i64, 1, "num_slots")?;
    in_range(num_layers, 1, ffi::RSSM_MAX_LAYERS as i32, "num_layers")
}

/// Reads and checks (EMULATED: host memory) the slots `[batch]` and cu_seqlens `[batch + 1]` of
/// R and V; returns both.
///
/// # Safety
/// The pointers cover those extents.
unsafe fn token_rows<'a>(
    slots: *const i32,
    cu_seqlens: *const i32,
    batch: i32,
    num_slots: i32,
    num_tokens: i32,
    max_seqlen: i32,
) -> Result<(Ints<'a>, Ints<'a>)> {
    let slots = live_slots(slots, batch, num_slots)?;
    let cu = host_ints(cu_seqlens, batch as usize + 1);
    indices::seqlens(&cu, num_tokens, max_seqlen)?;
    Ok((slots, cu))
}

/// The spec-ring part (`rssm_ring_params`) of V, F and P: its window and its extent
/// (`[NL, NS, ...]`) within 64-bit addressing; `read`: F and P read all four arrays.
fn ring(b: &ffi::rssm_base_params, r: &ffi::rssm_ring_params, read: bool) -> Check {
    at_least(r.window as i64, 1, "ring.window")?;
    let (nl, ns, w) = (b.num_layers, b.num_slots, r.window);
    let gw = if b.variant == 1 { b.K } else { 1 };
    dense("ring.v", &[nl, ns, b.HV, w, b.V], act_bytes(b.dtype))?;
    dense("ring.k", &[nl, ns, b.H, w, b.K], act_bytes(b.dtype))?;
    dense("ring.g", &[nl, ns, b.HV, w, gw], 4)?;
    if read {
        nonnull(r.v, "ring.v")?;
        nonnull(r.k, "ring.k")?;
        nonnull(r.g, "ring.g")?;
        nonnull(r.beta, "ring.beta")?;
    }
    Ok(())
}

/// The checkpoint pool's pitches (`state_slot_stride`, `state_layer_stride`, elements, 0 = packed):
/// at least one slot apart, layers that do not overlap (every slot of a layer before the next, or
/// every layer inside one slot: an engine's page-major pool), whole float4s (the vector loads),
/// at most 2^40, and num_slots slot pitches and num_layers layer pitches each within 64-bit byte
/// addressing (so the kernels' offsets cannot wrap). The same rule as `state_pitches_ok` in
/// csrc/include/replayssm/can_implement.h.
fn state_pitches(slot_stride: i64, layer_stride: i64, nl: i32, ns: i32, hv: i32, v: i32, k: i32) -> Check {
    let elems = hv as i128 * v as i128 * k as i128;
    for (name, x) in [("state_slot_stride", slot_stride), ("state_layer_stride", layer_stride)] {
        if !(0..=1 << 40).contains(&x) || x % 4 != 0 {
            return Err(bad(format!(
                "{name} = {x}: expected 0 (packed) or a multiple of 4 elements up to 2^40"
            )));
        }
    }
    // i128: ns and nl are checked elsewhere, maybe after this; no product here may wrap.
    let (nl, ns) = (nl.max(1) as i128, ns.max(1) as i128);
    let ss = if slot_stride == 0 { elems } else { slot_stride as i128 };
    let ls = if layer_stride == 0 {
        ss * ns
    } else {
        layer_stride as i128
    };
    if ss < elems {
        return Err(bad(format!(
            "state_slot_stride = {slot_stride} is smaller than one slot's checkpoint (HV*V*K = {elems} elements)"
        )));
    }
    let limit = (i64::MAX / 4) as i128;
    if ss * ns > limit || ls * nl > limit {
        return Err(bad(format!(
            "state_slot_stride = {slot_stride}, state_layer_stride = {layer_stride}: {ns} slot pitches or {nl} \
             layer pitches exceed 64-bit byte addressing"
        )));
    }
    if nl > 1 && !(ls >= ss * ns || (ls >= elems && ss >= ls * nl)) {
        return Err(bad(format!(
            "state_layer_stride = {layer_stride} with state_slot_stride = {slot_stride}: the {nl} layers' \
             checkpoints overlap (a layer pitch of at least num_slots x the slot pitch = {}, or a slot \
             pitch of at least num_layers x a layer pitch of at least HV*V*K = {elems})",
            ss * ns
        )));
    }
    Ok(())
}

/// F and materialise put (layer, row tile) in gridDim.x: at most 2^31 - 1 blocks (the batch is
/// in gridDim.z, bounded by `batch`'s own check). Counted with the narrowest tile, 16 rows (F's
/// prefetch implementation), so the bound holds for every implementation.
fn layer_grid(v: i32, num_layers: i32) -> Check {
    let blocks = (v as i64 + 15) / 16 * num_layers as i64;
    if blocks > i32::MAX as i64 {
        return Err(bad(format!(
            "num_layers = {num_layers} with V = {v}: {blocks} blocks in the grid's x dimension exceed 2^31 - 1"
        )));
    }
    Ok(())
}

/// The implementation fields (`impl`, `block_rows`) against what the kernel has and what fits.
fn implementation(kernel: crate::tuning::Kernel, b: &ffi::rssm_base_params, key: crate::tuning::Key) -> Check {
    use crate::tuning::{Choice, Impl};
    let (imp, block_rows) = (b.impl_, b.block_rows);
    let known = [Impl::Default, Impl::Staged, Impl::Prefetch];
    let Some(&which) = known.iter().find(|i| i.to_ffi() == imp) else {
        return Err(bad(format!(
            "impl = {imp}: not an rssm_impl (0 = DEFAULT, 1 = STAGED, 2 = PREFETCH)"
        )));
    };
    at_least(block_rows as i64, 0, "block_rows")?;
    let choice = Choice {
        imp: which,
        block_rows: block_rows as u32,
    };
    if !crate::tuning::fits(&key, choice) {
        return Err(bad(match (kernel, which) {
            (_, Impl::Default) => format!("block_rows = {block_rows}: the default implementation takes 0"),
            (crate::tuning::Kernel::V | crate::tuning::Kernel::VF, Impl::Staged) => format!(
                "impl = STAGED with block_rows = {block_rows}: it must be 0 or a multiple of 16, and the block's \
                 shared memory for T = {} positions over those rows of V = {} must fit {} bytes",
                key.window,
                key.v,
                ffi::RSSM_VERIFY_STAGED_MAX_SMEM
            ),
            (crate::tuning::Kernel::D, Impl::Prefetch) => {
                format!("impl = PREFETCH with block_rows = {block_rows}: it takes block_rows 0")
            }
            (crate::tuning::Kernel::F | crate::tuning::Kernel::P, Impl::Prefetch) => format!(
                "impl = PREFETCH with block_rows = {block_rows}, window = {}: it takes block_rows 0 and windows up to {}",
                key.window,
                ffi::RSSM_MAX_VERIFY_WINDOW
            ),
            _ => format!("impl = {imp} ({which:?}) is not an implementation of kernel {kernel}"),
        }));
    }
    Ok(())
}

/// The element type of a decode ring's `u` and `k^` records (D's and materialise's
/// `ring_dtype`, R's `record_dtype`): f32, or, where `act` is given (D, R), the activations' own
/// f16/bf16: the kernels round with the activation type's instantiation, and f32 activations
/// have only the f32 one.
pub(crate) fn record_dtype(name: &str, dtype: i32, act: Option<i32>) -> Check {
    if !(0..=2).contains(&dtype) {
        // (The name is formatted only here: a decode step's checks allocate nothing.)
        return in_range(dtype, 0, 2, &format!("{name} (0 = f32, 1 = f16, 2 = bf16)"));
    }
    match act {
        Some(act) if dtype != 0 && dtype != act => Err(unsupported(format!(
            "{name} = {dtype}: decode records are f32 (0) or the activations' dtype (dtype = {act})"
        ))),
        _ => Ok(()),
    }
}

fn decode_ring(p: &ffi::rssm_decode_params, reach: Reach, act: Option<i32>) -> Check {
    let b = &p.base;
    base(b, reach)?;
    cache_len(p.cache_len.into())?;
    record_dtype("ring_dtype", p.ring_dtype, act)?;
    let rec = act_bytes(p.ring_dtype);
    let gw = if b.variant == 1 { b.K } else { 1 };
    let (nl, ns, l) = (b.num_layers, b.num_slots, p.cache_len);
    dense("ring_d", &[nl, ns, b.HV, l, b.V], rec)?;
    dense("ring_k", &[nl, ns, b.H, l, b.K], rec)?;
    dense("ring_g", &[nl, ns, b.HV, l, gw], 4)?;
    nonnull(p.ring_d, "ring_d")?;
    nonnull(p.ring_k, "ring_k")?;
    nonnull(p.ring_g, "ring_g")?;
    nonnull(p.positions, "positions (the cursor snapshot of this step)")?;
    aligned16(reach, p.ring_k, "ring_k")?;
    element_aligned(p.ring_d, rec, "ring_d")?;
    element_aligned(p.ring_k, rec, "ring_k")?;
    element_aligned(p.ring_g, 4, "ring_g")?;
    if reach.host_indices {
        // SAFETY: the documented extents of slots and positions, [batch] each.
        let (slots, pos) = unsafe {
            (
                live_slots(b.slots, b.batch, b.num_slots)?,
                host_ints(p.positions, b.batch as usize),
            )
        };
        indices::positions("positions", &pos, &slots, p.cache_len)?;
    }
    Ok(())
}

/// The checks of `rssm_recurrent`'s params (the C ABI's `replayssm_recurrent`, the Rust wrapper's launch).
pub(crate) fn recurrent(p: &ffi::rssm_recurrent_params, reach: impl Into<Reach>) -> Check {
    let reach: Reach = reach.into();
    let b = &p.base;
    // R's pool has one layer and no layer pitch.
    in_range(b.num_layers, 1, 1, "num_layers (kernel R's pool has one layer)")?;
    in_range(b.layer, 0, 0, "layer (kernel R's pool has one layer)")?;
    if b.state_layer_stride != 0 {
        return Err(bad(format!(
            "state_layer_stride = {}: kernel R's pool has one layer, give 0",
            b.state_layer_stride
        )));
    }
    base(b, reach)?;
    at_least(p.num_tokens as i64, 0, "num_tokens")?;
    at_least(p.max_seqlen as i64, 1, "max_seqlen")?;
    nonnull(p.cu_seqlens, "cu_seqlens")?;
    in_range(p.write_state, 0, 1, "write_state")?;
    record_dtype("record_dtype", p.record_dtype, Some(b.dtype))?;
    if b.impl_ != 0 || b.block_rows != 0 {
        return Err(bad(format!(
            "impl = {}, block_rows = {}: kernel R has one implementation (0, 0)",
            b.impl_, b.block_rows
        )));
    }
    tokens(b, &p.tokens, p.num_tokens)?;
    if !p.snapshots.is_null() {
        dense("snapshots", &[b.batch, p.max_seqlen, b.HV, b.V, b.K], 4)?;
    }
    aligned16(reach, p.snapshots, "snapshots")?;
    if reach.host_indices {
        // SAFETY: the documented extents of slots [batch] and cu_seqlens [batch + 1].
        unsafe { token_rows(b.slots, p.cu_seqlens, b.batch, b.num_slots, p.num_tokens, p.max_seqlen)? };
    }
    Ok(())
}

/// The checks of `rssm_verify`'s params (the C ABI's `replayssm_verify`, the Rust wrapper's launch).
pub(crate) fn verify(p: &ffi::rssm_verify_params, reach: impl Into<Reach>) -> Check {
    let reach: Reach = reach.into();
    let (b, r) = (&p.base, &p.ring);
    base(b, reach)?;
    at_least(p.num_tokens as i64, 0, "num_tokens")?;
    draft_tokens(p.max_seqlen.into())?;
    nonnull(p.cu_seqlens, "cu_seqlens")?;
    let absent = [r.v.is_null(), r.k.is_null(), r.g.is_null(), r.beta.is_null()];
    if absent.iter().any(|&n| n) && !absent.iter().all(|&n| n) {
        return Err(bad(
            "ring.v, ring.k, ring.g, ring.beta: set all four (ring write) or none",
        ));
    }
    ring(b, r, false)?;
    if !absent[0] && r.window < p.max_seqlen {
        return Err(bad(format!(
            "window = {} is smaller than max_seqlen = {}: the ring must hold every draft token of a request (W >= T)",
            r.window, p.max_seqlen
        )));
    }
    tokens(b, &p.tokens, p.num_tokens)?;
    use crate::tuning::Kernel;
    implementation(Kernel::V, b, crate::tuning::Key::of_launch(Kernel::V, b, p.max_seqlen))?;
    if reach.host_indices {
        // SAFETY: the documented extents of slots [batch], cu_seqlens [batch + 1] and
        // parent [num_tokens] (read only where the windows say, after they are checked).
        let (slots, cu) =
            unsafe { token_rows(b.slots, p.cu_seqlens, b.batch, b.num_slots, p.num_tokens, p.max_seqlen)? };
        if !p.parent.is_null() {
            // SAFETY: as above.
            let parent = unsafe { host_ints(p.parent, p.num_tokens as usize) };
            indices::parents(&parent, &cu, &slots)?;
        }
    }
    Ok(())
}

/// The checks of `rssm_fold`'s params (the C ABI's `replayssm_fold`, the Rust wrapper's launch).
pub(crate) fn fold(p: &ffi::rssm_fold_params, reach: impl Into<Reach>) -> Check {
    let reach: Reach = reach.into();
    let (b, w) = (&p.base, p.ring.window);
    base(b, reach)?;
    ring(b, &p.ring, true)?;
    match (p.accept_lens.is_null(), p.accept_paths.is_null()) {
        (false, true) => {
            if p.path_width != 0 {
                return Err(bad("path_width must be 0 without accept_paths"));
            }
        }
        (true, false) => in_range(p.path_width, 1, w, "path_width (columns of accept_paths)")?,
        _ => {
            return Err(bad(
                "give exactly one of accept_lens (linear chain) and accept_paths (tree path fold)",
            ))
        }
    }
    if p.track_slots.is_null() != p.track_steps.is_null() {
        return Err(bad("track_slots and track_steps: set both or neither"));
    }
    layer_grid(b.V, b.num_layers)?;
    use crate::tuning::Kernel;
    implementation(Kernel::F, b, crate::tuning::Key::of_launch(Kernel::F, b, w))?;
    if reach.host_indices {
        let n = b.batch as usize;
        // SAFETY: the documented extents: slots, accept_lens, track_* [batch], accept_paths
        // [batch, path_width].
        let slots = unsafe { live_slots(b.slots, b.batch, b.num_slots)? };
        let lens = if p.accept_paths.is_null() {
            // SAFETY: as above.
            let lens = unsafe { host_ints(p.accept_lens, n) };
            indices::lengths("accept_lens", &lens, &slots, w)?;
            lens
        } else {
            let pw = p.path_width as usize;
            // SAFETY: as above.
            Cow::Owned(indices::paths(
                &unsafe { host_ints(p.accept_paths, n * pw) },
                pw,
                &slots,
                w,
            )?)
        };
        if !p.track_slots.is_null() {
            // SAFETY: as above.
            let (ts, st) = unsafe { (host_ints(p.track_slots, n), host_ints(p.track_steps, n)) };
            indices::tracks(&ts, &st, &slots, &lens, b.num_slots)?;
        }
    }
    Ok(())
}

/// The checks of `rssm_replay`'s params (the C ABI's `replayssm_replay`, the Rust wrapper's launch).
pub(crate) fn replay(p: &ffi::rssm_replay_params, reach: impl Into<Reach>) -> Check {
    let reach: Reach = reach.into();
    let b = &p.base;
    base(b, reach)?;
    ring(b, &p.ring, true)?;
    nonnull(p.counts, "counts")?;
    use crate::tuning::Kernel;
    implementation(Kernel::P, b, crate::tuning::Key::of_launch(Kernel::P, b, p.ring.window))?;
    if reach.host_indices {
        // SAFETY: the documented extents of slots and counts, [batch] each.
        let (slots, counts) = unsafe {
            (
                live_slots(b.slots, b.batch, b.num_slots)?,
                host_ints(p.counts, b.batch as usize),
            )
        };
        indices::lengths("counts", &counts, &slots, p.ring.window)?;
    }
    Ok(())
}

/// The checks of `rssm_decode`'s params (the C ABI's `replayssm_decode`, the Rust wrapper's launch).
pub(crate) fn decode(p: &ffi::rssm_decode_params, reach: impl Into<Reach>) -> Check {
    let reach: Reach = reach.into();
    let b = &p.base;
    decode_ring(p, reach, Some(b.dtype))?;
    use crate::tuning::Kernel;
    implementation(Kernel::D, b, crate::tuning::Key::of_launch(Kernel::D, b, p.cache_len))?;
    tokens(b, &p.tokens, b.batch)
}

/// The checks of `rssm_materialize`'s params (the C ABI's `replayssm_decode_materialize`, the Rust wrapper's launch).
pub(crate) fn materialize(p: &ffi::rssm_decode_params, reach: impl Into<Reach>) -> Check {
    let reach: Reach = reach.into();
    let b = &p.base;
    decode_ring(p, reach, None)?;
    if b.impl_ != 0 || b.block_rows != 0 {
        return Err(bad(format!(
            "impl = {}, block_rows = {}: materialise has one implementation (0, 0)",
            b.impl_, b.block_rows
        )));
    }
    layer_grid(b.V, b.num_layers)?;
    Ok(())
}

/// The checks of `rssm_cursors`'s params (the C ABI's `replayssm_decode_cursors`, the Rust wrapper's launch).
pub(crate) fn cursors(p: &ffi::rssm_cursor_params, reach: impl Into<Reach>) -> Check {
    let reach: Reach = reach.into();
    in_range(p.op, 0, 2, "op (0 = SNAPSHOT, 1 = ADVANCE, 2 = RESET)")?;
    in_range(p.batch, 1, 65535, "batch")?;
    at_least(p.num_slots as i64, 1, "num_slots")?;
    cache_len(p.cache_len.into())?;
    nonnull(p.cursors, "cursors")?;
    nonnull(p.slots, "slots")?;
    if p.op != ffi::rssm_cursor_op_RSSM_CURSOR_RESET as i32 {
        nonnull(p.positions, "positions")?;
    }
    if reach.host_indices {
        let b = p.batch as usize;
        // SAFETY: the documented extents: slots and positions [batch], cursors [num_slots].
        let slots = unsafe { live_slots(p.slots, p.batch, p.num_slots)? };
        if p.op == ffi::rssm_cursor_op_RSSM_CURSOR_SNAPSHOT as i32 {
            for (b, &s) in slots.iter().enumerate().filter(|(_, &s)| s >= 0) {
                // SAFETY: as above; only live rows' cursors are read (no copy: a decode step
                // allocates nothing).
                let m = unsafe { std::ptr::read_unaligned(p.cursors.add(s as usize)) };
                indices::position("cursors[slots]", b, m, s, p.cache_len)?;
            }
        } else if p.op == ffi::rssm_cursor_op_RSSM_CURSOR_ADVANCE as i32 {
            // SAFETY: as above.
            let pos = unsafe { host_ints(p.positions, b) };
            indices::positions("positions", &pos, &slots, p.cache_len)?;
        }
    }
    Ok(())
}

/// The pending-table entries (`[NS, 2 + W]`) of the live `slots`, as kernel VF and the defer
/// kernel read them: `n` in 0..=W, half 0 or 1, `n` ring positions inside that half, increasing.
pub(crate) fn pending_entries(table: &[i32], w: usize, slots: &[i32]) -> Check {
    let e = 2 + w;
    for &slot in slots.iter().filter(|&&s| s >= 0) {
        let Some(entry) = table.get(slot as usize * e..(slot as usize + 1) * e) else {
            return Err(bad(format!("pending table: slot {slot} has no entry")));
        };
        pending_entry(entry, w, slot)?;
    }
    Ok(())
}

fn pending_entry(entry: &[i32], w: usize, slot: i32) -> Check {
    let (n, half, w32) = (entry[0], entry[1], w as i32);
    if n < 0 || n > w32 {
        return Err(bad(format!(
            "pending[slot {slot}].n = {n} records, must be in 0..={w32} (the deferred window W)"
        )));
    }
    if half != 0 && half != 1 {
        return Err(bad(format!("pending[slot {slot}].half = {half}, must be 0 or 1")));
    }
    let pos = &entry[2..2 + n as usize];
    for (i, &x) in pos.iter().enumerate() {
        if x < half * w32 || x >= (half + 1) * w32 || (i > 0 && x <= pos[i - 1]) {
            return Err(bad(format!(
                "pending[slot {slot}] positions {pos:?}: each must be in half {half} ({}..{}) and increasing",
                half * w32,
                (half + 1) * w32
            )));
        }
    }
    Ok(())
}

/// The checks of `rssm_verify_fold`'s params (the Rust wrapper's launch): V's on the verify,
/// then the two-window ring, the pending table and the track.
pub(crate) fn verify_fold(p: &ffi::rssm_verify_fold_params, reach: impl Into<Reach>) -> Check {
    let reach: Reach = reach.into();
    let b = &p.verify.base;
    use crate::tuning::{Kernel, Key};
    implementation(Kernel::VF, b, Key::of_launch(Kernel::VF, b, p.verify.max_seqlen))?;
    // V's checks on the verify half; the implementation fields are VF's, checked above.
    let mut v = p.verify;
    (v.base.impl_, v.base.block_rows) = (0, 0);
    verify(&v, reach)?;
    let v = &p.verify;
    if v.ring.v.is_null() {
        return Err(bad(
            "VF writes the new window to the ring: set ring.v, ring.k, ring.g, ring.beta",
        ));
    }
    nonnull(p.pending, "pending")?;
    if v.ring.window % 2 != 0 || v.ring.window / 2 > ffi::RSSM_MAX_VERIFY_WINDOW as i32 {
        return Err(bad(format!(
            "window = {}: the deferred ring holds two windows, so it must be 2 W with W in 1..={}",
            v.ring.window,
            ffi::RSSM_MAX_VERIFY_WINDOW
        )));
    }
    let w = v.ring.window / 2;
    if v.max_seqlen > w {
        return Err(bad(format!(
            "max_seqlen = {} exceeds W = {w} (window / 2): a draft window must fit one half of the ring",
            v.max_seqlen
        )));
    }
    if p.track_slots.is_null() != p.track_steps.is_null() {
        return Err(bad("track_slots and track_steps: set both or neither"));
    }
    if reach.host_indices {
        let n = v.base.batch as usize;
        // SAFETY: the documented extents: slots and track_* [batch], pending [num_slots, 2 + W].
        let slots = unsafe { live_slots(b.slots, b.batch, b.num_slots)? };
        let e = 2 + w as usize;
        let mut lens = vec![0i32; n];
        for (row, &s) in slots.iter().enumerate().filter(|(_, &s)| s >= 0) {
            // SAFETY: as above; only live rows' entries are read.
            let entry = unsafe { host_ints(p.pending.add(s as usize * e), e) };
            pending_entry(&entry, w as usize, s)?;
            lens[row] = entry[0];
        }
        if !p.track_slots.is_null() {
            // SAFETY: as above.
            let (ts, st) = unsafe { (host_ints(p.track_slots, n), host_ints(p.track_steps, n)) };
            indices::tracks(&ts, &st, &slots, &lens, b.num_slots)?;
            for (row, &t) in ts.iter().enumerate().filter(|(_, &t)| t >= 0) {
                // SAFETY: as above; t is in 0..num_slots (indices::tracks).
                let n = unsafe { *p.pending.add(t as usize * e) };
                if n != 0 {
                    return Err(bad(format!(
                        "track_slots[{row}] = {t} has {n} records pending (pending[{t}][0] = {n}): they would stay \
                         under its new snapshot and be replayed onto it; replayssm_defer RESET the slot first"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// What every per-slot bookkeeping kernel's params share (defer, the buffered cursors): an op of
/// three, a batch of rows, a pool with slots, the slots array.
fn bookkeeping(op: i32, ops: &str, batch: i32, num_slots: i32, slots: *const i32) -> Check {
    in_range(op, 0, 2, ops)?;
    in_range(batch, 1, ffi::RSSM_MAX_BATCH as i32, "batch")?;
    at_least(num_slots as i64, 1, "num_slots")?;
    nonnull(slots, "slots")
}

/// The checks of `rssm_defer`'s params (the Rust wrapper's launch).
pub(crate) fn defer(p: &ffi::rssm_defer_params, reach: impl Into<Reach>) -> Check {
    let reach: Reach = reach.into();
    bookkeeping(
        p.op,
        "op (0 = COMMIT, 1 = GATHER, 2 = RESET)",
        p.batch,
        p.num_slots,
        p.slots,
    )?;
    in_range(p.window, 1, ffi::RSSM_MAX_VERIFY_WINDOW as i32, "window (W)")?;
    nonnull(p.pending, "pending")?;
    let commit = p.op == ffi::rssm_defer_op_RSSM_DEFER_COMMIT as i32;
    if commit {
        match (p.accept_lens.is_null(), p.accept_paths.is_null()) {
            (false, true) if p.path_width == 0 => {}
            (false, true) => return Err(bad("path_width must be 0 without accept_paths")),
            (true, false) => in_range(p.path_width, 1, p.window, "path_width (columns of accept_paths)")?,
            _ => return Err(bad("COMMIT: give exactly one of accept_lens and accept_paths")),
        }
    }
    if p.op == ffi::rssm_defer_op_RSSM_DEFER_GATHER as i32 {
        nonnull(p.paths, "paths")?;
    }
    if reach.host_indices {
        let b = p.batch as usize;
        let w = p.window as usize;
        // SAFETY: the documented extents: slots and accept_lens [batch], accept_paths
        // [batch, path_width], pending [num_slots, 2 + window].
        let slots = unsafe { live_slots(p.slots, p.batch, p.num_slots)? };
        if p.op != ffi::rssm_defer_op_RSSM_DEFER_RESET as i32 {
            let table = unsafe { host_ints(p.pending, p.num_slots as usize * (2 + w)) };
            pending_entries(&table, w, &slots)?;
        }
        if commit {
            if p.accept_paths.is_null() {
                // SAFETY: as above.
                let lens = unsafe { host_ints(p.accept_lens, b) };
                indices::lengths("accept_lens", &lens, &slots, p.window)?;
            } else {
                let pw = p.path_width as usize;
                // SAFETY: as above.
                indices::paths(&unsafe { host_ints(p.accept_paths, b * pw) }, pw, &slots, p.window)?;
            }
        }
    }
    Ok(())
}

/// The buffered speculative mode's ring length `cache_len` (L) for draft windows of `window` (T)
/// tokens (`limits::buffered_cache_len_outside`).
pub fn buffered_cache_len(cache_len: i64, window: i64) -> Check {
    match crate::limits::buffered_cache_len_outside(cache_len, window) {
        Some(why) => Err(bad(why)),
        None => Ok(()),
    }
}

/// The buffered speculative mode's draft window T (the longest window of a step): a verify window.
pub fn buffered_window(window: i64) -> Check {
    in_range(
        window,
        1,
        ffi::RSSM_MAX_VERIFY_WINDOW,
        "window (T, the longest draft window of a step)",
    )
}

/// Rows per VB block for windows of up to `t` tokens over a ring of `l` positions: the whole head
/// (0) where its shared memory fits, else the largest of 64, 32 and 16 rows that fits (V's own
/// staged rule included). The Rust wrapper launches with it; `BufferedRing::for_pool` refuses a
/// ring no block fits.
pub fn buffered_block_rows(t: usize, l: usize, k: usize, v: usize, kda: bool) -> std::result::Result<i32, String> {
    for rows in [0u32, 64, 32, 16] {
        let key = crate::tuning::Key {
            kernel: crate::tuning::Kernel::V,
            kda,
            k,
            v,
            hv: 1,
            window: t,
            batch: 1,
        };
        let staged = crate::tuning::Choice {
            imp: crate::tuning::Impl::Staged,
            block_rows: rows,
        };
        if !crate::tuning::fits(&key, staged) || l > crate::limits::MAX_BUFFERED_CACHE_LEN {
            continue;
        }
        // SAFETY: a pure size computation on launchable shapes (`fits` bounded T, K and V).
        let smem = unsafe {
            ffi::rssm_verify_buffered_smem_bytes(t as i32, l as i32, k as i32, kda as i32, rows as i32, v as i32)
        };
        if smem <= ffi::RSSM_VERIFY_STAGED_MAX_SMEM as i64 {
            return Ok(rows as i32);
        }
    }
    Err(format!(
        "cache_len = {l} with T = {t}, K = {k}, V = {v}{}: one VB block's shared memory exceeds {} bytes even at \
         16 rows per block (a shorter ring or window)",
        if kda { " (KDA)" } else { "" },
        ffi::RSSM_VERIFY_STAGED_MAX_SMEM
    ))
}

/// The checks of `rssm_verify_buffered`'s params (the Rust wrapper's launch): V's on the verify
/// (STAGED, linear chains, the ring required), the ring of L positions, the cursors and ring_u.
pub(crate) fn verify_buffered(p: &ffi::rssm_verify_buffered_params, reach: impl Into<Reach>) -> Check {
    let reach: Reach = reach.into();
    let v = &p.verify;
    let b = &v.base;
    if b.impl_ != ffi::rssm_impl_RSSM_IMPL_STAGED as i32 {
        return Err(bad(format!(
            "impl = {}: VB has one implementation, STAGED (1), with block_rows as V's",
            b.impl_
        )));
    }
    let l = v.ring.window;
    if let Some(why) = crate::limits::outside(
        "ring.window (L)",
        l.into(),
        1,
        crate::limits::MAX_BUFFERED_CACHE_LEN as i64,
    ) {
        return Err(bad(format!("{why}: VB stages a slot's history in shared memory")));
    }
    verify(v, reach)?;
    if v.ring.v.is_null() {
        return Err(bad(
            "VB writes the new window after the history: set ring.v, ring.k, ring.g, ring.beta",
        ));
    }
    if !v.parent.is_null() {
        return Err(bad(
            "parent is set: VB verifies linear chains (tree drafts keep their history as paths: use VT + FT)",
        ));
    }
    nonnull(p.cursors, "cursors")?;
    nonnull(p.ring_u, "ring_u")?;
    let (k, vd) = (b.K as i64, b.V as i64);
    dense("ring_u", &[b.num_layers, b.num_slots, b.HV, l, b.V], 4)?;
    // No block of any rows fits (what `BufferedRing::for_pool` refuses, in its words); verify()
    // bounded T, K and V.
    let kda = b.variant == ffi::rssm_variant_RSSM_VARIANT_KDA as i32;
    buffered_block_rows(v.max_seqlen as usize, l as usize, b.K as usize, b.V as usize, kda).map_err(bad)?;
    // SAFETY: a pure size computation on checked shapes (verify() bounded T, K and V).
    let smem = unsafe { ffi::rssm_verify_buffered_smem_bytes(v.max_seqlen, l, b.K, b.variant, b.block_rows, b.V) };
    if smem > ffi::RSSM_VERIFY_STAGED_MAX_SMEM as i64 {
        return Err(bad(format!(
            "block_rows = {} with max_seqlen = {}, ring.window (L) = {l}, K = {k}, V = {vd}: one VB block's \
             shared memory ({smem} bytes) exceeds {} bytes (fewer block_rows, a shorter ring or window)",
            b.block_rows,
            v.max_seqlen,
            ffi::RSSM_VERIFY_STAGED_MAX_SMEM
        )));
    }
    if reach.host_indices {
        // SAFETY: the documented extents: slots [batch], cu_seqlens [batch + 1], cursors [num_slots].
        let (slots, cu) =
            unsafe { token_rows(b.slots, v.cu_seqlens, b.batch, b.num_slots, v.num_tokens, v.max_seqlen)? };
        for (row, &s) in slots.iter().enumerate().filter(|(_, &s)| s >= 0) {
            // SAFETY: as above; only live rows' cursors are read.
            let h = unsafe { std::ptr::read_unaligned(p.cursors.add(s as usize)) };
            indices::history("cursors[slots]", row, h, s, v.ring.window, cu[row + 1] - cu[row])?;
        }
    }
    Ok(())
}

/// The checks of `rssm_buffered`'s params (the Rust wrapper's launch).
pub(crate) fn buffered(p: &ffi::rssm_buffered_params, reach: impl Into<Reach>) -> Check {
    let reach: Reach = reach.into();
    bookkeeping(
        p.op,
        "op (0 = COMMIT, 1 = FLUSH, 2 = RESET)",
        p.batch,
        p.num_slots,
        p.slots,
    )?;
    buffered_window(p.window.into())?;
    buffered_cache_len(p.cache_len.into(), p.window.into())?;
    nonnull(p.cursors, "cursors")?;
    let (commit, reset) = (
        p.op == ffi::rssm_buffered_op_RSSM_BUFFERED_COMMIT as i32,
        p.op == ffi::rssm_buffered_op_RSSM_BUFFERED_RESET as i32,
    );
    if commit {
        nonnull(p.accept_lens, "accept_lens")?;
    }
    if !reset {
        nonnull(p.flush_lens, "flush_lens")?;
    }
    if reach.host_indices {
        // SAFETY: the documented extents: slots, accept_lens and flush_lens [batch], cursors
        // [num_slots].
        let slots = unsafe { live_slots(p.slots, p.batch, p.num_slots)? };
        if !reset {
            for (row, &s) in slots.iter().enumerate().filter(|(_, &s)| s >= 0) {
                // SAFETY: as above; only live rows' cursors are read.
                let h = unsafe { std::ptr::read_unaligned(p.cursors.add(s as usize)) };
                indices::history("cursors[slots]", row, h, s, p.cache_len, p.window)?;
            }
        }
        if commit {
            // SAFETY: as above.
            let lens = unsafe { host_ints(p.accept_lens, p.batch as usize) };
            indices::lengths("accept_lens", &lens, &slots, p.window)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::state_pitches;

    #[test]
    fn pool_pitches_that_would_wrap_the_kernels_offsets_are_refused_without_overflowing() {
        // 2^40-element slot pitches times 2^31 - 1 slots: 2^71, past i64 (it panicked in debug).
        let e = state_pitches(1 << 40, 0, 1, i32::MAX, 1, 32, 32)
            .unwrap_err()
            .to_string();
        assert!(e.contains("exceed 64-bit byte addressing"), "{e}");
        let e = state_pitches(0, 1 << 40, 1 << 22, 1, 1, 32, 32)
            .unwrap_err()
            .to_string();
        assert!(e.contains("exceed 64-bit byte addressing"), "{e}");
        // A page-major pool (4 layers inside each slot, and more) and a packed one pass.
        state_pitches(4 * 1024 + 64, 1024, 4, 100, 1, 32, 32).unwrap();
        state_pitches(0, 0, 4, 100, 1, 32, 32).unwrap();
        // Layers one slot apart in a pool of several slots overlap.
        assert!(state_pitches(0, 1024, 2, 3, 1, 32, 32).is_err());
    }
}
