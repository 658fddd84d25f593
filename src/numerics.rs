//! The pass rule of design §6: elementwise `|x - r| <= atol + rtol * |r|` against an f64
//! reference, and no NaN or Inf anywhere.

/// Absolute and relative tolerance of one comparison.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub atol: f64,
    pub rtol: f64,
}

/// A tolerance that cannot judge anything: NaN, infinite or negative.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[error("{name} = {value} is not a finite number >= 0 (a NaN or infinite tolerance would pass any error)")]
pub struct ToleranceError {
    /// `atol` or `rtol`.
    pub name: &'static str,
    pub value: f64,
}

impl Tolerance {
    /// The tolerance, refused when either bound is NaN, infinite or negative.
    pub fn new(atol: f64, rtol: f64) -> Result<Self, ToleranceError> {
        let t = Tolerance { atol, rtol };
        t.validate()?;
        Ok(t)
    }

    /// Both bounds are finite and non-negative.
    pub fn validate(&self) -> Result<(), ToleranceError> {
        for (name, value) in [("atol", self.atol), ("rtol", self.rtol)] {
            // Written so that NaN fails too.
            if !(value.is_finite() && value >= 0.0) {
                return Err(ToleranceError { name, value });
            }
        }
        Ok(())
    }
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
    // A NaN, infinite or negative tolerance judges nothing: every element fails.
    let tol_ok = tol.validate().is_ok();
    for (i, (&x, &r)) in actual.iter().zip(reference).enumerate() {
        let x = x as f64;
        if !x.is_finite() || !r.is_finite() {
            c.non_finite += 1;
            c.worst.get_or_insert(i);
            continue;
        }
        let err = (x - r).abs();
        let excess = err - (tol.atol + tol.rtol * r.abs());
        // `within` is false for a NaN excess (a NaN or infinite tolerance): such an element
        // fails; `excess > 0.0` would have passed it.
        let within = excess <= 0.0;
        if !tol_ok || !within {
            c.violations += 1;
            if !tol_ok || excess.is_nan() {
                c.worst.get_or_insert(i);
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_tolerances_fail_instead_of_passing_everything() {
        let actual = [1.0e6f32, 0.0];
        let reference = [0.0f64, 0.0];
        for (atol, rtol) in [
            (f64::NAN, 0.0),
            (0.0, f64::NAN),
            (f64::NAN, f64::NAN),
            (0.0, f64::INFINITY),
            (f64::INFINITY, 0.0),
            (f64::INFINITY, f64::INFINITY),
        ] {
            let c = compare(&actual, &reference, Tolerance { atol, rtol });
            assert!(!c.passed(), "atol={atol} rtol={rtol}: {c}");
            assert!(Tolerance::new(atol, rtol).is_err(), "atol={atol} rtol={rtol}");
        }
        // A negative tolerance is refused by name.
        let e = Tolerance::new(1e-3, -1.0).unwrap_err();
        assert_eq!(e.name, "rtol");
        assert!(e.to_string().contains("rtol = -1"), "{e}");
        assert!(Tolerance::new(0.0, 8e-3).is_ok());
    }
}
