//! The host checks every kernel call goes through before a launch, with a message naming the
//! field, its value and the limit: head dims, views, dtypes, sequence lengths, slots. The
//! kernel layer's launchers (C++) reach the same rules through [`can_implement`] as their last
//! line: each rule has one definition, in [`params`] and [`indices`].

pub mod can_implement;
pub mod indices;
pub mod params;

use crate::backend::Backend;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::limits::{KERNEL_HEAD_DIMS, MAX_BATCH, MAX_V};
use crate::memory::ActLayout;
use crate::problem::HeadDims;

impl HeadDims {
    pub fn validate(&self) -> Result<()> {
        if self.h == 0 || self.hv == 0 || self.k == 0 || self.v == 0 {
            return Err(Error::Dims(format!(
                "all of H, HV, K, V must be positive, got {self:?}"
            )));
        }
        if self.hv % self.h != 0 {
            return Err(Error::Dims(format!(
                "HV = {} is not a multiple of H = {} (GQA needs HV % H == 0)",
                self.hv, self.h
            )));
        }
        if self.hv > MAX_BATCH {
            return Err(Error::Dims(format!(
                "HV = {} exceeds the launch limit of {MAX_BATCH}",
                self.hv
            )));
        }
        if self.k > 1 << 16 {
            return Err(Error::Dims(format!("K = {} exceeds 65536", self.k)));
        }
        if self.v > MAX_V {
            return Err(Error::Dims(format!(
                "V = {} exceeds RSSM_MAX_V = {} (the launch grid's bound)",
                self.v, MAX_V
            )));
        }
        Ok(())
    }
}

/// The kernels (not the reference) are compiled for K in [`KERNEL_HEAD_DIMS`] only.
pub fn check_kernel_head_dim(backend: Backend, k: usize) -> Result<()> {
    if backend != Backend::Reference && !crate::limits::supported_head_dim(k) {
        return Err(Error::Unsupported {
            backend,
            what: format!("key head dim K = {k}"),
            why: format!("kernels are compiled for K in {KERNEL_HEAD_DIMS:?}"),
        });
    }
    Ok(())
}

pub fn check_view(tensor: &'static str, view: &impl ActLayout, tokens: usize, row: usize) -> Result<()> {
    let (offset, t, r, stride) = view.layout();
    check_strided(tensor, view.buf_len(), offset, t, r, stride, tokens, row)
}

#[allow(clippy::too_many_arguments)]
fn check_strided(
    tensor: &'static str,
    len: usize,
    offset: usize,
    got_tokens: usize,
    got_row: usize,
    stride: usize,
    tokens: usize,
    row: usize,
) -> Result<()> {
    if got_tokens != tokens || got_row != row {
        return Err(Error::Shape {
            tensor,
            expected: format!("[{tokens}, {row}] (tokens, elements per token)"),
            got: format!("[{got_tokens}, {got_row}]"),
        });
    }
    if stride < row {
        return Err(Error::StrideTooSmall { tensor, stride, row });
    }
    if stride > i64::MAX as usize / 2 {
        return Err(Error::InvalidValue {
            what: "stride",
            why: format!("{tensor}: token stride {stride} does not fit in i64"),
        });
    }
    if tokens > 0 {
        // Checked: a hostile offset or stride must be refused, not wrap past the buffer's end.
        let needed = (tokens - 1)
            .checked_mul(stride)
            .and_then(|x| x.checked_add(offset))
            .and_then(|x| x.checked_add(row))
            .unwrap_or(usize::MAX);
        if needed > len {
            return Err(Error::OutOfBounds { tensor, needed, len });
        }
    }
    Ok(())
}

/// `shape` describes the expected shape; it is only formatted when the check fails.
pub fn check_len(tensor: &'static str, len: usize, expected: usize, shape: impl FnOnce() -> String) -> Result<()> {
    if len != expected {
        return Err(Error::Shape {
            tensor,
            expected: format!("{} = {expected} elements", shape()),
            got: format!("{len} elements"),
        });
    }
    Ok(())
}

/// An array of one entry per request, row or token: `len` entries where `want` are needed
/// (`per` names what each entry belongs to, e.g. "one per request"; empty: nothing to say).
pub fn check_count(tensor: &'static str, len: usize, want: usize, per: &str) -> Result<()> {
    if len != want {
        let expected = if per.is_empty() {
            format!("[{want}]")
        } else {
            format!("[{want}] ({per})")
        };
        return Err(Error::Shape {
            tensor,
            expected,
            got: format!("[{len}]"),
        });
    }
    Ok(())
}

pub fn check_dtype(tensor: &'static str, got: DType, expected: DType) -> Result<()> {
    if got != expected {
        return Err(Error::DType { tensor, expected, got });
    }
    Ok(())
}

/// Checks `cu_seqlens` (`[B+1]`, starts at 0, non-decreasing, ends at `num_tokens`); returns
/// `(batch, max_seqlen)`.
pub fn check_seqlens(cu: &[i32], num_tokens: usize) -> Result<(usize, usize)> {
    if cu.len() < 2 {
        return Err(Error::SeqLens(format!("needs B + 1 >= 2 entries, got {}", cu.len())));
    }
    if cu[0] != 0 {
        return Err(Error::SeqLens(format!("must start at 0, got {}", cu[0])));
    }
    let mut max_len = 0usize;
    for (i, w) in cu.windows(2).enumerate() {
        if w[1] < w[0] {
            return Err(Error::SeqLens(format!(
                "decreases at request {i}: {} then {}",
                w[0], w[1]
            )));
        }
        max_len = max_len.max((w[1] - w[0]) as usize);
    }
    let last = *cu.last().unwrap_or(&0);
    if last as usize != num_tokens {
        return Err(Error::SeqLens(format!(
            "ends at {last} but the inputs hold {num_tokens} tokens"
        )));
    }
    let batch = cu.len() - 1;
    check_batch(batch)?;
    Ok((batch, max_len.max(1)))
}

/// The requests of one launch (`cu_seqlens` has `B + 1` entries) within the grid's limit.
pub fn check_batch(batch: usize) -> Result<()> {
    if batch > MAX_BATCH {
        return Err(Error::SeqLens(format!(
            "{batch} requests exceed the launch limit of {MAX_BATCH}"
        )));
    }
    Ok(())
}

/// A bookkeeping launch's rows (defer, the buffered cursors, a materialise: its grid holds the
/// request in z): `1..=MAX_BATCH` slots.
pub fn check_bookkeeping_rows(rows: usize) -> Result<()> {
    if rows == 0 || rows > crate::limits::MAX_BATCH {
        return Err(Error::Shape {
            tensor: "slots",
            expected: format!("[B] with 1 <= B <= {}", crate::limits::MAX_BATCH),
            got: format!("[{rows}]"),
        });
    }
    Ok(())
}

/// Checks slot indices: `-1` or `0..num_slots`, live slots distinct.
pub fn check_slots(slots: &[i32], batch: usize, num_slots: usize) -> Result<()> {
    check_count("slots", slots.len(), batch, "one per request")?;
    let out_of_range = slots
        .iter()
        .position(|&slot| slot < -1 || slot >= 0 && slot as usize >= num_slots);
    // The first repeat in row order (the smallest second row) and that slot's first row, found
    // by sorting (slot, row) pairs in a per-thread scratch buffer: no allocation once it has
    // grown to the batch (the steady state of a serving loop).
    let duplicate = SCRATCH.with(|cell| {
        let mut pairs = cell.borrow_mut();
        pairs.clear();
        pairs.extend(slots.iter().enumerate().filter(|(_, &s)| s >= 0).map(|(i, &s)| (s, i)));
        pairs.sort_unstable();
        pairs
            .windows(2)
            .filter(|w| w[0].0 == w[1].0)
            .min_by_key(|w| w[1].1)
            .map(|w| {
                let first = pairs.partition_point(|p| p.0 < w[0].0);
                (pairs[first].1, w[1].1, w[0].0)
            })
    });
    match (out_of_range, duplicate) {
        (Some(index), d) if d.is_none_or(|(_, second, _)| index < second) => Err(Error::SlotOutOfRange {
            index,
            slot: slots[index],
            num_slots,
        }),
        (_, Some((first, second, slot))) => Err(Error::DuplicateSlot { first, second, slot }),
        _ => Ok(()),
    }
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<(i32, usize)>> = const { std::cell::RefCell::new(Vec::new()) };
}
