//! The SIMT emulator must run CUDA semantics faithfully enough that a passing emulated kernel
//! means something: barriers that are missing must show, collectives must follow the CUDA
//! definitions, and invalid launches or kernel bugs must be reported instead of hanging.

use rand::{Rng, SeedableRng};
use replayssm::emulator as emu;
use replayssm::Status;

fn rng(seed: u64) -> rand_chacha::ChaCha8Rng {
    rand_chacha::ChaCha8Rng::seed_from_u64(seed)
}

#[test]
fn removed_barrier_is_exposed_and_the_correct_kernel_passes() {
    let mut r = rng(1);
    let (n, blocks) = (128usize, 6usize);
    let input: Vec<f32> = (0..n * blocks).map(|_| r.gen_range(0.5f32..2.0)).collect();
    let expected: Vec<f32> = (0..n * blocks)
        .map(|i| 2.0 * input[(i / n) * n + (i % n + 1) % n])
        .collect();

    let good = emu::rotate(&input, n, true).unwrap();
    assert_eq!(good, expected, "with the barrier the rotation must be exact");

    let broken = emu::rotate(&input, n, false).unwrap();
    let wrong = broken
        .iter()
        .zip(&expected)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    assert!(
        wrong > 0,
        "without __syncthreads the emulator must expose the race, but all {} outputs were right",
        expected.len()
    );
}

#[test]
fn removed_barrier_in_a_static_shared_tree_reduction_is_exposed() {
    let mut r = rng(2);
    // The schedule is random per block: a missed race in one block (at worst a 1-in-4 chance
    // for the barrier after step 0, whose readers and writers are whole warps) is caught by
    // another. With 48 blocks a miss in all of them has probability below 1e-28.
    let (n, blocks) = (256usize, 48usize);
    // Integers: the tree sum is exact, so the correct kernel must match bit for bit.
    let input: Vec<f32> = (0..n * blocks).map(|_| r.gen_range(1..100) as f32).collect();
    let expected: Vec<f32> = input.chunks(n).map(|c| c.iter().sum()).collect();
    assert_eq!(emu::block_sum(&input, n, None).unwrap(), expected);
    for step in [0usize, 2, 4] {
        let broken = emu::block_sum(&input, n, Some(step)).unwrap();
        assert_ne!(
            broken, expected,
            "removing the barrier after tree step {step} went unnoticed"
        );
    }
}

fn seg(l: i32, w: i32) -> i32 {
    l & !(w - 1)
}

#[test]
fn shuffles_and_votes_follow_cuda_definitions() {
    let mut r = rng(3);
    for width in [32, 16, 8, 4, 2] {
        for arg in [0, 1, 3, 5, 17, 31] {
            let input: [i32; 32] = std::array::from_fn(|_| r.gen_range(-1000..1000));
            let got = emu::shuffles(&input, arg, width).unwrap();
            let pred_bits: u32 = (0..32).fold(0, |acc, l| acc | (((input[l] & 1) as u32) << l));
            for l in 0..32i32 {
                let s = seg(l, width);
                let li = l as usize;
                assert_eq!(
                    got.shfl[li],
                    input[(s + arg % width) as usize],
                    "shfl w={width} arg={arg} lane={l}"
                );
                let x = l ^ arg;
                let x_src = if x >= s && x < s + width { x } else { l };
                assert_eq!(got.xor[li], input[x_src as usize], "xor w={width} arg={arg} lane={l}");
                let d_src = if (l - s) + arg < width { l + arg } else { l };
                assert_eq!(got.down[li], input[d_src as usize], "down w={width} arg={arg} lane={l}");
                let u_src = if (l - s) - arg >= 0 { l - arg } else { l };
                assert_eq!(got.up[li], input[u_src as usize], "up w={width} arg={arg} lane={l}");
                assert_eq!(got.ballot[li], pred_bits);
                assert_eq!(got.any[li], (pred_bits != 0) as i32);
                assert_eq!(got.all[li], (pred_bits == u32::MAX) as i32);
            }
        }
    }
}

#[test]
fn warp_sum_gives_every_lane_the_same_bits_and_the_right_sum() {
    let mut r = rng(4);
    let warps = 64;
    let input: Vec<f32> = (0..32 * warps).map(|_| r.gen_range(-1.0f32..1.0)).collect();
    let got = emu::warp_sum(&input).unwrap();
    for (w, chunk) in input.chunks(32).enumerate() {
        // The butterfly's own tree, written out: pairs at distance 16, 8, 4, 2, 1.
        let mut x: Vec<f32> = chunk.to_vec();
        for off in [16, 8, 4, 2, 1] {
            x = (0..32).map(|l| x[l] + x[l ^ off]).collect();
        }
        assert_eq!(
            got[w].to_bits(),
            x[0].to_bits(),
            "warp {w}: lanes disagree or the tree differs"
        );
        let exact: f64 = chunk.iter().map(|&v| v as f64).sum();
        assert!((got[w] as f64 - exact).abs() < 1e-5);
    }
}

#[test]
fn atomics_are_atomic_across_blocks_on_several_host_threads() {
    let (blocks, threads) = (97u32, 96u32);
    let (count, bits) = emu::atomics(blocks, threads).unwrap();
    assert_eq!(count as u32, blocks * threads);
    assert_eq!(bits, u32::MAX);
}

#[test]
fn invalid_launch_configurations_are_refused() {
    assert!(emu::launch(1, 1024, 1, 0).is_ok());
    assert!(emu::launch(3, 32, 4, 48 * 1024).is_ok());
    for (g, bx, by, smem, why) in [
        (1, 2048, 1, 0, "too many threads"),
        (1, 512, 4, 0, "2048 threads in 2D"),
        (0, 32, 1, 0, "empty grid"),
        (1, 0, 1, 0, "empty block"),
        (1, 32, 1, 300 * 1024, "too much shared memory"),
    ] {
        let e = emu::launch(g, bx, by, smem).expect_err(why);
        assert_eq!(e.status, Status::Emulator);
        assert!(
            e.message.contains("invalid launch configuration"),
            "{why}: {}",
            e.message
        );
    }
}

#[test]
fn divergent_collectives_and_deadlocks_are_reported_not_hung() {
    let e = emu::divergent().expect_err("half a warp shuffling with exited lanes must fail");
    assert!(e.message.contains("warp collective"), "{}", e.message);
    let e = emu::deadlock().expect_err("barrier vs shuffle must be reported");
    assert!(e.message.contains("deadlock"), "{}", e.message);
    // The emulator is usable again afterwards.
    assert!(emu::launch(1, 64, 1, 0).is_ok());
}

#[test]
fn bf16_and_f16_conversions_round_to_nearest_even_like_half() {
    let mut r = rng(5);
    let mut input: Vec<f32> = (0..20000)
        .map(|_| f32::from_bits(r.gen::<u32>()))
        .filter(|x| x.is_finite())
        .collect();
    input.extend([
        0.0,
        -0.0,
        1.0,
        65504.0,
        65520.0,
        6.1e-5,
        5.9e-8,
        3.0e-8,
        1e-40,
        f32::INFINITY,
        f32::MIN_POSITIVE,
    ]);
    // Ties: bf16 halfway cases.
    input.extend([f32::from_bits(0x3f80_8000), f32::from_bits(0x3f81_8000)]);
    let (b, h) = emu::convert(&input);
    for (i, &x) in input.iter().enumerate() {
        assert_eq!(
            b[i].to_bits(),
            half::bf16::from_f32(x).to_f32().to_bits(),
            "bf16 of {x:e}"
        );
        assert_eq!(
            h[i].to_bits(),
            half::f16::from_f32(x).to_f32().to_bits(),
            "f16 of {x:e}"
        );
    }
}
