//! cuBLASLt's algorithm per (bucket, matmul), measured once per shape and kept in the same
//! cache entry as the launch choices: the heuristic's candidates (`kernels/cublaslt.rs`) timed
//! turn by turn with CUDA events on the model's real weights (layer 0's, and lm_head's), the
//! heuristic's first kept unless another beats it by more than [`LT_MIN_GAIN`]. A cached
//! algorithm is reused only for the cuBLASLt version that chose it, and only if cuBLASLt still
//! accepts it for the matmul (`cublasLtMatmulAlgoCheck`); otherwise it is measured again.

use std::time::Instant;

use graphsmith::{Context, Event, Stream};
use serde::{Deserialize, Serialize};

use crate::error::{LlamaError, Result};
use crate::kernels::cublaslt::{AlgoData, Projection};
use crate::step::buckets::union_by_bucket;
use crate::step::decoder::Decoder;
use crate::step::options::Gemm;

/// Paired turns per matmul (after one warm-up run of each candidate).
const TURNS: usize = 8;
/// About this much device time per turn, ms (runs of the matmul, 2 to 64).
const TURN_MS: f64 = 0.2;
/// The gain over the heuristic's first (a fraction of its time) another candidate must show.
pub const LT_MIN_GAIN: f64 = 0.01;

/// One matmul's algorithm in one bucket.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LtChoice {
    pub bucket: usize,
    pub matmul: Projection,
    /// cuBLASLt's `cublasLtMatmulAlgo_t`, as it is.
    pub algo: AlgoData,
    /// Its place among the heuristic's candidates (0: the heuristic's first).
    pub rank: usize,
    /// Candidates timed.
    pub candidates: usize,
    /// Median ms of one matmul with the heuristic's first and with the chosen one (`None`
    /// where that candidate did not run).
    pub heuristic_ms: Option<f64>,
    pub chosen_ms: Option<f64>,
}

/// The cuBLASLt part of a cache entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LtEntry {
    /// `cublasLtGetVersion` of the library that chose the algorithms.
    pub version: usize,
    /// The measuring took this long, ms.
    pub measure_ms: f64,
    pub choices: Vec<LtChoice>,
}

impl LtEntry {
    /// Whether the entry holds an algorithm for every matmul of `bucket`.
    pub fn covers(&self, bucket: usize) -> bool {
        Projection::ALL.iter().all(|p| {
            self.choices
                .iter()
                .any(|c| c.bucket == bucket && c.matmul == *p)
        })
    }

    /// This entry's choices with `older`'s for the buckets this one lacks (both of one
    /// cuBLASLt version: the caller checks), ordered by bucket and matmul.
    pub fn merged_over(mut self, older: &LtEntry) -> LtEntry {
        self.choices.sort_by_key(|c| c.matmul);
        union_by_bucket(&mut self.choices, &older.choices, |c| c.bucket);
        self
    }
}

/// The median of `v` (0 when empty).
fn median(v: &[f64]) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::INFINITY,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The candidate to keep from each one's median time (index 0: the heuristic's first): the
/// fastest, if it beats the first by more than [`LT_MIN_GAIN`], else the first. A candidate
/// that failed to run has an infinite time.
pub fn pick(medians: &[f64]) -> usize {
    let Some(&first) = medians.first() else {
        return 0;
    };
    let (best, &t) = medians
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(b.1))
        .unwrap_or((0, &first));
    if !first.is_finite() || (t.is_finite() && (first - t) / first > LT_MIN_GAIN) {
        best
    } else {
        0
    }
}

/// Sets the decoder's algorithms from `cached` where it was made by this cuBLASLt and each one
/// is accepted; otherwise measures them all. Returns the entry to keep and whether it was
/// measured now; `None` without cuBLASLt (with a note saying why, where `auto` lacks it).
pub(super) fn settle(
    ctx: &Context,
    stream: &Stream,
    work: &mut Decoder,
    cached: Option<&LtEntry>,
    notes: &mut Vec<String>,
) -> Result<Option<(LtEntry, bool)>> {
    if let Some(why) = work.lt_missing() {
        notes.push(why.to_string());
    }
    let Some(version) = work.lt().map(|lt| lt.version()) else {
        return Ok(None);
    };
    match cached {
        Some(c) if c.version == version => match apply(work, c) {
            Ok(()) => return Ok(Some((c.clone(), false))),
            Err(e) => notes.push(format!("{e}; cuBLASLt's algorithms measured again")),
        },
        Some(c) => notes.push(format!(
            "cuBLASLt {version} in place of {} that chose the cached algorithms: measured again",
            c.version
        )),
        None => {}
    }
    match measure(ctx, stream, work) {
        Ok(entry) => Ok(Some((entry, true))),
        // `auto` may run without cuBLASLt: cuBLAS takes its place, with a warning.
        Err(e) if work.options().gemm == Gemm::Auto => {
            let why = format!("{e}; cuBLAS runs above one row");
            eprintln!("warning: {why}");
            notes.push(why);
            work.drop_lt(stream)?;
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Sets every cached algorithm of the decoder's buckets (each checked by cuBLASLt); the first
/// refused is the error.
fn apply(work: &Decoder, entry: &LtEntry) -> Result<()> {
    let buckets = work.lt_buckets();
    for c in entry.choices.iter().filter(|c| buckets.contains(&c.bucket)) {
        work.set_lt_algo(c.bucket, c.matmul, c.algo)?;
    }
    if let Some(lt) = work.lt() {
        lt.set_chosen();
    }
    Ok(())
}

/// Times `runs` matmuls of `projection` at `bucket` rows between two events, ms per matmul.
fn time(
    (stream, start, end): (&Stream, &Event, &Event),
    work: &mut Decoder,
    (bucket, projection): (usize, Projection),
    runs: usize,
) -> Result<f64> {
    stream.record(start)?;
    for _ in 0..runs {
        issue(work, stream, bucket, projection)?;
    }
    stream.record(end)?;
    end.synchronize()?;
    Ok(end.elapsed_ms_since(start)? as f64 / runs.max(1) as f64)
}

/// One matmul, its failure (a cuBLASLt status) as the error that names it.
fn issue(work: &mut Decoder, stream: &Stream, bucket: usize, p: Projection) -> Result<()> {
    work.issue_lt_matmul(stream, bucket, p)
        .map_err(|e| work.take_cublas_failure().unwrap_or(LlamaError::Runtime(e)))
}

/// Measures every matmul of every bucket that runs on cuBLASLt, leaving each one's winner in
/// the decoder's cuBLASLt.
pub(super) fn measure(ctx: &Context, stream: &Stream, work: &mut Decoder) -> Result<LtEntry> {
    let started = Instant::now();
    let (start, end) = (
        ctx.event("search/lt-start", true)?,
        ctx.event("search/lt-end", true)?,
    );
    let events = (stream, &start, &end);
    let version = work.lt().map_or(0, |lt| lt.version());
    let mut choices = Vec::new();
    for bucket in work.lt_buckets() {
        for p in Projection::ALL {
            work.prepare_lt(bucket, p)?;
            let lt_count = work.lt().map_or(0, |lt| lt.candidate_count(bucket, p));
            let select = |work: &Decoder, i| {
                if let Some(lt) = work.lt() {
                    lt.select(bucket, p, i)
                }
            };
            // Warm-up: each candidate once; one that fails is left out.
            let mut ok = vec![true; lt_count];
            for (i, ok) in ok.iter_mut().enumerate() {
                select(work, i);
                *ok = issue(work, stream, bucket, p).is_ok();
            }
            stream.synchronize()?;
            let Some(first_ok) = ok.iter().position(|&ok| ok) else {
                return Err(LlamaError::Input(format!(
                    "cuBLASLt: no candidate of the {} matmul at bucket {bucket} ran; use --gemm cublas",
                    p.name()
                )));
            };
            select(work, first_ok);
            let estimate = time(events, work, (bucket, p), 2)?;
            let runs = ((TURN_MS / estimate.max(1e-4)).ceil() as usize).clamp(2, 64);
            let mut times = vec![Vec::new(); lt_count];
            for turn in 0..TURNS {
                for j in 0..lt_count {
                    let i = if turn % 2 == 0 { j } else { lt_count - 1 - j };
                    if ok[i] {
                        select(work, i);
                        times[i].push(time(events, work, (bucket, p), runs)?);
                    }
                }
            }
            let medians: Vec<f64> = times.iter().map(|t| median(t)).collect();
            let chosen = pick(&medians);
            let chosen = if ok[chosen] { chosen } else { first_ok };
            select(work, chosen);
            let Some(algo) = work.lt().and_then(|lt| lt.algo(bucket, p)) else {
                continue;
            };
            choices.push(LtChoice {
                bucket,
                matmul: p,
                algo,
                rank: chosen,
                candidates: lt_count,
                heuristic_ms: medians.first().copied().filter(|t| t.is_finite()),
                chosen_ms: medians.get(chosen).copied().filter(|t| t.is_finite()),
            });
        }
    }
    stream.synchronize()?;
    if let Some(lt) = work.lt() {
        lt.set_chosen();
    }
    Ok(LtEntry {
        version,
        measure_ms: started.elapsed().as_secs_f64() * 1e3,
        choices,
    })
}

#[cfg(test)]
mod tests {
    use super::{median, pick};

    #[test]
    fn the_heuristics_first_stays_unless_another_clearly_wins() {
        assert_eq!(pick(&[]), 0);
        assert_eq!(pick(&[1.0, 0.995, 1.2]), 0, "0.5% is within the noise");
        assert_eq!(pick(&[1.0, 0.9, 0.95]), 1);
        assert_eq!(pick(&[f64::INFINITY, 2.0, 1.5]), 2, "the first failed");
        assert_eq!(pick(&[1.0, f64::INFINITY]), 0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[]), f64::INFINITY);
    }
}
