//! Theoretical occupancy of every compiled kernel (the static checks): ptxas's registers
//! and static shared memory, the launch layer's block size and dynamic shared memory, and the
//! per-SM limits of the target, as the CUDA occupancy calculator combines them. No device needed.

use replayssm::build_info::{kernel_resources, KernelResources};

/// Per-SM resources of one architecture (CUDA Programming Guide, "Compute capabilities").
#[derive(Clone, Copy, Debug)]
pub struct SmLimits {
    pub name: &'static str,
    pub max_warps: u32,
    pub max_blocks: u32,
    pub registers: u32,
    /// Registers are handed out per warp in units of this many.
    pub register_unit: u32,
    /// Shared memory per SM at the largest carveout, in bytes.
    pub smem: u32,
    /// Shared memory is handed out per block in units of this many bytes.
    pub smem_unit: u32,
    /// Shared memory the runtime reserves per block.
    pub smem_reserved_per_block: u32,
}

/// Hopper (sm_90: H100, H200): 64 warps, 32 blocks, 64 Ki registers, 228 KiB shared memory per SM.
pub const SM90: SmLimits = SmLimits {
    name: "sm_90",
    max_warps: 64,
    max_blocks: 32,
    registers: 65536,
    register_unit: 256,
    smem: 228 * 1024,
    smem_unit: 128,
    smem_reserved_per_block: 1024,
};

/// Resident blocks and warps per SM, and what bounds them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Occupancy {
    pub blocks_per_sm: u32,
    pub warps_per_sm: u32,
    /// `warps_per_sm / max_warps`.
    pub fraction: f64,
    /// "warps", "blocks", "registers" or "shared memory".
    pub limiter: &'static str,
}

/// The occupancy calculator: `registers` per thread, `threads` per block, `smem` bytes of shared
/// memory per block (static + dynamic).
pub fn occupancy(l: &SmLimits, registers: u32, threads: u32, smem: u32) -> Occupancy {
    let warps_per_block = threads.div_ceil(32).max(1);
    let by_warps = l.max_warps / warps_per_block;
    let regs_per_warp = (registers * 32).div_ceil(l.register_unit) * l.register_unit;
    let by_regs = l
        .registers
        .checked_div(regs_per_warp)
        .map_or(u32::MAX, |warps| warps / warps_per_block);
    let smem_per_block = (smem + l.smem_reserved_per_block).div_ceil(l.smem_unit) * l.smem_unit;
    let by_smem = l.smem / smem_per_block;
    let limits = [
        (by_warps, "warps"),
        (l.max_blocks, "blocks"),
        (by_regs, "registers"),
        (by_smem, "shared memory"),
    ];
    let (blocks, limiter) = limits.iter().copied().min_by_key(|&(b, _)| b).unwrap_or((0, "warps"));
    let warps = blocks * warps_per_block;
    Occupancy {
        blocks_per_sm: blocks,
        warps_per_sm: warps,
        fraction: warps as f64 / l.max_warps as f64,
        limiter,
    }
}

/// How the launch layer launches one kernel instantiation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelLaunch {
    /// `recurrent_kernel`, `verify_kernel`, ...
    pub family: String,
    /// Template arguments as demangled (`8`, `__nv_bfloat16`, `false`).
    pub args: Vec<String>,
    pub threads: u32,
    /// Dynamic shared memory of the largest launch (V: a 16-token window).
    pub dynamic_smem: u32,
}

/// Threads per block of the row-tiled kernels (R, V, F, P, D; `RowTiling::kThreads`) and of the
/// cursor kernel (its template argument).
const ROW_TILING_THREADS: u32 = 128;

/// The launch shape of a kernel from its demangled name
/// (`void rssm::verify_kernel<4, float, false>(rssm_verify_params)`).
pub fn launch_of(kernel: &str) -> Option<KernelLaunch> {
    let after = kernel.split("rssm::").nth(1)?;
    let (family, rest) = after.split_once('<')?;
    let args: Vec<String> = rest
        .split_once('>')?
        .0
        .split(',')
        .map(|a| a.trim().to_string())
        .collect();
    let first: u32 = args.first()?.parse().ok()?;
    let (threads, dynamic_smem) = match family {
        "cursors_kernel" => (first, 0),
        "verify_kernel" => {
            let kda = args.get(2).map(String::as_str) == Some("true");
            let t = replayssm::spec::MAX_VERIFY_WINDOW as i32;
            // SAFETY: pure arithmetic in the launch layer (the formula verify.cu launches with).
            let bytes = unsafe { replayssm::ffi::rssm_verify_smem_bytes(t, 32 * first as i32, kda as i32) };
            (ROW_TILING_THREADS, u32::try_from(bytes).ok()?)
        }
        "verify_staged_kernel" => {
            // At the same 16-token window, one block over a whole head of V = K rows (the model
            // shapes' square heads, block_rows 0).
            let kda = args.get(2).map(String::as_str) == Some("true");
            let (t, k) = (replayssm::spec::MAX_VERIFY_WINDOW as i32, 32 * first as i32);
            // SAFETY: pure arithmetic in the launch layer (the formula verify.cu launches with).
            let bytes = unsafe { replayssm::ffi::rssm_verify_staged_smem_bytes(t, k, kda as i32, 0, k) };
            (ROW_TILING_THREADS, u32::try_from(bytes).ok()?)
        }
        _ => (ROW_TILING_THREADS, 0),
    };
    Some(KernelLaunch {
        family: family.to_string(),
        args,
        threads,
        dynamic_smem,
    })
}

/// Every compiled sm_90 kernel with its launch shape and theoretical occupancy (empty without CUDA).
pub fn report() -> Vec<(KernelResources, KernelLaunch, Occupancy)> {
    kernel_resources()
        .into_iter()
        .filter(|r| r.arch == SM90.name)
        .filter_map(|r| {
            let launch = launch_of(&r.kernel)?;
            let occ = occupancy(&SM90, r.registers, launch.threads, r.smem_bytes + launch.dynamic_smem);
            Some((r, launch, occ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values worked by hand from the CUDA occupancy calculator's rules for sm_90.
    #[test]
    fn occupancy_matches_hand_worked_cases() {
        // 94 regs: 3008 -> 3072 per warp; 65536 / 3072 = 21 warps -> 5 blocks of 4 warps.
        let o = occupancy(&SM90, 94, 128, 0);
        assert_eq!((o.blocks_per_sm, o.warps_per_sm, o.limiter), (5, 20, "registers"));
        assert!((o.fraction - 20.0 / 64.0).abs() < 1e-12);
        // 32 regs, 128 threads: 16 blocks by warps (64 / 4), registers allow 16 too (65536/1024=64 warps).
        let o = occupancy(&SM90, 32, 128, 0);
        assert_eq!((o.blocks_per_sm, o.warps_per_sm), (16, 64));
        // 12 regs, 32 threads: 64 blocks by warps, capped at 32 blocks.
        let o = occupancy(&SM90, 12, 32, 0);
        assert_eq!((o.blocks_per_sm, o.limiter), (32, "blocks"));
        // 40 KiB of shared memory: (40960 + 1024) = 41984 per block; 233472 / 41984 = 5 blocks.
        let o = occupancy(&SM90, 32, 128, 40 * 1024);
        assert_eq!((o.blocks_per_sm, o.limiter), (5, "shared memory"));
        // 255 regs: 8160 -> 8192 per warp; 8 warps -> 2 blocks of 4 warps.
        let o = occupancy(&SM90, 255, 128, 0);
        assert_eq!(o.blocks_per_sm, 2);
    }

    #[test]
    fn launch_shapes_from_demangled_names() {
        let l = launch_of("void rssm::verify_kernel<4, float, false>(rssm_verify_params)").expect("verify");
        assert_eq!((l.family.as_str(), l.threads), ("verify_kernel", 128));
        // T = 16, K = 128, GDN: 2*16*128 + 16 + 16 + 2*256 + 32 + 1 = 4673 floats.
        assert_eq!(l.dynamic_smem, 4 * 4673);
        let l = launch_of("void rssm::cursors_kernel<128>(rssm_cursor_params)").expect("cursors");
        assert_eq!((l.threads, l.dynamic_smem), (128, 0));
        assert_eq!(launch_of("something else"), None);
    }
}
