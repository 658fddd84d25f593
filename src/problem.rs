//! Shapes and inputs shared by the kernels: head dims, layer variant, gate inputs (their checks:
//! [`crate::checks`]).

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

text_enum!(Variant, "variant", "gdn or kda", {
    "gdn" => Gdn,
    "kda" => Kda,
});

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
