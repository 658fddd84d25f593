//! The engine flags as SGLang spells them (`--enable-linear-replayssm-spec`, ...), parsed with
//! clap: shared by `replayssm validate` and the C ABI's `replayssm_validate_config`, so an engine
//! can hand over its own server arguments unchanged.

use crate::config::{EngineFlags, KernelFamily, PoolRole, RadixCacheStrategy, SpecAlgorithm, StateDtype, VerifyLayout};
use crate::problem::Variant;

/// The ReplaySSM-relevant server flags; every other flag is refused by the parser.
#[derive(clap::Args, Clone, Debug)]
pub struct EngineArgs {
    #[arg(long)]
    pub enable_linear_replayssm: bool,
    #[arg(long)]
    pub enable_linear_replayssm_spec: bool,
    #[arg(long, allow_negative_numbers = true)]
    pub linear_replayssm_cache_len: Option<i64>,
    #[arg(long, default_value = "null")]
    pub disaggregation_mode: PoolRole,
    #[arg(long, default_value = "no_buffer")]
    pub mamba_radix_cache_strategy: RadixCacheStrategy,
    #[arg(long)]
    pub speculative_algorithm: Option<SpecAlgorithm>,
    #[arg(long, allow_negative_numbers = true)]
    pub speculative_eagle_topk: Option<i64>,
    #[arg(long, allow_negative_numbers = true)]
    pub speculative_num_draft_tokens: Option<i64>,
    #[arg(long, default_value = "triton")]
    pub linear_attn_decode_backend: String,
    #[arg(long)]
    pub linear_attn_verify_backend: Option<String>,
    #[arg(long)]
    pub mamba_ssm_dtype: Option<StateDtype>,
    #[arg(long, default_value = "static")]
    pub ragged_verify_mode: VerifyLayout,
    #[arg(long, default_value = "gdn")]
    pub linear_attn_kind: Variant,
}

impl EngineArgs {
    /// Parses flags (without a program name), e.g. `["--enable-linear-replayssm-spec"]`.
    pub fn parse<I, S>(args: I) -> Result<EngineArgs, String>
    where
        I: IntoIterator<Item = S>,
        S: Into<std::ffi::OsString> + Clone,
    {
        use clap::{FromArgMatches, Parser};
        #[derive(Parser)]
        #[command(name = "engine flags", no_binary_name = true, disable_help_flag = true)]
        struct Wrapper {
            #[command(flatten)]
            args: EngineArgs,
        }
        let m = <Wrapper as clap::CommandFactory>::command()
            .try_get_matches_from(args)
            .map_err(|e| e.render().to_string().trim_end().to_string())?;
        Wrapper::from_arg_matches(&m).map(|w| w.args).map_err(|e| e.to_string())
    }

    pub fn flags(&self) -> EngineFlags {
        EngineFlags {
            enable_linear_replayssm: self.enable_linear_replayssm,
            enable_linear_replayssm_spec: self.enable_linear_replayssm_spec,
            linear_replayssm_cache_len: self.linear_replayssm_cache_len,
            disaggregation_mode: self.disaggregation_mode,
            mamba_radix_cache_strategy: self.mamba_radix_cache_strategy,
            speculative_algorithm: self.speculative_algorithm,
            speculative_eagle_topk: self.speculative_eagle_topk,
            speculative_num_draft_tokens: self.speculative_num_draft_tokens,
            linear_attn_decode_backend: KernelFamily::parse(&self.linear_attn_decode_backend),
            linear_attn_verify_backend: self.linear_attn_verify_backend.as_deref().map(KernelFamily::parse),
            mamba_ssm_dtype: self.mamba_ssm_dtype,
            ragged_verify_mode: self.ragged_verify_mode,
            linear_attn_kind: self.linear_attn_kind,
        }
    }
}
