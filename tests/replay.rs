//! Kernel P (design §4 P, `src/kernels/replay.rs`, `csrc/kernels/replay.cu`) on the Emulated and
//! Reference backends: every S1 rejection of replay as a typed error before launch, the pool
//! untouched. P's bit-identity to kernel R over long chains of commits runs with F's, from the
//! same start, in tests/fold.rs (`common::spec_chain::chain` commits each step through F, P and
//! R); its GPU runs are in tests/gpu.rs.
mod common;

use common::spec_chain::{run_verify, small, spec_pool};

use common::*;
use replayssm::backend::Backend;
use replayssm::kernels::replay::replay;
use replayssm::Error;

#[test]
fn every_s1_rejection_of_replay_is_a_typed_error_before_launch() {
    for backend in [Backend::Emulated, Backend::Reference] {
        let (data, shape, pool, mut ring) = small();
        run_verify(backend, &data, &pool, 0, Some(&mut ring)).unwrap();
        let mut p = spec_pool(&shape, pool.state());
        let before = p.state().to_vec();
        let cases: Vec<(Vec<i32>, Vec<i32>, &str)> = vec![
            (vec![0, 9], vec![1, 1], "slot out of range"),
            (vec![0, -3], vec![1, 1], "negative slot"),
            (vec![1, 1], vec![1, 1], "duplicate live slot"),
            (vec![0, 1], vec![1, 5], "accept length > W"),
            (vec![0, 1], vec![-1, 1], "negative accept length"),
            (vec![0, 1], vec![1], "accept_lens length"),
        ];
        for (slots, lens, what) in cases {
            let e = replay(backend, &mut p, &ring, 0, &slots, &lens).expect_err(what);
            println!("{backend} replay {what}: {e}");
        }
        assert!(
            bits_equal(p.state(), &before).is_ok(),
            "{backend}: a refused replay changed the pool"
        );
        let e = replay(backend, &mut p, &ring, 2, &[0, 1], &[1, 1]).unwrap_err();
        assert!(
            matches!(e, Error::BadParam(ref m) if m.starts_with("layer = 2, must be in 0..=")),
            "{e}"
        );
    }
}
