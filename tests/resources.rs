//! ptxas's resource report, captured by build.rs: no kernel may spill or use a stack frame.
mod common;

use replayssm::build_info;

#[test]
fn no_kernel_spills_or_uses_a_stack_frame() {
    if !build_info::CUDA_COMPILED {
        if std::env::var("REPLAYSSM_REQUIRE_CUDA").as_deref() == Ok("1") {
            panic!("REPLAYSSM_REQUIRE_CUDA=1 but the CUDA backend was not compiled");
        }
        common::say("SKIPPED no_kernel_spills_or_uses_a_stack_frame: built without nvcc, no ptxas report");
        return;
    }
    let report = build_info::kernel_resources();
    let recurrent: Vec<_> = report
        .iter()
        .filter(|r| r.kernel.contains("recurrent_kernel"))
        .collect();
    // Every compiled head dim x 2 variants x (f32, and f16 / bf16 each with f32 or rounded
    // records: 5 forms), on every SASS architecture compiled.
    let archs = build_info::CUDA_ARCHS.split(',').count();
    assert_eq!(
        recurrent.len(),
        replayssm::limits::KERNEL_HEAD_DIMS.len() * 10 * archs,
        "kernel R instantiations in the report: {recurrent:#?}"
    );
    assert!(
        recurrent.iter().any(|r| r.arch == "sm_90"),
        "no sm_90 SASS in the report"
    );
    for r in &report {
        assert_eq!(
            (r.stack_bytes, r.spill_stores, r.spill_loads),
            (0, 0, 0),
            "{} on {}: stack/spills",
            r.kernel,
            r.arch
        );
        assert!(
            r.registers > 0 && r.registers <= 255,
            "{} on {}: {} registers",
            r.kernel,
            r.arch,
            r.registers
        );
    }
}
