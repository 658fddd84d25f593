//! Kernel VB, the buffered speculative verify: per layer, each live request's new window is
//! verified from its fp32 checkpoint followed by its accepted history (the spec ring's positions
//! `0..h`, `h` its cursor) without forming that state: the checkpoint is projected on the window
//! once (staged V's streaming pass) and each history record adds the correction u it stored when
//! it was verified (outputs within V's tolerance; with `h = 0` staged V's bits). The window's raw
//! records and corrections are written after the history. The checkpoint is only read; a commit that leaves no room for the next window flushes the row
//! (kernel F on the flush lengths the commit wrote, bit-identical to R). A step then reads each
//! layer's state once and writes it once every few steps, instead of V's read plus F's read and
//! write.
//!
//! The state between steps is a [`BufferedRing`] (ring of L positions and cursors). Per step:
//! every layer's [`Stream::verify_buffered`], then [`Stream::buffered_fold`] with
//! [`BufferedFold::Commit`] (the cursors and kernel F's flush); [`BufferedFold::Flush`] makes
//! slots' checkpoints current outside the step; [`Stream::buffered_reset`] drops a slot's history
//! when it is handed to a new request.
//!
//! Device code: `csrc/include/replayssm/device/verify_buffered.cuh` (verify.cuh's
//! `build_window`, verify_staged.cuh's streaming pass); launcher `csrc/kernels/verify_buffered.cu`;
//! reference: R over the history then V's f64 reference; tests: `tests/verify_buffered.rs`.

use crate::checks::check_count;
use crate::error::Result;
use crate::ffi;
use crate::kernels::fold::DeviceAccepted;
use crate::kernels::verify::{check_window_within, validate_verify, verify_params, VerifyPlan};
use crate::memory::{Device, DeviceActViewMut, DeviceSlice, DeviceSliceMut, Stream};
use crate::runtime::launch::{check_status, launch, Exec};
use crate::state::buffered_ring::BufferedRing;
use crate::state::pool::CheckpointPool;
use crate::tokens::RecurrentInputs;

/// VB's checks beyond V's: the ring attached to this pool, the draft window within the ring's
/// T (the window the commit leaves room for).
fn check_verify_buffered(plan: &VerifyPlan, pool: &CheckpointPool<Device>, bring: &BufferedRing<Device>) -> Result<()> {
    bring.check_pool(pool)?;
    check_window_within(plan, bring.window(), "the buffered ring leaves room for windows of T =")
}

impl Stream {
    /// Kernel VB for layer `layer` on device memory, enqueued on this stream: no allocation, copy
    /// or synchronisation; rows with bad device-side slots or cursors are skipped (outputs zero)
    /// and flagged in the stream's error word.
    pub fn verify_buffered(
        &self,
        inp: &RecurrentInputs<'_, Device>,
        pool: &CheckpointPool<Device>,
        layer: usize,
        o: &mut DeviceActViewMut<'_>,
        bring: &mut BufferedRing<Device>,
    ) -> Result<VerifyPlan> {
        let plan = validate_verify(self.backend(), inp, pool, layer, o, Some(&bring.ring))?;
        check_verify_buffered(&plan, pool, bring)?;
        let exec = Exec::on(self);
        // The token pointers are checked (and named in errors) before the pool's, as in V.
        let mut verify = verify_params(
            &exec,
            inp,
            None,
            std::ptr::null(),
            pool,
            layer,
            &plan,
            o,
            Some(&mut bring.ring),
        )?;
        verify.base.state = exec.store("pool", pool.storage())?.cast_mut();
        let params = with_implementation(ffi::rssm_verify_buffered_params {
            verify,
            cursors: exec.store("cursors", &bring.cursors)?,
            ring_u: exec.store_mut("ring_u", &mut bring.ring_u)?,
        });
        // The checks the C ABI runs on the same params (one source: `checks::params`).
        crate::checks::params::verify_buffered(&params, exec.backend)?;
        let st = launch!(&exec, rssm_verify_buffered, rssm_emu_verify_buffered, &params);
        check_status("verify_buffered", exec.backend, st)?;
        Ok(plan)
    }

    /// The buffered cursors' COMMIT or FLUSH for `slots` (`replayssm_buffered`'s op), then kernel
    /// F on the flush lengths it wrote into `flush_lens` (`[B]` scratch: each row's folded
    /// length, 0 for a row that does not flush). Two launches, no synchronisation.
    pub fn buffered_fold(
        &self,
        pool: &mut CheckpointPool<Device>,
        bring: &mut BufferedRing<Device>,
        slots: DeviceSlice<'_, i32>,
        fold: BufferedFold<'_>,
        mut flush_lens: DeviceSliceMut<'_, i32>,
    ) -> Result<()> {
        bring.check_pool(pool)?;
        check_count("flush_lens (scratch)", flush_lens.len(), slots.len(), "one per request")?;
        let (op, accept_lens) = match fold {
            BufferedFold::Commit { accept_lens } => {
                check_count("accept_lens", accept_lens.len(), slots.len(), "one per request")?;
                (ffi::rssm_buffered_op_RSSM_BUFFERED_COMMIT, Some(accept_lens))
            }
            BufferedFold::Flush => (ffi::rssm_buffered_op_RSSM_BUFFERED_FLUSH, None),
        };
        buffered_kernel(
            self,
            bring,
            op,
            &slots,
            accept_lens.as_ref(),
            Some(flush_lens.reborrow()),
        )?;
        self.fold(
            pool,
            &bring.ring,
            slots,
            DeviceAccepted::Lens(flush_lens.as_slice()),
            None,
        )
    }

    /// Drops the histories of `slots` (a slot handed to a new request, whose checkpoint the
    /// prefill wrote, or freed).
    pub fn buffered_reset(&self, bring: &mut BufferedRing<Device>, slots: DeviceSlice<'_, i32>) -> Result<()> {
        buffered_kernel(
            self,
            bring,
            ffi::rssm_buffered_op_RSSM_BUFFERED_RESET,
            &slots,
            None,
            None,
        )
    }
}

/// What [`Stream::buffered_fold`] folds (the ops of `replayssm_buffered` that touch a checkpoint;
/// RESET is [`Stream::buffered_reset`]).
#[derive(Clone, Copy, Debug)]
pub enum BufferedFold<'a> {
    /// Once per step, after the step's last layer's VB (not after each layer): each live row's
    /// history grows by its first `accept_lens[b]` window records (0..=T, bonus token included);
    /// a row whose next window would not fit flushes: its history is folded into the checkpoint
    /// (every layer) and its cursor returns to 0.
    Commit { accept_lens: DeviceSlice<'a, i32> },
    /// Folds the histories of the slots (every layer) into their checkpoints and empties them:
    /// what a finished, preempted or swapped request, a prefix-cache snapshot or a state transfer
    /// needs before the checkpoint is read. Between steps only.
    Flush,
}

/// VB's implementation fields, as the Rust wrapper and the C ABI launch it: the one
/// implementation (STAGED) over the rows per block the tuning table chooses for the call
/// (`tuning::Kernel::VB`: fewer rows where the batch is small; its choices fit the largest ring),
/// else over the whole head where its shared memory fits, else the most rows per block that fit
/// (`checks::params::buffered_block_rows`). A shape no block fits (or not a shape at all) gets 16
/// rows, and `checks::params::verify_buffered` refuses it, naming it.
pub(crate) fn with_implementation(mut p: ffi::rssm_verify_buffered_params) -> ffi::rssm_verify_buffered_params {
    use crate::tuning::{choose, Impl, Kernel, Key};
    let v = &mut p.verify;
    v.base.impl_ = ffi::rssm_impl_RSSM_IMPL_STAGED as i32;
    let kda = v.base.variant == ffi::rssm_variant_RSSM_VARIANT_KDA as i32;
    let tuned = choose(&Key::of_launch(Kernel::VB, &v.base, v.max_seqlen));
    let dims = [v.max_seqlen, v.ring.window, v.base.K, v.base.V].map(usize::try_from);
    v.base.block_rows = match dims {
        _ if tuned.imp == Impl::Staged => tuned.block_rows as i32,
        [Ok(t), Ok(l), Ok(k), Ok(d)] => crate::checks::params::buffered_block_rows(t, l, k, d, kda).unwrap_or(16),
        _ => 16,
    };
    p
}

/// Launches the cursor kernel with `op`.
fn buffered_kernel(
    stream: &Stream,
    bring: &mut BufferedRing<Device>,
    op: ffi::rssm_buffered_op,
    slots: &DeviceSlice<'_, i32>,
    accept_lens: Option<&DeviceSlice<'_, i32>>,
    flush_lens: Option<DeviceSliceMut<'_, i32>>,
) -> Result<()> {
    let exec = Exec::on(stream);
    crate::checks::check_bookkeeping_rows(slots.len())?;
    let mut flush_lens = flush_lens;
    let params = ffi::rssm_buffered_params {
        cursors: exec.store_mut("cursors", &mut bring.cursors)?,
        slots: exec.slice("slots", slots)?,
        accept_lens: match accept_lens {
            Some(a) => exec.slice("accept_lens", a)?,
            None => std::ptr::null(),
        },
        flush_lens: match flush_lens.as_mut() {
            Some(f) => exec.slice_mut("flush_lens", f)?,
            None => std::ptr::null_mut(),
        },
        error_word: exec.word,
        batch: slots.len() as i32,
        num_slots: bring.shape().slots as i32,
        cache_len: bring.cache_len() as i32,
        window: bring.window() as i32,
        op: op as i32,
        reserved: 0,
    };
    crate::checks::params::buffered(&params, exec.backend)?;
    let st = launch!(&exec, rssm_buffered, rssm_emu_buffered, &params);
    check_status("buffered", exec.backend, st)
}

#[cfg(test)]
mod tests {
    use super::with_implementation;
    use crate::ffi;
    use crate::tuning::{self, Choice, Impl, Kernel};

    /// A VB launch's shape fields: K = V = 128, `hv` value heads, T = 4, L = 16, `batch` rows.
    fn params(kda: bool, hv: usize, batch: usize) -> ffi::rssm_verify_buffered_params {
        let mut p = ffi::rssm_verify_buffered_params::default();
        let b = &mut p.verify.base;
        (b.K, b.V, b.HV, b.batch) = (128, 128, hv as i32, batch as i32);
        b.variant = if kda {
            ffi::rssm_variant_RSSM_VARIANT_KDA
        } else {
            ffi::rssm_variant_RSSM_VARIANT_GDN
        } as i32;
        (p.verify.max_seqlen, p.verify.ring.window) = (4, 16);
        p
    }

    fn rows_of(p: ffi::rssm_verify_buffered_params) -> (i32, i32) {
        let v = with_implementation(p).verify;
        (v.base.impl_, v.base.block_rows)
    }

    #[test]
    fn vb_runs_the_tables_rows_per_block_else_the_whole_head_where_it_fits() {
        let staged = ffi::rssm_impl_RSSM_IMPL_STAGED as i32;
        // A forced choice is what the launch gets.
        let forced = Choice {
            imp: Impl::Staged,
            block_rows: 32,
        };
        {
            let _f = tuning::force(Kernel::VB, forced);
            assert_eq!(rows_of(params(false, 64, 1)), (staged, 32));
        }
        if std::env::var_os(tuning::TABLE_ENV).is_some() {
            println!("skipped the shipped table's part: {} replaces it", tuning::TABLE_ENV);
            return;
        }
        // Every shipped VB entry (the model's at L = 16) is what a launch in its bucket gets, and
        // the small batches split the head (more blocks than value heads).
        let table = tuning::active_table().expect("the shipped table parses");
        let vb: Vec<_> = table.entries.iter().filter(|e| e.kernel == Kernel::VB).collect();
        assert!(!vb.is_empty(), "the shipped table has no VB entry");
        for e in &vb {
            let p = params(e.variant == "kda", e.hv, e.b);
            assert_eq!(rows_of(p), (staged, e.choice.block_rows as i32), "{e:?}");
        }
        assert!(
            vb.iter().any(|e| e.b == 1 && e.choice.block_rows > 0),
            "no shipped VB entry splits the head at B = 1"
        );
        // Outside the table (another head count): the whole head, as its shared memory fits.
        assert_eq!(rows_of(params(false, 3, 1)), (staged, 0));
    }
}
