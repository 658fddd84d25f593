//! The kernel entries of the C ABI: read the params (struct_size first), pick the backend, check
//! every host-visible field with a message naming it, then call the kernel layer's launcher on
//! the caller's stream (whose can_implement runs the same checks again, from the same source).

use std::ffi::c_void;

use super::params::*;
use super::{backend_of, guard, read_params, replayssm_status, Failure};
use crate::backend::Backend;
use crate::checks::params as checks;
use crate::runtime::launch::{check_status, launch, Exec};
use crate::tuning::Kernel;

type Check = Result<(), Failure>;

/// The header and padding fields: no flags are defined in this ABI, and every `reserved` field
/// (named as the caller spells it) must stay 0 so that a later version can give it a meaning
/// without misreading an old caller's garbage.
fn header(flags: u32, reserved: &[(&str, i32)]) -> Check {
    if flags != 0 {
        return Err(Failure::invalid(format!(
            "flags = {flags:#x}: no flags are defined in ABI {}, it must be 0",
            super::REPLAYSSM_ABI_VERSION
        )));
    }
    if let Some((name, value)) = reserved.iter().find(|(_, v)| *v != 0) {
        return Err(Failure::invalid(format!("{name} = {value}: it must be 0")));
    }
    Ok(())
}

/// V's header and reserved fields (`prefix`: where VF nests it).
fn verify_header(p: &replayssm_verify_params, prefix: &str) -> Check {
    let named = |f: &str| format!("{prefix}{f}");
    let (b, r) = (named("base.reserved"), named("ring.reserved"));
    header(p.flags, &[(&b, p.base.reserved), (&r, p.ring.reserved)])
}

/// R's and D's header: the base's reserved field. (Their own were reserved in ABI 3 until they
/// became `record_dtype` and `ring_dtype`, whose 0 is what an older caller's 0 meant: f32.)
fn token_header(flags: u32, base: &replayssm_base_params) -> Check {
    header(flags, &[("base.reserved", base.reserved)])
}

/// A kernel entry's params: the C struct's name and the header and reserved fields (named as
/// the caller spells them) that must stay 0.
trait EntryParams: Copy {
    const NAME: &'static str;
    fn header(&self) -> Check;
}

/// What every kernel entry does first: read the params (struct_size first), pick the backend,
/// check the header.
///
/// # Safety
/// As [`read_params`].
unsafe fn open<P: EntryParams>(params: *const P, backend: i32) -> Result<(P, Backend), Failure> {
    let p = read_params(params, P::NAME)?;
    let backend = backend_of(backend)?;
    p.header()?;
    Ok((p, backend))
}

// One impl per entry's params: the C struct's name, and the header check.
macro_rules! entry_params {
    ($($ty:ident => |$p:ident| $header:expr;)+) => {
        $(impl EntryParams for $ty {
            const NAME: &'static str = stringify!($ty);
            fn header(&self) -> Check {
                let $p = self;
                $header
            }
        })+
    };
}

entry_params! {
    replayssm_recurrent_params => |p| token_header(p.flags, &p.base);
    replayssm_verify_params => |p| verify_header(p, "");
    replayssm_fold_params => |p| header(
        p.flags,
        &[("base.reserved", p.base.reserved), ("ring.reserved", p.ring.reserved), ("reserved", p.reserved)],
    );
    replayssm_replay_params => |p| {
        header(p.flags, &[("base.reserved", p.base.reserved), ("ring.reserved", p.ring.reserved)])
    };
    replayssm_decode_params => |p| token_header(p.flags, &p.base);
    replayssm_cursor_params => |p| header(p.flags, &[]);
    replayssm_verify_fold_params => |p| nested_verify_header(Self::NAME, p.flags, &p.verify);
    replayssm_defer_params => |p| header(p.flags, &[("reserved", p.reserved)]);
    replayssm_verify_buffered_params => |p| nested_verify_header(Self::NAME, p.flags, &p.verify);
    replayssm_buffered_params => |p| header(p.flags, &[("reserved", p.reserved)]);
}

/// The header of a params struct that nests a whole verify (VF, VB; `outer` its C name): its own
/// flags, the nested verify struct's size, then V's header fields.
fn nested_verify_header(outer: &str, flags: u32, verify: &replayssm_verify_params) -> Check {
    header(flags, &[])?;
    let want = std::mem::size_of::<replayssm_verify_params>();
    if verify.struct_size as usize != want {
        return Err(Failure::new(
            replayssm_status::REPLAYSSM_ERR_STRUCT_SIZE,
            format!(
                "{outer}.verify.struct_size is {}, but this library expects {want} (sizeof(replayssm_verify_params))",
                verify.struct_size
            ),
        ));
    }
    verify_header(verify, "verify.")
}

/// What an entry does after its header: build the kernel layer's params (`K`, the tuning table's
/// choice applied), check them (the one source of every host rule), and call the backend's
/// launcher through the one launch path of the Rust wrappers (`runtime::launch`), its status
/// mapped once.
struct Entry<P, K> {
    /// The C function (`replayssm_` and the kernel's name in messages).
    name: &'static str,
    prepare: fn(&P) -> K,
    check: fn(&K, Backend) -> crate::Result<()>,
    launch: fn(&Exec, &K) -> crate::ffi::rssm_status,
}

impl<P: EntryParams, K> Entry<P, K> {
    /// # Safety
    /// As [`read_params`]; the params' pointers cover what the kernel layer describes for the
    /// backend (device memory for CUDA, host for EMULATED).
    unsafe fn run(&self, params: *const P, backend: i32, stream: *mut c_void) -> replayssm_status {
        guard(self.name, || {
            let (p, backend) = open(params, backend)?;
            let kp = (self.prepare)(&p);
            (self.check)(&kp, backend)?;
            // The error word is in the params; the emulator ignores the stream.
            let exec = Exec {
                backend,
                stream: if backend == Backend::Cuda {
                    stream
                } else {
                    std::ptr::null_mut()
                },
                word: std::ptr::null_mut(),
            };
            let kernel = self.name.strip_prefix("replayssm_").unwrap_or(self.name);
            check_status(kernel, backend, (self.launch)(&exec, &kp)).map_err(Failure::from)
        })
    }
}

/// The kernel params with the tuning table's implementation for `kernel` at the call's window
/// (`at` names the base and the window of `K`).
fn tuned<K>(mut k: K, kernel: Kernel, at: fn(&mut K) -> (&mut crate::ffi::rssm_base_params, i32)) -> K {
    let (base, window) = at(&mut k);
    crate::tuning::apply(kernel, base, window);
    k
}

/// Materialise replays every layer: `layer` is not the caller's to set there.
fn all_layers(mut k: crate::ffi::rssm_decode_params) -> crate::ffi::rssm_decode_params {
    k.base.layer = 0;
    k
}

// One row per C entry: its name, its params, how the kernel layer's params are prepared (the
// tuning table applied), its checks in `checks::params` and its two launchers. Each row becomes
// a unit type whose `run` is the entry's body.
macro_rules! entries {
    ($($ty:ident = $name:ident($params:ty): $check:ident, $cuda:ident, $emu:ident, |$p:ident| $prepare:expr;)+) => {
        $(
            struct $ty;
            impl $ty {
                /// # Safety
                /// As [`Entry::run`].
                unsafe fn run(params: *const $params, backend: i32, stream: *mut c_void) -> replayssm_status {
                    Entry {
                        name: stringify!($name),
                        prepare: |$p: &$params| $prepare,
                        check: |k, backend| checks::$check(k, backend),
                        launch: |exec, k| launch!(exec, $cuda, $emu, k),
                    }
                    .run(params, backend, stream)
                }
            }
        )+
    };
}

entries! {
    Recurrent = replayssm_recurrent(replayssm_recurrent_params): recurrent, rssm_recurrent, rssm_emu_recurrent, |p| p.kernel();
    Verify = replayssm_verify(replayssm_verify_params): verify, rssm_verify, rssm_emu_verify, |p| tuned(p.kernel(), Kernel::V, |k| (&mut k.base, k.max_seqlen));
    Fold = replayssm_fold(replayssm_fold_params): fold, rssm_fold, rssm_emu_fold, |p| tuned(p.kernel(), Kernel::F, |k| (&mut k.base, k.ring.window));
    Replay = replayssm_replay(replayssm_replay_params): replay, rssm_replay, rssm_emu_replay, |p| tuned(p.kernel(), Kernel::P, |k| (&mut k.base, k.ring.window));
    Decode = replayssm_decode(replayssm_decode_params): decode, rssm_decode, rssm_emu_decode, |p| tuned(p.kernel(), Kernel::D, |k| (&mut k.base, k.cache_len));
    Materialize = replayssm_decode_materialize(replayssm_decode_params): materialize, rssm_decode_materialize, rssm_emu_decode_materialize, |p| all_layers(p.kernel());
    Cursors = replayssm_decode_cursors(replayssm_cursor_params): cursors, rssm_decode_cursors, rssm_emu_decode_cursors, |p| p.kernel();
    VerifyFold = replayssm_verify_fold(replayssm_verify_fold_params): verify_fold, rssm_verify_fold, rssm_emu_verify_fold, |p| tuned(p.kernel(), Kernel::VF, |k| (&mut k.verify.base, k.verify.max_seqlen));
    Defer = replayssm_defer(replayssm_defer_params): defer, rssm_defer, rssm_emu_defer, |p| p.kernel();
    VerifyBuffered = replayssm_verify_buffered(replayssm_verify_buffered_params): verify_buffered, rssm_verify_buffered, rssm_emu_verify_buffered, |p| crate::kernels::verify_buffered::with_implementation(p.kernel());
    Buffered = replayssm_buffered(replayssm_buffered_params): buffered, rssm_buffered, rssm_emu_buffered, |p| p.kernel();
}

/// Kernel R, the recurrent baseline: outputs of every token and, with `write_state`, the final
/// state of each live request; `snapshots` (optional) receives the state after every token.
///
/// # Safety
/// `params` is NULL or points to a `replayssm_recurrent_params` whose pointers cover the extents
/// described in the kernel layer for `backend` (device memory for CUDA, host for EMULATED).
#[no_mangle]
pub unsafe extern "C" fn replayssm_recurrent(
    backend: i32,
    params: *const replayssm_recurrent_params,
    stream: *mut c_void,
) -> replayssm_status {
    Recurrent::run(params, backend, stream)
}

/// Kernel V (chunked verify of one layer; tree verify VT when `parent` is set): reads the
/// checkpoint, writes all draft outputs and the spec ring (when its four pointers are set).
///
/// # Safety
/// As `replayssm_recurrent`, for a `replayssm_verify_params`.
#[no_mangle]
pub unsafe extern "C" fn replayssm_verify(
    backend: i32,
    params: *const replayssm_verify_params,
    stream: *mut c_void,
) -> replayssm_status {
    Verify::run(params, backend, stream)
}

/// Kernel F, fold-every-commit over all layers (path fold FT with `accept_paths`): replays each
/// live request's accepted ring records into its fp32 checkpoint, bit-identical to kernel R.
///
/// # Safety
/// As `replayssm_recurrent`, for a `replayssm_fold_params`.
#[no_mangle]
pub unsafe extern "C" fn replayssm_fold(
    backend: i32,
    params: *const replayssm_fold_params,
    stream: *mut c_void,
) -> replayssm_status {
    Fold::run(params, backend, stream)
}

/// Kernel P, fp32 checkpoint replay of one layer: replays `counts[b]` ring records of each live
/// slot into its checkpoint (the primitive behind fold, flush and export).
///
/// # Safety
/// As `replayssm_recurrent`, for a `replayssm_replay_params`.
#[no_mangle]
pub unsafe extern "C" fn replayssm_replay(
    backend: i32,
    params: *const replayssm_replay_params,
    stream: *mut c_void,
) -> replayssm_status {
    Replay::run(params, backend, stream)
}

/// Kernel D, buffered decode of layer `layer` (one token per row): outputs from the checkpoint
/// and the pending records; appends a record, or stores the state on a flush step. Take the
/// cursor snapshot (`replayssm_decode_cursors`, SNAPSHOT) before the first layer and ADVANCE
/// after the last.
///
/// # Safety
/// As `replayssm_recurrent`, for a `replayssm_decode_params`.
#[no_mangle]
pub unsafe extern "C" fn replayssm_decode(
    backend: i32,
    params: *const replayssm_decode_params,
    stream: *mut c_void,
) -> replayssm_status {
    Decode::run(params, backend, stream)
}

/// Materialise: replays `positions[b]` pending records of every layer into slot `slots[b]`'s
/// checkpoint (before export, prefix caching or copy-on-write); reset the cursors afterwards.
/// Token fields are ignored.
///
/// # Safety
/// As `replayssm_recurrent`, for a `replayssm_decode_params`.
#[no_mangle]
pub unsafe extern "C" fn replayssm_decode_materialize(
    backend: i32,
    params: *const replayssm_decode_params,
    stream: *mut c_void,
) -> replayssm_status {
    Materialize::run(params, backend, stream)
}

/// The buffered-decode cursor protocol on device-resident cursors: SNAPSHOT before a step,
/// ADVANCE after it, RESET when a slot is (re)allocated or freed (`op`, a `replayssm_cursor_op`).
///
/// # Safety
/// As `replayssm_recurrent`, for a `replayssm_cursor_params`.
#[no_mangle]
pub unsafe extern "C" fn replayssm_decode_cursors(
    backend: i32,
    params: *const replayssm_cursor_params,
    stream: *mut c_void,
) -> replayssm_status {
    Cursors::run(params, backend, stream)
}

/// Kernel VF (deferred fold) of one layer: replays each live request's pending records (the
/// pending table) into its checkpoint, stores it (and F's track snapshot when set), then verifies
/// the new window from that state (as `replayssm_verify`; tree verify with `parent`) and writes
/// its raw records into the other half of the ring. Then, once per step after the last layer's VF
/// (not after each layer: a second COMMIT would re-commit the step), `replayssm_defer` COMMIT.
///
/// # Safety
/// As `replayssm_recurrent`, for a `replayssm_verify_fold_params`.
#[no_mangle]
pub unsafe extern "C" fn replayssm_verify_fold(
    backend: i32,
    params: *const replayssm_verify_fold_params,
    stream: *mut c_void,
) -> replayssm_status {
    VerifyFold::run(params, backend, stream)
}

/// The deferred fold's pending table: COMMIT after a step's last VF, GATHER (into `paths`) before
/// a flush through `replayssm_fold`'s path mode, RESET after it or when a slot is handed to a
/// new request (`op`, a `replayssm_defer_op`).
///
/// # Safety
/// As `replayssm_recurrent`, for a `replayssm_defer_params`.
#[no_mangle]
pub unsafe extern "C" fn replayssm_defer(
    backend: i32,
    params: *const replayssm_defer_params,
    stream: *mut c_void,
) -> replayssm_status {
    Defer::run(params, backend, stream)
}

/// Kernel VB (buffered speculative verify) of one layer: verifies each live request's new window
/// (a linear chain) from its checkpoint followed by its history (ring positions
/// `0..cursors[slot]`, each record's stored correction in `ring_u`), without writing the
/// checkpoint; writes the window's records and corrections after the history. Then, once per step
/// after the last layer's VB (not after each layer), `replayssm_buffered` COMMIT and
/// `replayssm_fold` with `accept_lens = flush_lens` on the same ring.
///
/// # Safety
/// As `replayssm_recurrent`, for a `replayssm_verify_buffered_params`.
#[no_mangle]
pub unsafe extern "C" fn replayssm_verify_buffered(
    backend: i32,
    params: *const replayssm_verify_buffered_params,
    stream: *mut c_void,
) -> replayssm_status {
    VerifyBuffered::run(params, backend, stream)
}

/// The buffered speculative verify's cursors: COMMIT after a step's last VB, FLUSH before a
/// slot's checkpoint is read, copied or handed out, RESET when a slot is handed to a new request
/// or freed (`op`, a `replayssm_buffered_op`). COMMIT and FLUSH write every row's
/// `flush_lens[b]`; `replayssm_fold` with `accept_lens = flush_lens` then folds the rows that
/// flush (every layer, bit-identical to kernel R).
///
/// # Safety
/// As `replayssm_recurrent`, for a `replayssm_buffered_params`.
#[no_mangle]
pub unsafe extern "C" fn replayssm_buffered(
    backend: i32,
    params: *const replayssm_buffered_params,
    stream: *mut c_void,
) -> replayssm_status {
    Buffered::run(params, backend, stream)
}
