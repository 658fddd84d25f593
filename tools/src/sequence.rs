//! A workload through kernel D one token per step (the decode tests and `replayssm check`'s
//! decode cases): the pool, the ring and the cursor protocol driven as an engine would.

use replayssm::checks::check_slots;
use replayssm::config::{resolve, EngineFlags};
use replayssm::dtype::ActBuffer;
use replayssm::error::{Error, Result};
use replayssm::state::decode_ring::{DecodeRing, ForceFlush};
use replayssm::tokens::validate_tokens;
use replayssm::{Backend, CheckpointPool, DType};

use crate::staged::{decode, materialize};

use crate::workload::RecurrentData;

/// What [`decode_sequence`] produced.
#[derive(Debug)]
pub struct SequenceRun {
    /// `[N, HV, V]` in the workload's packed token order.
    pub o: ActBuffer,
    /// The pool `[NS, HV, V, K]` after the last step, materialised.
    pub state: Vec<f32>,
    /// Rows that flushed (periodic or forced), over all steps.
    pub flushes: usize,
    /// Decode steps run (the longest request).
    pub steps: usize,
}

/// Feeds each request of `data` (one layer, its pool `data.state`) through kernel D one token
/// per step, with a ring of `cache_len`: request `r` decodes its `t`-th token at step `t` (null
/// row once it has none left). With `track_interval`, rows force-flush when `t + 1` is a
/// multiple of it. `on_step(t, pool, flushed)` sees the pool after each step, with which
/// requests flushed. Finally every slot is materialised. Outputs are poisoned (NaN) first.
pub fn decode_sequence(
    backend: Backend,
    data: &RecurrentData,
    cache_len: usize,
    track_interval: Option<u64>,
    on_step: impl FnMut(usize, &CheckpointPool, &[bool]),
) -> Result<SequenceRun> {
    decode_sequence_with_records(backend, data, cache_len, track_interval, DType::F32, on_step)
}

/// [`decode_sequence`] with a ring of `records` (f32, or the workload's f16/bf16:
/// [`DecodeRing::attach_with_records`]).
pub fn decode_sequence_with_records(
    backend: Backend,
    data: &RecurrentData,
    cache_len: usize,
    track_interval: Option<u64>,
    records: DType,
    mut on_step: impl FnMut(usize, &CheckpointPool, &[bool]),
) -> Result<SequenceRun> {
    let d = data.dims;
    let flags = EngineFlags {
        enable_linear_replayssm: true,
        linear_replayssm_cache_len: Some(cache_len.min(i64::MAX as usize) as i64),
        linear_attn_kind: data.variant,
        ..EngineFlags::default()
    };
    let cfg = resolve(&flags)?;
    let per_slot = d.state_elems();
    if data.state.is_empty() || data.state.len() % per_slot != 0 {
        return Err(Error::Shape {
            tensor: "state",
            expected: format!("[NS, HV={}, V={}, K={}]", d.hv, d.v, d.k),
            got: format!("{} elements", data.state.len()),
        });
    }
    // Validate the whole workload first (a corrupt case file must fail here, not allocate
    // from garbage lengths).
    d.validate()?;
    let n = data.q.len() / (d.h * d.k);
    replayssm::checks::check_seqlens(&data.cu_seqlens, n)?;
    let mut o_all = ActBuffer::nan(data.dtype, n * d.hv * d.v);
    validate_tokens(backend, &data.inputs(), &o_all.dense_mut(n, d.hv * d.v))?;
    check_slots(&data.slots, data.cu_seqlens.len() - 1, data.state.len() / per_slot)?;
    let mut pool = CheckpointPool::new(&cfg, d, 1, data.state.len() / per_slot)?;
    pool.state_mut().copy_from_slice(&data.state);
    let mut ring = DecodeRing::attach_with_records(&pool, records)?;
    let lens: Vec<usize> = data
        .cu_seqlens
        .windows(2)
        .map(|w| (w[1] - w[0]).max(0) as usize)
        .collect();
    let batch = lens.len();
    if data.slots.len() != batch {
        return Err(Error::Shape {
            tensor: "slots",
            expected: format!("[{batch}]"),
            got: format!("[{}]", data.slots.len()),
        });
    }
    for &s in data.slots.iter().filter(|&&s| s >= 0) {
        ring.allocate(s as usize)?;
    }
    let steps = lens.iter().copied().max().unwrap_or(0);
    let mut flushes = 0;
    for t in 0..steps {
        // Row r of this step is token bos_r + t (or a null row once request r has none left).
        let tok = |r: usize| (t < lens[r]).then(|| data.cu_seqlens[r] as usize + t);
        let rows: Vec<Option<usize>> = (0..batch).map(tok).collect();
        let step_data = data.gather(&rows, (0..=batch as i32).collect());
        let slots: Vec<i32> = (0..batch)
            .map(|r| if tok(r).is_some() { data.slots[r] } else { -1 })
            .collect();
        let seq_lens: Vec<u64> = vec![t as u64 + 1; batch];
        let force = match track_interval {
            Some(interval) => ForceFlush::TrackInterval {
                seq_lens_after: &seq_lens,
                interval,
            },
            None => ForceFlush::None,
        };
        let step = ring.begin_step(&slots, force)?;
        let inp = step_data.decode_inputs();
        let mut o = ActBuffer::nan(data.dtype, batch * d.hv * d.v);
        decode(
            backend,
            &inp,
            &mut pool,
            &mut ring,
            &step,
            0,
            &mut o.dense_mut(batch, d.hv * d.v),
        )?;
        let flushed: Vec<bool> = (0..batch).map(|r| ring.flushes(&step, r)).collect();
        flushes += ring.finish_step(step)?;
        let row = d.hv * d.v;
        for r in 0..batch {
            if let Some(i) = tok(r) {
                for j in 0..row {
                    o_all.set(i * row + j, o.get(r * row + j));
                }
            }
        }
        on_step(t, &pool, &flushed);
    }
    let live: Vec<i32> = data.slots.iter().copied().filter(|&s| s >= 0).collect();
    if !live.is_empty() {
        materialize(backend, &mut pool, &mut ring, &live)?;
    }
    Ok(SequenceRun {
        o: o_all,
        state: pool.state().to_vec(),
        flushes,
        steps,
    })
}
