//! The model's tuning entries (`replayssm model --write-table`): for every bucket of the model
//! shapes, the implementation of V, F, P, VF, VB and D the model ranks first, written where that is not
//! the default (a bucket without an entry runs the default, which the model ranks first there).
//! Measured entries already in the table stay: a device run outranks the model.
//!
//! D's buckets are cache lengths L, and a request flushes once every L steps: D is ranked by its
//! time per step over that cycle, L - 1 non-flush launches and one flush.

use replayssm::dtype::DType;
use replayssm::problem::Variant;
use replayssm::tuning::{Choice, Impl, Kernel, Key, Table, B_BUCKETS, L_BUCKETS, T_BUCKETS};

use super::sass::Function;
use super::{best, find, predict, Machine, Point, Prediction};
use crate::floor::MODEL_SHAPES;

/// The choice a model implementation name stands for (`staged/32`: staged over 32-row blocks).
fn choice_of(implementation: &str) -> Option<Choice> {
    if let Some(rows) = implementation.strip_prefix("staged/") {
        return Some(Choice {
            imp: Impl::Staged,
            block_rows: rows.parse().ok()?,
        });
    }
    match implementation {
        "default" => Some(Choice::DEFAULT),
        "staged" => Some(Choice {
            imp: Impl::Staged,
            block_rows: 0,
        }),
        "prefetch" => Some(Choice {
            imp: Impl::Prefetch,
            block_rows: 0,
        }),
        _ => None,
    }
}

/// D's implementation with the least time per step at cache length `l`: one flush and `l - 1`
/// non-flush launches per `l` steps.
fn decode_choice(ps: &[Prediction], l: usize) -> Option<Choice> {
    let per_step = |implementation: &str| {
        let nonflush = find(ps, "D-nonflush", implementation)?.time_us;
        let flush = find(ps, "D-flush", implementation)?.time_us;
        Some(((l - 1) as f64 * nonflush + flush) / l as f64)
    };
    ["default", "prefetch"]
        .into_iter()
        .filter_map(|i| Some((per_step(i)?, i)))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .and_then(|(_, i)| choice_of(i))
}

/// Adds the model's non-default choices to `table` (bf16, every model shape, T (D: L) and B
/// bucket); returns how many entries it set.
pub fn write_modelled(functions: &[Function], m: &Machine, table: &mut Table) -> usize {
    let mut set = 0;
    let mut insert = |table: &mut Table, key: Key, choice: Choice| {
        if choice != Choice::DEFAULT {
            table.insert_modelled(&key, choice);
            set += 1;
        }
    };
    for shape in MODEL_SHAPES {
        let d = &shape.dims;
        let key = |kernel, window, batch| Key {
            kernel,
            kda: shape.variant == Variant::Kda,
            k: d.k,
            v: d.v,
            hv: d.hv,
            window,
            batch,
        };
        for &t in &T_BUCKETS {
            for &batch in &B_BUCKETS {
                let p = Point {
                    shape,
                    act: DType::BF16,
                    batch,
                    t,
                };
                let ps = predict(functions, m, &p);
                // VB's entries are its rows per block at the default cache length (L = 16).
                let cases = [
                    ("V", Kernel::V),
                    ("F", Kernel::F),
                    ("P", Kernel::P),
                    ("VF", Kernel::VF),
                    ("VB-L16", Kernel::VB),
                ];
                for (case, kernel) in cases {
                    if let Some(choice) = best(&ps, case).and_then(|b| choice_of(b.kernel.implementation)) {
                        insert(table, key(kernel, t, batch), choice);
                    }
                }
            }
        }
        for &l in L_BUCKETS.iter().filter(|&&l| l >= 2) {
            for &batch in &B_BUCKETS {
                let p = Point {
                    shape,
                    act: DType::BF16,
                    batch,
                    t: l,
                };
                if let Some(choice) = decode_choice(&predict(functions, m, &p), l) {
                    insert(table, key(Kernel::D, l, batch), choice);
                }
            }
        }
    }
    set
}
