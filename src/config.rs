//! Capability gates (design §5): engine-style flags in, a resolved ReplaySSM configuration or a
//! typed refusal out. Every refusal names the option, the value it got and the fix, so a
//! configuration the kernels cannot serve never runs silently wrong. Rule ids (A1..B7, N1, P1)
//! follow design §5; S1 (launch-time shapes and indices) lives in the kernel wrappers, except the
//! draft length, which is known here and refused early. B1 and N1 no longer refuse trees: they
//! route them to the tree kernels (VT + FT) and refuse only trees above [`MAX_TREE_NODES`].

use crate::limits::{MAX_TREE_NODES, MAX_VERIFY_WINDOW};
use crate::problem::Variant;

/// `--disaggregation-mode`: which pool role this server has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolRole {
    /// `null`: prefill and decode in one server.
    Local,
    PdPrefill,
    PdDecode,
}

impl PoolRole {
    pub fn flag_value(self) -> &'static str {
        match self {
            PoolRole::Local => "null",
            PoolRole::PdPrefill => "prefill",
            PoolRole::PdDecode => "decode",
        }
    }
}

/// `--mamba-radix-cache-strategy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RadixCacheStrategy {
    NoBuffer,
    ExtraBuffer,
}

/// `--speculative-algorithm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpecAlgorithm {
    Nextn,
    Eagle,
    Eagle3,
    Standalone,
    Ngram,
    Dflash,
    Dspark,
}

impl SpecAlgorithm {
    pub fn flag_value(self) -> &'static str {
        match self {
            SpecAlgorithm::Nextn => "NEXTN",
            SpecAlgorithm::Eagle => "EAGLE",
            SpecAlgorithm::Eagle3 => "EAGLE3",
            SpecAlgorithm::Standalone => "STANDALONE",
            SpecAlgorithm::Ngram => "NGRAM",
            SpecAlgorithm::Dflash => "DFLASH",
            SpecAlgorithm::Dspark => "DSPARK",
        }
    }
}

/// `--mamba-ssm-dtype`: the dtype of the checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateDtype {
    Float32,
    Bfloat16,
    Float16,
}

impl StateDtype {
    pub fn flag_value(self) -> &'static str {
        match self {
            StateDtype::Float32 => "float32",
            StateDtype::Bfloat16 => "bfloat16",
            StateDtype::Float16 => "float16",
        }
    }
}

/// `--ragged-verify-mode`: verify layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VerifyLayout {
    Static,
    CapAccept,
    Compact,
}

impl VerifyLayout {
    pub fn flag_value(self) -> &'static str {
        match self {
            VerifyLayout::Static => "static",
            VerifyLayout::CapAccept => "cap-accept",
            VerifyLayout::Compact => "compact",
        }
    }
}

/// `--linear-attn-decode-backend` / `--linear-attn-verify-backend`: the kernel family.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KernelFamily {
    Triton,
    Flashinfer,
    Helion,
    NvCutedsl,
    Other(String),
}

impl KernelFamily {
    pub fn parse(s: &str) -> KernelFamily {
        match s {
            "triton" => KernelFamily::Triton,
            "flashinfer" => KernelFamily::Flashinfer,
            "helion" => KernelFamily::Helion,
            "nv_cutedsl" | "cutedsl" => KernelFamily::NvCutedsl,
            other => KernelFamily::Other(other.to_string()),
        }
    }
    pub fn flag_value(&self) -> &str {
        match self {
            KernelFamily::Triton => "triton",
            KernelFamily::Flashinfer => "flashinfer",
            KernelFamily::Helion => "helion",
            KernelFamily::NvCutedsl => "nv_cutedsl",
            KernelFamily::Other(s) => s,
        }
    }
}

/// The flags as a user types them (SGLang's spelling); `None` = not given.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineFlags {
    pub enable_linear_replayssm: bool,
    pub enable_linear_replayssm_spec: bool,
    /// `--linear-replayssm-spec-deferred-fold`: fold each commit inside the next step's verify
    /// (kernel VF) instead of after it (F).
    pub linear_replayssm_spec_deferred_fold: bool,
    /// `--linear-replayssm-spec-buffered`: keep each request's accepted history in the spec ring
    /// (kernel VB) and rewrite the checkpoint only when it fills (`--linear-replayssm-cache-len`).
    pub linear_replayssm_spec_buffered: bool,
    pub linear_replayssm_cache_len: Option<i64>,
    pub disaggregation_mode: PoolRole,
    pub mamba_radix_cache_strategy: RadixCacheStrategy,
    pub speculative_algorithm: Option<SpecAlgorithm>,
    pub speculative_eagle_topk: Option<i64>,
    pub speculative_num_draft_tokens: Option<i64>,
    pub linear_attn_decode_backend: KernelFamily,
    pub linear_attn_verify_backend: Option<KernelFamily>,
    pub mamba_ssm_dtype: Option<StateDtype>,
    pub ragged_verify_mode: VerifyLayout,
    pub linear_attn_kind: Variant,
}

impl EngineFlags {
    /// `--enable-linear-replayssm-spec --linear-attn-kind <kind>` (local pool, linear chain).
    pub fn spec_ring(kind: Variant) -> Self {
        EngineFlags {
            enable_linear_replayssm_spec: true,
            linear_attn_kind: kind,
            ..EngineFlags::default()
        }
    }
    /// `--enable-linear-replayssm --linear-replayssm-cache-len <l> --linear-attn-kind <kind>`.
    pub fn buffered_decode(kind: Variant, cache_len: i64) -> Self {
        EngineFlags {
            enable_linear_replayssm: true,
            linear_replayssm_cache_len: Some(cache_len),
            linear_attn_kind: kind,
            ..EngineFlags::default()
        }
    }
}

impl Default for EngineFlags {
    fn default() -> Self {
        EngineFlags {
            enable_linear_replayssm: false,
            enable_linear_replayssm_spec: false,
            linear_replayssm_spec_deferred_fold: false,
            linear_replayssm_spec_buffered: false,
            linear_replayssm_cache_len: None,
            disaggregation_mode: PoolRole::Local,
            mamba_radix_cache_strategy: RadixCacheStrategy::NoBuffer,
            speculative_algorithm: None,
            speculative_eagle_topk: None,
            speculative_num_draft_tokens: None,
            linear_attn_decode_backend: KernelFamily::Triton,
            linear_attn_verify_backend: None,
            mamba_ssm_dtype: None,
            ragged_verify_mode: VerifyLayout::Static,
            linear_attn_kind: Variant::Gdn,
        }
    }
}

/// Default `--linear-replayssm-cache-len` (L) when buffered decode is on and none is given.
pub const DEFAULT_CACHE_LEN: usize = 8;

/// Default `--linear-replayssm-cache-len` (L) of the buffered speculative mode: room for the
/// history of a few steps of up to 4 draft tokens before a flush.
pub const DEFAULT_SPEC_CACHE_LEN: usize = 16;

/// What ReplaySSM does on this server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Off,
    /// Buffered decode (design §4 D) with a ring of `cache_len` steps.
    Buffered {
        cache_len: usize,
    },
    /// Spec ring for speculative decoding (design §4 V, F), its commits reaching the checkpoint
    /// as `commit` says.
    Spec {
        commit: SpecCommit,
    },
}

/// How a speculative step's accepted records reach the checkpoint. One field, so a pool is never
/// resolved for two of them at once (E2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecCommit {
    /// Fold every commit: V (or VT) verifies, F (or FT) folds the accepted prefix.
    EveryStep,
    /// `--linear-replayssm-spec-deferred-fold`: step t's records are folded inside step t+1's
    /// verify (kernel VF, a two-window ring and a pending table: [`crate::state::deferred_ring`]).
    Deferred,
    /// `--linear-replayssm-spec-buffered`: the accepted history stays in a spec ring of
    /// `cache_len` positions (kernel VB, [`crate::state::buffered_ring`]) until a flush.
    Buffered { cache_len: usize },
}

/// The draft the verify sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DraftShape {
    /// No speculative decoding.
    None,
    /// A linear chain of `tokens` draft tokens (`None` = the engine's default).
    Chain { tokens: Option<usize> },
    /// A draft tree, served by the tree kernels (VT verify + FT path fold): `topk` children per
    /// node (`None` for NGRAM, which branches on its own), `nodes` draft positions per request,
    /// root included (`--speculative-num-draft-tokens`; `None` = the engine's default, checked at
    /// launch against [`MAX_TREE_NODES`]).
    Tree { topk: Option<usize>, nodes: Option<usize> },
}

/// Most draft positions per request the verify kernels take (chain window or tree nodes, root
/// included); a tree's depth is bounded by its node count.
pub const MAX_DRAFT_TOKENS: usize = MAX_VERIFY_WINDOW;

/// A configuration the kernels can serve, with the defaults chosen and the warnings to show.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedConfig {
    pub mode: Mode,
    pub kind: Variant,
    pub draft: DraftShape,
    pub algorithm: Option<SpecAlgorithm>,
    pub pool_role: PoolRole,
    pub radix: RadixCacheStrategy,
    pub state_dtype: StateDtype,
    pub verify_layout: VerifyLayout,
    pub decode_backend: KernelFamily,
    pub verify_backend: KernelFamily,
    pub warnings: Vec<String>,
}

/// A refusal of design §5: the rule, the option, the value it got and the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error("A1: --enable-linear-replayssm keeps its ring inside the triton decode kernels (helion for KDA only). Got --linear-attn-decode-backend='{backend}' with --linear-attn-kind='{kind}'. Set --linear-attn-decode-backend triton{helion}, or disable --enable-linear-replayssm.")]
    BufferedDecodeBackend {
        backend: String,
        kind: &'static str,
        helion: &'static str,
    },
    #[error("A2: --enable-linear-replayssm is not supported with --mamba-radix-cache-strategy='extra_buffer' (the ping-pong donation path does not reset the ring cursor). Use --mamba-radix-cache-strategy no_buffer, or disable --enable-linear-replayssm.")]
    BufferedExtraBuffer,
    #[error("A3: --enable-linear-replayssm is not supported under PD disaggregation yet. Got --disaggregation-mode='{mode}'. Remove --disaggregation-mode (or set null), or disable --enable-linear-replayssm on disaggregated deployments.")]
    BufferedDisaggregated { mode: &'static str },
    #[error("A4: --linear-replayssm-cache-len={got} is refused: {why}. Use a positive cache length (1 behaves like the plain recurrent decode).")]
    CacheLen { got: i64, why: String },
    #[error("B1: --speculative-eagle-topk must be at least 1. Got --speculative-eagle-topk={topk}. Use 1 for a linear chain or k > 1 for a tree (verified by the VT tree kernel).")]
    SpecTopk { topk: i64 },
    #[error("B1: --enable-linear-replayssm-spec verifies draft trees with the VT tree kernel, which takes at most {limit} nodes per request (root included; depth at most {limit}). Got --speculative-eagle-topk={topk} with --speculative-num-draft-tokens={nodes}. Use --speculative-num-draft-tokens {limit} or fewer, or disable --enable-linear-replayssm-spec.")]
    SpecTreeTooLarge { topk: i64, nodes: i64, limit: usize },
    #[error("B2: --enable-linear-replayssm-spec supports --linear-attn-decode-backend triton or flashinfer. Got --linear-attn-decode-backend='{backend}'. Use one of those, or disable --enable-linear-replayssm-spec.")]
    SpecDecodeBackend { backend: String },
    #[error("B3: --enable-linear-replayssm-spec with --ragged-verify-mode='{mode}' would fold a stale ring; ragged verify is only supported for DSPARK/DFLASH with --linear-attn-verify-backend triton or nv_cutedsl. Got --speculative-algorithm='{algorithm}', --linear-attn-verify-backend='{verify_backend}'. Use --ragged-verify-mode static, or disable --enable-linear-replayssm-spec.")]
    SpecRaggedVerify {
        mode: &'static str,
        algorithm: String,
        verify_backend: String,
    },
    #[error("B4: --enable-linear-replayssm-spec is not supported on a prefill server: it never verifies. Got --disaggregation-mode='prefill'. Disable --enable-linear-replayssm-spec on prefill servers (it is supported with --disaggregation-mode decode).")]
    SpecOnPrefill,
    #[error("B5: --enable-linear-replayssm and --enable-linear-replayssm-spec drive the ring with incompatible cursor protocols. Got both. Enable only one of them.")]
    BothModes,
    #[error("N1: --speculative-algorithm='NGRAM' always builds a tree; --enable-linear-replayssm-spec verifies it with the VT tree kernel, which takes at most {limit} nodes per request (root included). Got --speculative-num-draft-tokens={nodes}. Use --speculative-num-draft-tokens {limit} or fewer, or disable --enable-linear-replayssm-spec.")]
    SpecNgramTooLarge { nodes: i64, limit: usize },
    #[error("P1: a buffered-decode ring cannot be attached to a {role} pool: the disaggregated pool is not wired for the ring (--enable-linear-replayssm with --disaggregation-mode='{role_flag}'). Use a local pool (--disaggregation-mode null).")]
    RingOnDisaggregatedPool {
        role: &'static str,
        role_flag: &'static str,
    },
    #[error("P1: a buffered-decode ring needs a pool resolved with --enable-linear-replayssm. Got a pool without it. Enable --enable-linear-replayssm, or do not attach a buffered ring.")]
    RingWithoutBufferedDecode,
    #[error("P1: a spec ring needs a pool resolved with --enable-linear-replayssm-spec. Got a pool in mode '{mode}'. Enable --enable-linear-replayssm-spec, or do not attach a spec ring.")]
    SpecRingWithoutSpec { mode: &'static str },
    #[error("D1: --linear-replayssm-spec-deferred-fold folds commits inside the spec verify, so it needs --enable-linear-replayssm-spec. Got it without (--enable-linear-replayssm-spec not given). Add --enable-linear-replayssm-spec, or remove --linear-replayssm-spec-deferred-fold.")]
    DeferredWithoutSpec,
    #[error("D2: --linear-replayssm-spec-deferred-fold keeps the accepted records of the last step in one half of a two-window ring; --ragged-verify-mode='{mode}' writes windows the deferred ring cannot place. Use --ragged-verify-mode static, or remove --linear-replayssm-spec-deferred-fold.")]
    DeferredRaggedVerify { mode: &'static str },
    #[error("D3: --linear-replayssm-spec-deferred-fold leaves accepted records pending in each slot between steps, and --mamba-radix-cache-strategy='extra_buffer' copies checkpoints between slots outside the step (the ping-pong donation), which would copy a state that misses them. Use --mamba-radix-cache-strategy no_buffer, or remove --linear-replayssm-spec-deferred-fold.")]
    DeferredExtraBuffer,
    #[error("P1: a deferred-fold ring needs a pool resolved with --enable-linear-replayssm-spec --linear-replayssm-spec-deferred-fold. Got a pool {got}. Resolve the pool with both flags, or attach a plain spec ring (V + F).")]
    DeferredRingWithoutFlag { got: &'static str },
    #[error("E1: --linear-replayssm-spec-buffered keeps the accepted history in the spec ring, so it needs --enable-linear-replayssm-spec. Got it without (--enable-linear-replayssm-spec not given). Add --enable-linear-replayssm-spec, or remove --linear-replayssm-spec-buffered.")]
    BufferedSpecWithoutSpec,
    #[error("E2: --linear-replayssm-spec-buffered and --linear-replayssm-spec-deferred-fold are two ways to defer a commit (a history of L records against one pending window). Got both. Choose one.")]
    BufferedSpecAndDeferred,
    #[error("E3: --linear-replayssm-spec-buffered verifies linear chains (kernel VB); a draft tree's accepted path would need its history kept as paths. Got {tree}. Use --speculative-eagle-topk 1 (a chain), or remove --linear-replayssm-spec-buffered (trees: VT + FT).")]
    BufferedSpecTree { tree: String },
    #[error("E4: --linear-replayssm-spec-buffered leaves accepted records in the ring between steps, which a disaggregated pool does not transfer. Got --disaggregation-mode='{mode}'. Remove --disaggregation-mode (or set null), or remove --linear-replayssm-spec-buffered.")]
    BufferedSpecDisaggregated { mode: &'static str },
    #[error("E5: --linear-replayssm-spec-buffered places each window after its request's history; --ragged-verify-mode='{mode}' writes windows it cannot place. Use --ragged-verify-mode static, or remove --linear-replayssm-spec-buffered.")]
    BufferedSpecRaggedVerify { mode: &'static str },
    #[error("E6: --linear-replayssm-spec-buffered leaves accepted records in each slot's ring between steps, and --mamba-radix-cache-strategy='extra_buffer' copies checkpoints between slots outside the step, which would copy a state that misses them. Use --mamba-radix-cache-strategy no_buffer, or remove --linear-replayssm-spec-buffered.")]
    BufferedSpecExtraBuffer,
    #[error("E7: --linear-replayssm-cache-len={got} is refused for --linear-replayssm-spec-buffered: {why}.")]
    BufferedSpecCacheLen { got: i64, why: String },
    #[error("P1: a buffered spec ring needs a pool resolved with --enable-linear-replayssm-spec --linear-replayssm-spec-buffered. Got a pool {got}. Resolve the pool with both flags, or attach a plain spec ring (V + F).")]
    BufferedSpecRingWithoutFlag { got: &'static str },
    #[error("--speculative-num-draft-tokens must be at least 1. Got --speculative-num-draft-tokens={got}.")]
    DraftTokens { got: i64 },
    #[error("S1: --enable-linear-replayssm-spec verifies a linear chain with the V kernel, whose window takes at most {limit} draft positions. Got --speculative-num-draft-tokens={got}. Use --speculative-num-draft-tokens {limit} or fewer, or disable --enable-linear-replayssm-spec.")]
    ChainTooLong { got: i64, limit: usize },
}

impl GateError {
    /// The rule of design §5 this refusal enforces.
    pub fn rule(&self) -> &'static str {
        match self {
            GateError::BufferedDecodeBackend { .. } => "A1",
            GateError::BufferedExtraBuffer => "A2",
            GateError::BufferedDisaggregated { .. } => "A3",
            GateError::CacheLen { .. } => "A4",
            GateError::SpecTopk { .. } | GateError::SpecTreeTooLarge { .. } => "B1",
            GateError::SpecDecodeBackend { .. } => "B2",
            GateError::SpecRaggedVerify { .. } => "B3",
            GateError::SpecOnPrefill => "B4",
            GateError::BothModes => "B5",
            GateError::SpecNgramTooLarge { .. } => "N1",
            GateError::DeferredWithoutSpec => "D1",
            GateError::DeferredRaggedVerify { .. } => "D2",
            GateError::DeferredExtraBuffer => "D3",
            GateError::BufferedSpecWithoutSpec => "E1",
            GateError::BufferedSpecAndDeferred => "E2",
            GateError::BufferedSpecTree { .. } => "E3",
            GateError::BufferedSpecDisaggregated { .. } => "E4",
            GateError::BufferedSpecRaggedVerify { .. } => "E5",
            GateError::BufferedSpecExtraBuffer => "E6",
            GateError::BufferedSpecCacheLen { .. } => "E7",
            GateError::RingOnDisaggregatedPool { .. }
            | GateError::RingWithoutBufferedDecode
            | GateError::SpecRingWithoutSpec { .. }
            | GateError::DeferredRingWithoutFlag { .. }
            | GateError::BufferedSpecRingWithoutFlag { .. } => "P1",
            GateError::DraftTokens { .. } | GateError::ChainTooLong { .. } => "S1",
        }
    }
}

/// Checks the flags against design §5 and resolves the configuration.
pub fn resolve(f: &EngineFlags) -> Result<ResolvedConfig, GateError> {
    let buffered = f.enable_linear_replayssm;
    let spec = f.enable_linear_replayssm_spec;
    let mut warnings = vec![];
    if buffered && spec {
        return Err(GateError::BothModes);
    }
    let deferred_fold = f.linear_replayssm_spec_deferred_fold;
    if deferred_fold {
        check_records_kept_between_steps(
            f,
            GateError::DeferredWithoutSpec,
            |mode| GateError::DeferredRaggedVerify { mode },
            GateError::DeferredExtraBuffer,
        )?;
    }
    if let Some(n) = f.speculative_num_draft_tokens {
        if n < 1 {
            return Err(GateError::DraftTokens { got: n });
        }
    }
    let spec_buffered = f.linear_replayssm_spec_buffered;
    if spec_buffered {
        if deferred_fold {
            return Err(GateError::BufferedSpecAndDeferred);
        }
        check_records_kept_between_steps(
            f,
            GateError::BufferedSpecWithoutSpec,
            |mode| GateError::BufferedSpecRaggedVerify { mode },
            GateError::BufferedSpecExtraBuffer,
        )?;
        if f.disaggregation_mode != PoolRole::Local {
            return Err(GateError::BufferedSpecDisaggregated {
                mode: f.disaggregation_mode.flag_value(),
            });
        }
    }
    let topk = f.speculative_eagle_topk;
    let tokens = f.speculative_num_draft_tokens.map(|n| n as usize);
    let draft = match (f.speculative_algorithm, topk) {
        (None, _) => DraftShape::None,
        (Some(SpecAlgorithm::Ngram), _) => DraftShape::Tree {
            topk: None,
            nodes: tokens,
        },
        (Some(_), Some(k)) if k > 1 => DraftShape::Tree {
            topk: Some(k as usize),
            nodes: tokens,
        },
        (Some(_), _) => DraftShape::Chain { tokens },
    };
    let commit = match (deferred_fold, spec_buffered) {
        (true, _) => SpecCommit::Deferred,
        (false, true) => SpecCommit::Buffered {
            cache_len: buffered_spec_cache_len(f, draft, &mut warnings)?,
        },
        (false, false) => SpecCommit::EveryStep,
    };
    let verify_backend = f
        .linear_attn_verify_backend
        .clone()
        .unwrap_or_else(|| f.linear_attn_decode_backend.clone());
    let kind_name = f.linear_attn_kind.name();

    let mode = if buffered {
        let db = &f.linear_attn_decode_backend;
        let ok = matches!(db, KernelFamily::Triton)
            || (matches!(db, KernelFamily::Helion) && f.linear_attn_kind == Variant::Kda);
        if !ok {
            return Err(GateError::BufferedDecodeBackend {
                backend: db.flag_value().to_string(),
                kind: kind_name,
                helion: if f.linear_attn_kind == Variant::Kda {
                    " (or helion)"
                } else {
                    ""
                },
            });
        }
        if f.mamba_radix_cache_strategy == RadixCacheStrategy::ExtraBuffer {
            return Err(GateError::BufferedExtraBuffer);
        }
        if f.disaggregation_mode != PoolRole::Local {
            return Err(GateError::BufferedDisaggregated {
                mode: f.disaggregation_mode.flag_value(),
            });
        }
        let cache_len = match f.linear_replayssm_cache_len {
            Some(l) => match crate::limits::cache_len_outside(l) {
                Some(why) => return Err(GateError::CacheLen { got: l, why }),
                None => l as usize,
            },
            None => {
                warnings.push(format!(
                    "--linear-replayssm-cache-len not given: using {DEFAULT_CACHE_LEN}"
                ));
                DEFAULT_CACHE_LEN
            }
        };
        Mode::Buffered { cache_len }
    } else if spec {
        // B1/N1: trees go to the tree kernels (VT + FT) when they fit; chains to V + F.
        if let Some(k) = topk.filter(|&k| k < 1) {
            return Err(GateError::SpecTopk { topk: k });
        }
        let n = f.speculative_num_draft_tokens;
        match draft {
            DraftShape::Tree { topk, nodes } => match (topk, n) {
                (Some(k), Some(n)) if nodes > Some(MAX_TREE_NODES) => {
                    return Err(GateError::SpecTreeTooLarge {
                        topk: k as i64,
                        nodes: n,
                        limit: MAX_TREE_NODES,
                    })
                }
                (None, Some(n)) if nodes > Some(MAX_TREE_NODES) => {
                    return Err(GateError::SpecNgramTooLarge {
                        nodes: n,
                        limit: MAX_TREE_NODES,
                    })
                }
                (_, None) => warnings.push(format!(
                    "--speculative-num-draft-tokens not given with a draft tree: the VT tree kernel takes at most {MAX_TREE_NODES} nodes per request; a bigger tree is refused at launch"
                )),
                _ => {}
            },
            DraftShape::Chain { tokens: Some(t) } if t > MAX_DRAFT_TOKENS => {
                return Err(GateError::ChainTooLong {
                    got: t as i64,
                    limit: MAX_DRAFT_TOKENS,
                })
            }
            _ => {}
        }
        if !matches!(
            f.linear_attn_decode_backend,
            KernelFamily::Triton | KernelFamily::Flashinfer
        ) {
            return Err(GateError::SpecDecodeBackend {
                backend: f.linear_attn_decode_backend.flag_value().to_string(),
            });
        }
        if f.ragged_verify_mode != VerifyLayout::Static {
            let algo_ok = matches!(
                f.speculative_algorithm,
                Some(SpecAlgorithm::Dspark | SpecAlgorithm::Dflash)
            );
            let backend_ok = matches!(verify_backend, KernelFamily::Triton | KernelFamily::NvCutedsl);
            if !(algo_ok && backend_ok) {
                return Err(GateError::SpecRaggedVerify {
                    mode: f.ragged_verify_mode.flag_value(),
                    algorithm: f
                        .speculative_algorithm
                        .map_or("None".to_string(), |a| a.flag_value().to_string()),
                    verify_backend: verify_backend.flag_value().to_string(),
                });
            }
        }
        if f.disaggregation_mode == PoolRole::PdPrefill {
            return Err(GateError::SpecOnPrefill);
        }
        if f.speculative_algorithm.is_none() {
            warnings.push(
                "--enable-linear-replayssm-spec without --speculative-algorithm: the spec ring is allocated but unused"
                    .into(),
            );
        }
        Mode::Spec { commit }
    } else {
        if f.linear_replayssm_cache_len.is_some() {
            warnings.push(
                "--linear-replayssm-cache-len has no effect without --enable-linear-replayssm or --linear-replayssm-spec-buffered"
                    .into(),
            );
        }
        Mode::Off
    };

    let state_dtype = match (mode, f.mamba_ssm_dtype) {
        (Mode::Spec { .. }, None) => {
            warnings.push(
                "B6: --mamba-ssm-dtype not given: resolved to float32 (the exact fold keeps an f32 checkpoint, bit-identical to the recurrent baseline)".into(),
            );
            StateDtype::Float32
        }
        (Mode::Spec { .. }, Some(d)) if d != StateDtype::Float32 => {
            warnings.push(format!(
                "B7: --mamba-ssm-dtype='{}' with --enable-linear-replayssm-spec: the fold re-quantises the committed state on every commit and may drift from the recurrent baseline; float32 is exact",
                d.flag_value()
            ));
            d
        }
        (_, Some(d)) => d,
        (_, None) => StateDtype::Float32,
    };
    if state_dtype != StateDtype::Float32 {
        warnings.push(format!(
            "--mamba-ssm-dtype='{}': this crate's kernels keep f32 checkpoints; the pool is allocated in float32 (at least as exact, twice the memory of {})",
            state_dtype.flag_value(),
            state_dtype.flag_value()
        ));
    }

    Ok(ResolvedConfig {
        mode,
        kind: f.linear_attn_kind,
        draft,
        algorithm: f.speculative_algorithm,
        pool_role: f.disaggregation_mode,
        radix: f.mamba_radix_cache_strategy,
        state_dtype,
        verify_layout: f.ragged_verify_mode,
        decode_backend: f.linear_attn_decode_backend.clone(),
        verify_backend,
        warnings,
    })
}

/// The rules a commit form that keeps accepted records in the spec ring between steps shares
/// (D1-D3 for the deferred fold, E1, E5, E6 for the buffered mode): it needs the spec ring, a
/// window placed at a fixed offset (a static verify layout), and no checkpoint copied between
/// slots outside the step (the ping-pong donation would copy a state that misses the records).
fn check_records_kept_between_steps(
    f: &EngineFlags,
    without_spec: GateError,
    ragged: fn(&'static str) -> GateError,
    extra_buffer: GateError,
) -> Result<(), GateError> {
    if !f.enable_linear_replayssm_spec {
        return Err(without_spec);
    }
    if f.ragged_verify_mode != VerifyLayout::Static {
        return Err(ragged(f.ragged_verify_mode.flag_value()));
    }
    if f.mamba_radix_cache_strategy == RadixCacheStrategy::ExtraBuffer {
        return Err(extra_buffer);
    }
    Ok(())
}

/// E3 and E7: the buffered speculative mode serves linear chains with a ring of L >= 2 T positions
/// (`limits::buffered_cache_len_outside`, the kernels' rule).
fn buffered_spec_cache_len(f: &EngineFlags, draft: DraftShape, warnings: &mut Vec<String>) -> Result<usize, GateError> {
    if let DraftShape::Tree { topk, .. } = draft {
        let tree = topk.map_or("--speculative-algorithm='NGRAM' (always a tree)".to_string(), |k| {
            format!("--speculative-eagle-topk={k}")
        });
        return Err(GateError::BufferedSpecTree { tree });
    }
    let l = match f.linear_replayssm_cache_len {
        Some(l) => l,
        None => {
            warnings.push(format!(
                "--linear-replayssm-cache-len not given with --linear-replayssm-spec-buffered: using {DEFAULT_SPEC_CACHE_LEN}"
            ));
            DEFAULT_SPEC_CACHE_LEN as i64
        }
    };
    // The draft window: what the engine gives, else the longest the verify takes.
    let t = match draft {
        DraftShape::Chain { tokens: Some(t) } => t,
        _ => {
            let t = MAX_DRAFT_TOKENS.min(l.max(0) as usize / 2).max(1);
            warnings.push(format!(
                "--speculative-num-draft-tokens not given with --linear-replayssm-spec-buffered: E7 assumed T = {t} \
                 (cache_len / 2); a buffered ring for a longer window is refused when it is built"
            ));
            t
        }
    };
    match crate::limits::buffered_cache_len_outside(l, t as i64) {
        Some(why) => Err(GateError::BufferedSpecCacheLen { got: l, why }),
        None => Ok(l as usize),
    }
}

macro_rules! flag_enum_from_str {
    ($t:ty, $what:literal, { $($s:literal => $v:expr),* $(,)? }) => {
        impl std::str::FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($s => Ok($v),)*
                    _ => Err(format!("invalid {} '{s}' (expected one of: {})", $what, [$($s),*].join(", "))),
                }
            }
        }
    };
}

flag_enum_from_str!(PoolRole, "--disaggregation-mode", { "null" => PoolRole::Local, "prefill" => PoolRole::PdPrefill, "decode" => PoolRole::PdDecode });
flag_enum_from_str!(RadixCacheStrategy, "--mamba-radix-cache-strategy", { "no_buffer" => RadixCacheStrategy::NoBuffer, "extra_buffer" => RadixCacheStrategy::ExtraBuffer });
flag_enum_from_str!(SpecAlgorithm, "--speculative-algorithm", {
    "NEXTN" => SpecAlgorithm::Nextn, "EAGLE" => SpecAlgorithm::Eagle, "EAGLE3" => SpecAlgorithm::Eagle3,
    "STANDALONE" => SpecAlgorithm::Standalone, "NGRAM" => SpecAlgorithm::Ngram, "DFLASH" => SpecAlgorithm::Dflash,
    "DSPARK" => SpecAlgorithm::Dspark,
});
flag_enum_from_str!(StateDtype, "--mamba-ssm-dtype", { "float32" => StateDtype::Float32, "bfloat16" => StateDtype::Bfloat16, "float16" => StateDtype::Float16 });
flag_enum_from_str!(VerifyLayout, "--ragged-verify-mode", { "static" => VerifyLayout::Static, "cap-accept" => VerifyLayout::CapAccept, "compact" => VerifyLayout::Compact });

impl ResolvedConfig {
    /// The kernels this configuration runs, by their design §4 names.
    pub fn kernels(&self) -> &'static str {
        match (self.mode, self.draft) {
            (Mode::Off, _) => "R recurrent decode (baseline; no ReplaySSM kernels)",
            (Mode::Buffered { .. }, _) => "D buffered decode",
            (Mode::Spec { commit: SpecCommit::Deferred }, DraftShape::Tree { .. }) => {
                "VF deferred fold with VT tree verify (strict-ancestor mask); FT path fold flushes"
            }
            (Mode::Spec { commit: SpecCommit::Deferred }, _) => {
                "VF deferred fold with V chain verify (strictly-lower window mask); F flushes"
            }
            (Mode::Spec { commit: SpecCommit::Buffered { .. } }, _) => {
                "VB buffered verify (checkpoint plus the history's stored corrections, strictly-lower window mask); F flushes"
            }
            (Mode::Spec { .. }, DraftShape::Tree { .. }) => {
                "VT tree verify (strict-ancestor mask) + FT path fold (fold-every-commit)"
            }
            (Mode::Spec { .. }, _) => "V chain verify (strictly-lower window mask) + F fold-every-commit",
        }
    }
}

impl std::fmt::Display for ResolvedConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = match self.mode {
            Mode::Off => "off".to_string(),
            Mode::Buffered { cache_len } => format!("buffered decode (cache_len {cache_len})"),
            Mode::Spec {
                commit: SpecCommit::Deferred,
            } => "spec ring, deferred fold".to_string(),
            Mode::Spec {
                commit: SpecCommit::Buffered { cache_len },
            } => {
                format!("spec ring, buffered (cache_len {cache_len})")
            }
            Mode::Spec {
                commit: SpecCommit::EveryStep,
            } => "spec ring".to_string(),
        };
        let draft = match self.draft {
            DraftShape::None => "none".to_string(),
            DraftShape::Chain { tokens: Some(t) } => format!("linear chain of {t} tokens"),
            DraftShape::Chain { tokens: None } => "linear chain".to_string(),
            DraftShape::Tree { topk, nodes } => {
                let k = topk.map_or("NGRAM branching".to_string(), |k| format!("top-k {k}"));
                let n = nodes.map_or(String::new(), |n| format!(", {n} nodes per request"));
                format!("tree ({k}{n})")
            }
        };
        writeln!(f, "replayssm mode: {mode}")?;
        writeln!(f, "layer kind: {}", self.kind.name())?;
        writeln!(f, "draft: {draft}")?;
        writeln!(f, "kernels: {}", self.kernels())?;
        writeln!(
            f,
            "speculative algorithm: {}",
            self.algorithm.map_or("none", |a| a.flag_value())
        )?;
        writeln!(f, "pool role: {}", self.pool_role.flag_value())?;
        writeln!(
            f,
            "radix cache strategy: {}",
            match self.radix {
                RadixCacheStrategy::NoBuffer => "no_buffer",
                RadixCacheStrategy::ExtraBuffer => "extra_buffer",
            }
        )?;
        writeln!(f, "state dtype: {}", self.state_dtype.flag_value())?;
        writeln!(f, "verify layout: {}", self.verify_layout.flag_value())?;
        writeln!(f, "decode backend: {}", self.decode_backend.flag_value())?;
        write!(f, "verify backend: {}", self.verify_backend.flag_value())
    }
}
