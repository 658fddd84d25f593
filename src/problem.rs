//! Shapes and inputs shared by the kernels: head dims, layer variant, gate inputs, and the
//! checks every view goes through before a launch.

use crate::dtype::{ActView, ActViewMut, DType};
use crate::error::{Error, Result};
use crate::ffi;

/// Linear-attention layer kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Gated DeltaNet: one decay per token and value head.
    Gdn,
    /// Kimi Delta Attention: one decay per token, value head and key channel.
    Kda,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Gdn => "gdn",
            Variant::Kda => "kda",
        }
    }
    /// The value of this type in the C ABI (`replayssm_dtype` / `replayssm_variant`).
    pub fn to_ffi(self) -> i32 {
        (match self {
            Variant::Gdn => ffi::rssm_variant_RSSM_VARIANT_GDN,
            Variant::Kda => ffi::rssm_variant_RSSM_VARIANT_KDA,
        }) as i32
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Variant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "gdn" => Ok(Variant::Gdn),
            "kda" => Ok(Variant::Kda),
            _ => Err(format!("unknown variant '{s}' (expected gdn or kda)")),
        }
    }
}

/// Head counts and dims: `h` key/query heads, `hv` value heads (`hv % h == 0`), `k` key dim,
/// `v` value dim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HeadDims {
    pub h: usize,
    pub hv: usize,
    pub k: usize,
    pub v: usize,
}

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
        if self.hv > 65535 {
            return Err(Error::Dims(format!(
                "HV = {} exceeds the launch limit of 65535",
                self.hv
            )));
        }
        if self.k > 1 << 16 {
            return Err(Error::Dims(format!("K = {} exceeds 65536", self.k)));
        }
        if self.v > ffi::RSSM_MAX_V as usize {
            return Err(Error::Dims(format!(
                "V = {} exceeds RSSM_MAX_V = {} (the launch grid's bound)",
                self.v,
                ffi::RSSM_MAX_V
            )));
        }
        Ok(())
    }

    /// Elements of one slot's state: `HV * V * K`.
    pub fn state_elems(&self) -> usize {
        self.hv * self.v * self.k
    }

    /// Key head read by value head `hv`.
    pub fn key_head(&self, hv: usize) -> usize {
        hv / (self.hv / self.h)
    }

    /// Elements of the gate per token and value head: 1 (GDN) or K (KDA).
    pub fn gate_width(&self, variant: Variant) -> usize {
        match variant {
            Variant::Gdn => 1,
            Variant::Kda => self.k,
        }
    }
}

/// The gate of every token: raw inputs (SPEC §3 steps 1-2 run in-kernel) or precomputed g/beta.
#[derive(Clone, Copy, Debug)]
pub enum Gate<'a> {
    Raw {
        /// `[N, HV]` (KDA: `[N, HV, K]`), act dtype.
        a: ActView<'a>,
        /// `[N, HV]`, act dtype.
        b: ActView<'a>,
        /// `[HV]`.
        a_log: &'a [f32],
        /// `[HV]` (KDA: `[HV, K]`).
        dt_bias: &'a [f32],
    },
    Precomputed {
        /// `[N, HV]` (KDA: `[N, HV, K]`), log decay.
        g: &'a [f32],
        /// `[N, HV]`.
        beta: &'a [f32],
    },
}

pub fn check_view(tensor: &'static str, view: &ActView<'_>, tokens: usize, row: usize) -> Result<()> {
    check_strided(
        tensor,
        view.buf.len(),
        view.offset,
        view.tokens,
        view.row,
        view.stride,
        tokens,
        row,
    )
}

pub fn check_view_mut(tensor: &'static str, view: &ActViewMut<'_>, tokens: usize, row: usize) -> Result<()> {
    check_strided(
        tensor,
        view.buf.len(),
        view.offset,
        view.tokens,
        view.row,
        view.stride,
        tokens,
        row,
    )
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
        let needed = offset + (tokens - 1) * stride + row;
        if needed > len {
            return Err(Error::OutOfBounds { tensor, needed, len });
        }
    }
    Ok(())
}

pub fn check_len(tensor: &'static str, len: usize, expected: usize, shape: String) -> Result<()> {
    if len != expected {
        return Err(Error::Shape {
            tensor,
            expected: format!("{shape} = {expected} elements"),
            got: format!("{len} elements"),
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
    if batch > 65535 {
        return Err(Error::SeqLens(format!(
            "{batch} requests exceed the launch limit of 65535"
        )));
    }
    Ok((batch, max_len.max(1)))
}

/// Checks slot indices: `-1` or `0..num_slots`, live slots distinct.
pub fn check_slots(slots: &[i32], batch: usize, num_slots: usize) -> Result<()> {
    if slots.len() != batch {
        return Err(Error::Shape {
            tensor: "slots",
            expected: format!("[{batch}] (one per request)"),
            got: format!("[{}]", slots.len()),
        });
    }
    let mut seen = std::collections::HashMap::new();
    for (index, &slot) in slots.iter().enumerate() {
        if slot < -1 || slot >= 0 && slot as usize >= num_slots {
            return Err(Error::SlotOutOfRange { index, slot, num_slots });
        }
        if slot >= 0 {
            if let Some(first) = seen.insert(slot, index) {
                return Err(Error::DuplicateSlot {
                    first,
                    second: index,
                    slot,
                });
            }
        }
    }
    Ok(())
}
