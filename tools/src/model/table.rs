//! The model's tuning entries (`replayssm model --write-table`): for every bucket of the model
//! shapes, the implementation of V, F, P and VF the model ranks first, written where that is not the
//! default (a bucket without an entry runs the default, which the model ranks first there).
//! Measured entries already in the table stay: a device run outranks the model.
//!
//! D is left to its default: its buckets are cache lengths, and which of a decode step's requests
//! flush is not known from the shape.

use replayssm::dtype::DType;
use replayssm::problem::Variant;
use replayssm::tuning::{Choice, Impl, Kernel, Key, Table, B_BUCKETS, T_BUCKETS};

use super::sass::Function;
use super::{best, predict, Machine, Point};
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

/// Adds the model's non-default choices to `table` (bf16, every model shape, T and B bucket);
/// returns how many entries it set.
pub fn write_modelled(functions: &[Function], m: &Machine, table: &mut Table) -> usize {
    let mut set = 0;
    for shape in MODEL_SHAPES {
        for &t in &T_BUCKETS {
            for &batch in &B_BUCKETS {
                let p = Point {
                    shape,
                    act: DType::BF16,
                    batch,
                    t,
                };
                let ps = predict(functions, m, &p);
                for (case, kernel) in [("V", Kernel::V), ("F", Kernel::F), ("P", Kernel::P), ("VF", Kernel::VF)] {
                    let Some(choice) = best(&ps, case).and_then(|b| choice_of(b.kernel.implementation)) else {
                        continue;
                    };
                    if choice == Choice::DEFAULT {
                        continue;
                    }
                    let d = &shape.dims;
                    let key = Key {
                        kernel,
                        kda: shape.variant == Variant::Kda,
                        k: d.k,
                        v: d.v,
                        hv: d.hv,
                        window: t,
                        batch,
                    };
                    table.insert_modelled(&key, choice);
                    set += 1;
                }
            }
        }
    }
    set
}
