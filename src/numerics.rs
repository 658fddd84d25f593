//! The pass rule of SPEC §6: elementwise `|x - r| <= atol + rtol * |r|` against an f64
//! reference, and no NaN or Inf anywhere.

/// Absolute and relative tolerance of one comparison.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub atol: f64,
    pub rtol: f64,
}

/// The outcome of comparing a result with its f64 reference.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Comparison {
    pub len: usize,
    /// Largest `|x - r|` over finite elements.
    pub max_abs_err: f64,
    /// Index of the element furthest outside its bound (or of the largest error when none is).
    pub worst: Option<usize>,
    /// Elements outside `atol + rtol * |r|`.
    pub violations: usize,
    /// Elements that are NaN or infinite (poison left unwritten counts here).
    pub non_finite: usize,
}

impl Comparison {
    pub fn passed(&self) -> bool {
        self.violations == 0 && self.non_finite == 0
    }
}

impl std::fmt::Display for Comparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "max |err| {:.3e} over {} elements, {} outside tolerance, {} non-finite",
            self.max_abs_err, self.len, self.violations, self.non_finite
        )
    }
}

/// Compares `actual[i]` with `reference[i]` for every `i`.
pub fn compare(actual: &[f32], reference: &[f64], tol: Tolerance) -> Comparison {
    assert_eq!(actual.len(), reference.len(), "compare: length mismatch");
    let mut c = Comparison {
        len: actual.len(),
        ..Default::default()
    };
    let mut worst_excess = f64::NEG_INFINITY;
    for (i, (&x, &r)) in actual.iter().zip(reference).enumerate() {
        let x = x as f64;
        if !x.is_finite() || !r.is_finite() {
            c.non_finite += 1;
            c.worst.get_or_insert(i);
            continue;
        }
        let err = (x - r).abs();
        let excess = err - (tol.atol + tol.rtol * r.abs());
        if excess > 0.0 {
            c.violations += 1;
        }
        if excess > worst_excess {
            worst_excess = excess;
            if c.non_finite == 0 {
                c.worst = Some(i);
            }
        }
        c.max_abs_err = c.max_abs_err.max(err);
    }
    c
}
