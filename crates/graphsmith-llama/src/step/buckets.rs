//! The batch buckets of graphs mode, which bucket a batch runs in, and the launch choices of
//! each bucket ([`BucketChoices`]: the rules', or what the search measured at first load).

use super::tuning::Tuning;

/// The batch buckets captured in graphs mode.
pub const BUCKETS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];

/// The bucket a batch of `batch` rows runs in (the smallest that holds it), or `None` above the
/// largest (such a batch runs eagerly); the same rule as the cache's dispatch.
pub fn bucket_for(batch: usize) -> Option<usize> {
    BUCKETS.iter().copied().find(|&b| batch <= b && batch > 0)
}

/// Launch choices per bucket: a step of `rows` rows takes the choices of the bucket that holds
/// it ([`bucket_for`]); a step above the largest bucket (run eagerly) takes the largest's. The
/// default holds the rules' choice ([`Tuning::default`]) everywhere.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BucketChoices {
    by_bucket: [Tuning; BUCKETS.len()],
}

impl BucketChoices {
    /// The index in [`BUCKETS`] whose choices a step of `rows` rows takes.
    fn slot(rows: usize) -> usize {
        BUCKETS
            .iter()
            .position(|&b| rows <= b)
            .unwrap_or(BUCKETS.len() - 1)
    }

    /// The choices of a step of `rows` rows.
    pub fn for_rows(&self, rows: usize) -> Tuning {
        self.by_bucket[Self::slot(rows)]
    }

    /// Sets the choices of `bucket` (one of [`BUCKETS`]); another value is an error naming the
    /// buckets.
    pub fn set(&mut self, bucket: usize, tuning: Tuning) -> Result<(), String> {
        match BUCKETS.iter().position(|&b| b == bucket) {
            Some(i) => {
                self.by_bucket[i] = tuning;
                Ok(())
            }
            None => Err(format!(
                "{bucket} is not a bucket (the buckets: {BUCKETS:?})"
            )),
        }
    }

    /// Each bucket with its choices, smallest first.
    pub fn iter(&self) -> impl Iterator<Item = (usize, Tuning)> + '_ {
        BUCKETS.iter().copied().zip(self.by_bucket.iter().copied())
    }

    /// Whether every bucket holds the rules' choice.
    pub fn is_default(&self) -> bool {
        self.by_bucket.iter().all(Tuning::is_default)
    }
}

/// What the rules decide for one bucket of one model on one device, and which launch choices
/// exist there: what the search's candidates are made from (`step::search::candidates`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketFacts {
    /// The bucket's rows.
    pub rows: usize,
    /// Whether both the GEMV kernels and cuBLAS can run the projections (`Gemm::Auto`, and
    /// GEMV kernels instantiated for this many rows).
    pub gemv_choice: bool,
    /// Whether the rules run the projections on the GEMV kernels.
    pub gemv_by_rule: bool,
    /// The rules' warps per output column of q/k/v, o, gate/up, down and lm_head.
    pub warps_rule: [usize; 5],
    /// The most warps per column that each projection's columns give work to.
    pub warps_max: [usize; 5],
    /// Whether the ring GEMV takes this bucket's projections (one row, every K it takes).
    pub ring_fits: bool,
    /// Whether the rule runs them on it (`kernels::geometry::ring_gemv_rule`).
    pub ring_rule: bool,
    /// (key/value heads, query heads per key/value head, head_dim) of the attention.
    pub attention: (usize, usize, usize),
    /// Positions each row's cache holds.
    pub max_ctx: usize,
    /// Multiprocessors of the device.
    pub sm_count: usize,
}
