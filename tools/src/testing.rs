//! Helpers the test suites of both crates share: visible skips and the GPU gate.

use std::io::Write;

use replayssm::Backend;

/// Prints past the test harness's capture, so a skip is visible in `cargo test` output.
pub fn say(msg: &str) {
    // Own line even when the harness has just printed "test name ... ".
    let _ = writeln!(std::io::stderr().lock(), "\n{msg}");
}

/// `true` when the Cuda backend can run. Otherwise prints why and returns `false`, or panics
/// when `REPLAYSSM_REQUIRE_GPU=1` (a lent GPU machine must not skip).
pub fn gpu_available(test: &str) -> bool {
    match Backend::Cuda.availability() {
        Ok(()) => true,
        Err(why) => {
            if std::env::var("REPLAYSSM_REQUIRE_GPU").as_deref() == Ok("1") {
                panic!("{test}: REPLAYSSM_REQUIRE_GPU=1 but no GPU is usable: {why}");
            }
            say(&format!("SKIPPED {test}: no usable GPU: {why}"));
            false
        }
    }
}
