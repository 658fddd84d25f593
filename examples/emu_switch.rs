//! Measures the emulator's cost per lane-collective (developer aid).
use std::time::Instant;
fn main() {
    let warps = 20000;
    let input = vec![1.0f32; warps * 32];
    let t0 = Instant::now();
    let out = replayssm::emulator::warp_sum(&input).unwrap();
    let dt = t0.elapsed();
    let resumes = (warps * 32 * 6) as f64;
    println!(
        "{} warps: {:?}, {:.1} ns per lane-collective (sum {})",
        warps,
        dt,
        dt.as_nanos() as f64 / resumes,
        out[0]
    );
}
