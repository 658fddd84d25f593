//! What this build contains: CUDA toolchain, architectures, and the per-kernel resource report
//! that ptxas printed while compiling (registers, stack frame, spills).

include!(concat!(env!("OUT_DIR"), "/build_info.rs"));

const RESOURCES_TSV: &str = include_str!(concat!(env!("OUT_DIR"), "/kernel_resources.tsv"));

/// One kernel instantiation on one architecture, as ptxas reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelResources {
    /// Demangled name, e.g. `void rssm::recurrent_kernel<4, float, false, float>(rssm_recurrent_params)`.
    pub kernel: String,
    pub arch: String,
    pub registers: u32,
    pub stack_bytes: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
    /// Static shared memory per block (dynamic shared memory comes from the launch).
    pub smem_bytes: u32,
}

/// The ptxas report of every compiled kernel (empty without CUDA).
pub fn kernel_resources() -> Vec<KernelResources> {
    RESOURCES_TSV
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            let num = |i: usize| f.get(i).and_then(|s| s.parse().ok());
            Some(KernelResources {
                kernel: f.first()?.to_string(),
                arch: f.get(1)?.to_string(),
                registers: num(2)?,
                stack_bytes: num(3)?,
                spill_stores: num(4)?,
                spill_loads: num(5)?,
                smem_bytes: num(6).unwrap_or(0),
            })
        })
        .collect()
}
