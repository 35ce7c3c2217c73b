//! The search's candidates and its verdict, as pure functions: which launch choices apply to a
//! bucket ([`keys`]), the values tried around the incumbent's, one key at a time and moving away
//! from it in each direction ([`directions`]), and whether a candidate beat the incumbent by more
//! than the noise of their paired timings ([`Verdict::judge`]).
//!
//! Pruned by the rules: a key is tried only where it changes a launch (the GEMV keys where the
//! GEMV kernels run, the ring GEMV at one row where it takes the model, a split cap only below
//! the rule's split count and without clusters, warps per column only up to the column's
//! slices), and a direction stops at its first value that does not win.

use serde::Serialize;

use crate::kernels::geometry::{AttentionLaunch, GEMV_ASYNC_BLOCKS_PER_SM};
use crate::step::buckets::BucketFacts;
use crate::step::tuning::{Tuning, PREFETCH_MIB_RULE, PROJECTIONS};

/// One launch choice the search varies at a time (the `--tune` key it sets).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Key {
    /// GEMV kernels or cuBLAS (`gemv`).
    Gemv,
    /// Which one-row projections run on the ring GEMV (`cpa`).
    Ring,
    /// The ring GEMV's blocks per multiprocessor (`cpab`).
    RingBlocks,
    /// Warps per output column of one projection (`qkv`, `o`, `gate_up`, `down`, `head`).
    Warps(usize),
    /// The register GEMV's blocks per multiprocessor (`blocks`).
    Blocks,
    /// The attention as thread block clusters or not (`cluster`).
    Cluster,
    /// A cap on the attention's blocks per row (`splits`).
    Splits,
    /// MiB of the next weights the attention asks L2 for (`pf`).
    Prefetch,
}

impl Key {
    /// The `--tune` key.
    pub fn name(&self) -> &'static str {
        match self {
            Key::Gemv => "gemv",
            Key::Ring => "cpa",
            Key::RingBlocks => "cpab",
            Key::Warps(i) => PROJECTIONS.get(*i).copied().unwrap_or("warps"),
            Key::Blocks => "blocks",
            Key::Cluster => "cluster",
            Key::Splits => "splits",
            Key::Prefetch => "pf",
        }
    }
}

/// The most the search asks the attention to prefetch, MiB.
const PREFETCH_MAX_MIB: u64 = 16;

/// Whether a step with `t` runs its projections on the GEMV kernels (as `Decoder::uses_gemv`).
pub fn uses_gemv(f: &BucketFacts, t: &Tuning) -> bool {
    if f.gemv_choice {
        t.gemv.unwrap_or(f.gemv_by_rule)
    } else {
        f.gemv_by_rule
    }
}

/// The ring GEMV's projections (a bit each, as `Tuning::ring_gemv`) with `t`.
fn ring_mask(f: &BucketFacts, t: &Tuning) -> u8 {
    if !(f.ring_fits && uses_gemv(f, t)) {
        return 0;
    }
    (0..4).fold(0, |m, i| {
        m | (u8::from(t.ring_gemv_for(i, f.ring_rule)) << i)
    })
}

/// The attention's launch with `t`.
pub fn attention_of(f: &BucketFacts, t: &Tuning) -> AttentionLaunch {
    AttentionLaunch::for_rows(
        f.rows,
        f.attention,
        f.max_ctx,
        f.sm_count,
        t.attention_splits,
        t.attention_cluster,
    )
}

/// The keys that change a launch of this bucket with `t`, in the order the search tries them:
/// the choice of kernels first, then the one-row projections, then the attention.
pub fn keys(f: &BucketFacts, t: &Tuning) -> Vec<Key> {
    let mut out = Vec::new();
    if f.gemv_choice {
        out.push(Key::Gemv);
    }
    if uses_gemv(f, t) {
        let mask = ring_mask(f, t);
        if f.ring_fits {
            out.push(Key::Ring);
            if mask != 0 {
                out.push(Key::RingBlocks);
            }
        }
        // q/k/v last: its rule leaves room for the attention's early blocks.
        for i in [1, 2, 3, 4, 0] {
            if mask >> i & 1 == 0 {
                out.push(Key::Warps(i));
            }
        }
        if mask != 15 {
            out.push(Key::Blocks);
        }
        out.push(Key::Prefetch);
    }
    let (_, group, head_dim) = f.attention;
    if group <= 4 && head_dim <= 128 {
        out.push(Key::Cluster);
    }
    if !attention_of(f, t).cluster {
        out.push(Key::Splits);
    }
    out
}

/// The candidates for `key` around `t`: each direction a list of choices moving away from `t`'s
/// value step by step (the search walks a direction until a step does not win). Each candidate
/// is `t` with only `key` changed.
pub fn directions(f: &BucketFacts, t: &Tuning, key: Key) -> Vec<Vec<Tuning>> {
    let with = |set: &dyn Fn(&mut Tuning)| {
        let mut c = *t;
        set(&mut c);
        c
    };
    match key {
        Key::Gemv => {
            let now = uses_gemv(f, t);
            vec![vec![with(&|c| c.gemv = Some(!now))]]
        }
        Key::Ring => {
            let mask = ring_mask(f, t);
            (0..4)
                .map(|i| vec![with(&|c| c.ring_gemv = Some(mask ^ (1 << i)))])
                .collect()
        }
        Key::RingBlocks => {
            let now = t.ring_gemv_blocks.unwrap_or(GEMV_ASYNC_BLOCKS_PER_SM);
            vec![vec![with(&|c| {
                c.ring_gemv_blocks = Some(3 - now.clamp(1, 2))
            })]]
        }
        Key::Warps(i) => {
            let now = t.warps_per_column[i].unwrap_or(f.warps_rule[i]);
            let most = f.warps_max[i].clamp(1, 8);
            let down =
                std::iter::successors(Some(now / 2), |w| Some(w / 2)).take_while(|&w| w >= 1);
            let up =
                std::iter::successors(Some(now * 2), |w| Some(w * 2)).take_while(|&w| w <= most);
            let set = |w: usize| with(&|c| c.warps_per_column[i] = Some(w));
            [down.map(set).collect::<Vec<_>>(), up.map(set).collect()]
                .into_iter()
                .filter(|d| !d.is_empty())
                .collect()
        }
        Key::Blocks => {
            let now = t.gemv_blocks_per_sm.unwrap_or(4);
            let down: Vec<Tuning> = (2..now)
                .rev()
                .map(|b| with(&|c| c.gemv_blocks_per_sm = Some(b)))
                .collect();
            if down.is_empty() {
                Vec::new()
            } else {
                vec![down]
            }
        }
        Key::Prefetch => {
            let now = t.prefetch_mib.unwrap_or(PREFETCH_MIB_RULE);
            let mut down: Vec<u64> = std::iter::successors(Some(now / 2), |m| Some(m / 2))
                .take_while(|&m| m >= 1)
                .collect();
            if now > 0 {
                down.push(0);
            }
            let up: Vec<u64> = std::iter::successors(Some((now * 2).max(1)), |m| Some(m * 2))
                .take_while(|&m| m <= PREFETCH_MAX_MIB)
                .collect();
            [down, up]
                .into_iter()
                .filter(|d| !d.is_empty())
                .map(|d| {
                    d.into_iter()
                        .map(|m| with(&|c| c.prefetch_mib = Some(m)))
                        .collect()
                })
                .collect()
        }
        Key::Cluster => {
            let now = attention_of(f, t).cluster;
            vec![vec![with(&|c| c.attention_cluster = Some(!now))]]
        }
        Key::Splits => {
            let a = attention_of(f, t);
            if a.cluster {
                return Vec::new();
            }
            let down: Vec<Tuning> = std::iter::successors(Some(a.splits / 2), |s| Some(s / 2))
                .take_while(|&s| s >= 1)
                .map(|s| with(&|c| c.attention_splits = Some(s)))
                .collect();
            if down.is_empty() {
                Vec::new()
            } else {
                vec![down]
            }
        }
    }
}

/// The smallest gain (a fraction of the incumbent's time) the search keeps a change for, however
/// quiet the timings: below it, a change is not worth a launch that differs from the rules'.
pub const MIN_GAIN: f64 = 0.003;

/// A candidate against the incumbent, from their paired timings (turn by turn).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// Medians of the turns' times.
    pub incumbent: f64,
    pub candidate: f64,
    /// The median of the paired gains, `(incumbent - candidate) / incumbent` per turn.
    pub gain: f64,
    /// The gain a win needs: [`MIN_GAIN`], or more where the turns are noisy (the median's
    /// standard error, from the gains' median absolute deviation, twice over).
    pub threshold: f64,
    pub wins: bool,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

impl Verdict {
    /// Judges paired timings: turn `i` timed the incumbent (`incumbent[i]`) and the candidate
    /// (`candidate[i]`) one after the other. The candidate wins when the median of its paired
    /// gains exceeds the threshold. Turns beyond the shorter list, and turns whose incumbent time
    /// is not positive, are left out; no turns never win.
    pub fn judge(incumbent: &[f64], candidate: &[f64]) -> Verdict {
        let mut gains: Vec<f64> = incumbent
            .iter()
            .zip(candidate)
            .filter(|(i, c)| **i > 0.0 && i.is_finite() && c.is_finite())
            .map(|(i, c)| (i - c) / i)
            .collect();
        let n = gains.len();
        let gain = median(&mut gains);
        let mut deviations: Vec<f64> = gains.iter().map(|g| (g - gain).abs()).collect();
        let mad = median(&mut deviations);
        // sigma ~ 1.4826 MAD; the median's standard error ~ 1.2533 sigma / sqrt(n).
        let noise = 1.4826 * 1.2533 * mad / (n.max(1) as f64).sqrt();
        let threshold = MIN_GAIN.max(2.0 * noise);
        Verdict {
            incumbent: median(&mut incumbent.to_vec()),
            candidate: median(&mut candidate.to_vec()),
            gain,
            threshold,
            wins: n > 0 && gain > threshold,
        }
    }
}

/// Shares of the search's time budget per bucket: the one-row bucket has the most choices,
/// the buckets the GEMV kernels could also serve some, the others the attention's only.
pub fn budget_share(f: &BucketFacts) -> f64 {
    if uses_gemv(f, &Tuning::default()) {
        4.0
    } else if f.gemv_choice {
        1.5
    } else {
        1.0
    }
}
