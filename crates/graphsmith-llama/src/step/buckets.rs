//! The batch buckets of graphs mode, which bucket a batch runs in, which buckets a model of a
//! given capacity uses ([`buckets_for_capacity`]: its captures, its search, its decoder's
//! rows), the error of a batch above the capacity, and the launch choices of each bucket
//! ([`BucketChoices`]: the rules', or what the search measured at first load).

use super::tuning::Tuning;
use crate::error::LlamaError;

/// The batch buckets captured in graphs mode.
pub const BUCKETS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];

/// The bucket a batch of `batch` rows runs in (the smallest that holds it), or `None` above the
/// largest (such a batch runs eagerly); the same rule as the cache's dispatch.
pub fn bucket_for(batch: usize) -> Option<usize> {
    BUCKETS.iter().copied().find(|&b| batch <= b && batch > 0)
}

/// The buckets a model made for batches of up to `capacity` sequences uses: every bucket up to
/// the one that holds `capacity` (all of them above the largest, whose larger batches run
/// eagerly). Its captures, its search of the launch choices and its cuBLASLt workspaces cover
/// these and no others.
pub fn buckets_for_capacity(capacity: usize) -> &'static [usize] {
    let n = BUCKETS
        .iter()
        .position(|&b| b >= capacity)
        .map_or(BUCKETS.len(), |i| i + 1);
    &BUCKETS[..n]
}

/// The rows of the decoder of a graphs-mode model of `capacity`: the bucket that holds it (its
/// padding rows need buffers too), or `capacity` itself above the largest bucket.
pub fn graph_rows(capacity: usize) -> usize {
    bucket_for(capacity).unwrap_or(capacity)
}

/// Checks a batch of `batch` sequences given to `call` against the model's `capacity`: above it
/// is an error naming both and the fix (in either mode, before anything runs).
pub fn check_batch(call: &str, batch: usize, capacity: usize) -> Result<(), LlamaError> {
    if batch <= capacity {
        return Ok(());
    }
    Err(LlamaError::Input(format!(
        "{call}: a batch of {batch} sequences, but the model was made for at most {capacity}; \
         make the model with a capacity of at least {batch} (`Model::new`'s rows, or \
         `bench --batch {batch}`)"
    )))
}

/// Appends to `ours` the items of `older` whose bucket (`bucket_of`) none of `ours` has, then
/// orders them by bucket (stably): the union of two searches' results, the newer winning.
pub fn union_by_bucket<T: Clone>(ours: &mut Vec<T>, older: &[T], bucket_of: impl Fn(&T) -> usize) {
    let have: Vec<usize> = ours.iter().map(&bucket_of).collect();
    ours.extend(
        older
            .iter()
            .filter(|x| !have.contains(&bucket_of(x)))
            .cloned(),
    );
    ours.sort_by_key(|x| bucket_of(x));
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

#[cfg(test)]
mod tests {
    use super::{buckets_for_capacity, check_batch, graph_rows};

    #[test]
    fn a_capacity_uses_the_buckets_up_to_the_one_that_holds_it() {
        assert_eq!(buckets_for_capacity(1), [1]);
        assert_eq!(buckets_for_capacity(2), [1, 2]);
        assert_eq!(buckets_for_capacity(3), [1, 2, 4]);
        assert_eq!(buckets_for_capacity(4), [1, 2, 4]);
        assert_eq!(buckets_for_capacity(33), [1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(buckets_for_capacity(64), [1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(buckets_for_capacity(100), [1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(
            [1, 3, 5, 64, 65, 100].map(graph_rows),
            [1, 4, 8, 64, 65, 100]
        );
    }

    #[test]
    fn a_batch_above_the_capacity_names_both_and_the_fix() {
        assert!(check_batch("Model::step", 3, 3).is_ok());
        assert_eq!(
            check_batch("Model::step", 5, 3).unwrap_err().to_string(),
            "bad input: Model::step: a batch of 5 sequences, but the model was made for at most 3; \
             make the model with a capacity of at least 5 (`Model::new`'s rows, or `bench --batch 5`)"
        );
    }
}
