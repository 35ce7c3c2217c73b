//! Timing the candidates on the device: each one captured as the bucket's step graph on the
//! model's own weights, replayed turn by turn against the incumbent's graph (CUDA events around
//! a few replays, from the same positions each turn), judged on the medians
//! ([`Verdict::judge`]); the coordinate descent ([`descend`]) within a time budget per bucket.

use std::time::{Duration, Instant};

use graphsmith::{CaptureMode, Context, Event, Exec, Stream};

use super::cache::BucketResult;
use super::candidates::{budget_share, Verdict};
use super::descent::descend;
use crate::error::{LlamaError, Result};
use crate::step::buckets::BucketFacts;
use crate::step::decoder::Decoder;
use crate::step::tuning::Tuning;

/// Paired turns per duel (after one warm-up turn each).
const TURNS: usize = 15;
/// About this much device time per turn, ms (replays of a step, 2 to 16).
const TURN_MS: f64 = 4.0;
/// The positions the timed steps start from: half the context, at most this (a step's
/// attention reads every position before its own).
const START_POSITION: usize = 128;

/// What a search of every bucket gave.
pub(super) struct Searched {
    pub buckets: Vec<BucketResult>,
    pub out_of_budget: bool,
    pub notes: Vec<String>,
}

/// Times graphs of one decoder's steps.
struct Timer<'a> {
    stream: &'a Stream,
    start: Event,
    end: Event,
    /// The position every timed turn starts from.
    position: usize,
    /// The most replays a turn may take before a row reaches the context's end.
    most_replays: usize,
}

impl Timer<'_> {
    /// Captures a step of `bucket` rows with `tuning` as that bucket's choices (after one eager
    /// step, which initialises what a library call initialises on first use), instantiated.
    fn capture(&self, work: &mut Decoder, bucket: usize, tuning: Tuning) -> Result<Exec> {
        work.set_bucket_choice(bucket, tuning)?;
        self.write_rows(work, bucket, self.position)?;
        work.step(self.stream, bucket)?;
        self.stream.synchronize()?;
        let label = format!("search-bucket-{bucket} [{tuning}]");
        self.stream.begin_capture(CaptureMode::Global, &label)?;
        let issued = work.issue_step(self.stream, bucket);
        let ended = self.stream.end_capture();
        if let Err(e) = issued {
            return Err(work.take_cublas_failure().unwrap_or(LlamaError::Runtime(e)));
        }
        let mut exec = ended?.into_exec()?;
        exec.upload(self.stream)?;
        Ok(exec)
    }

    /// Rows `0..bucket` at `position` (token ids spread over the vocabulary).
    fn write_rows(&self, work: &mut Decoder, bucket: usize, position: usize) -> Result<()> {
        let vocab = work.config().vocab_size.max(1);
        let rows: Vec<(i32, i32)> = (0..bucket)
            .map(|r| (((r * 31 + 1) % vocab) as i32, position as i32))
            .collect();
        work.write_rows(self.stream, &rows)
    }

    /// One turn: `replays` replays of `exec` from the start position; ms per step.
    fn turn(
        &self,
        work: &mut Decoder,
        exec: &mut Exec,
        bucket: usize,
        replays: usize,
    ) -> Result<f64> {
        self.write_rows(work, bucket, self.position)?;
        self.stream.record(&self.start)?;
        for _ in 0..replays {
            exec.launch(self.stream)?;
        }
        self.stream.record(&self.end)?;
        self.end.synchronize()?;
        Ok(self.end.elapsed_ms_since(&self.start)? as f64 / replays.max(1) as f64)
    }

    /// The candidate against the incumbent, turn by turn (the first of each pair alternating).
    fn duel(
        &self,
        work: &mut Decoder,
        (incumbent, candidate): (&mut Exec, &mut Exec),
        bucket: usize,
        replays: usize,
    ) -> Result<Verdict> {
        self.turn(work, incumbent, bucket, replays)?;
        self.turn(work, candidate, bucket, replays)?;
        let (mut inc, mut cand) = (Vec::new(), Vec::new());
        for t in 0..TURNS {
            if t % 2 == 0 {
                inc.push(self.turn(work, incumbent, bucket, replays)?);
                cand.push(self.turn(work, candidate, bucket, replays)?);
            } else {
                cand.push(self.turn(work, candidate, bucket, replays)?);
                inc.push(self.turn(work, incumbent, bucket, replays)?);
            }
        }
        Ok(Verdict::judge(&inc, &cand))
    }
}

/// A progress bar on stderr while searching (hidden when stderr is not a terminal).
fn progress(len: u64) -> indicatif::ProgressBar {
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::with_draw_target(
        Some(len),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "searching launch choices [{bar:30}] {pos}/{len} buckets {elapsed} {msg}",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

/// Searches every bucket of the decoder ([`Decoder::buckets`]), largest first, within `budget`
/// (shared out by [`budget_share`]; time a bucket leaves unspent goes to the next), leaving each
/// bucket's winner in the decoder's choices and every row padding.
pub(super) fn search_all(
    ctx: &Context,
    stream: &Stream,
    work: &mut Decoder,
    budget: Duration,
) -> Result<Searched> {
    let started = Instant::now();
    let max_ctx = work.max_ctx();
    let position = (max_ctx / 2).min(START_POSITION);
    let timer = Timer {
        stream,
        start: ctx.event("search/start", true)?,
        end: ctx.event("search/end", true)?,
        position,
        most_replays: max_ctx.saturating_sub(position + 1).max(1),
    };
    let order: Vec<usize> = work.buckets().iter().rev().copied().collect();
    let facts: Vec<BucketFacts> = order.iter().map(|&b| work.bucket_facts(b)).collect();
    let shares: Vec<f64> = facts.iter().map(budget_share).collect();
    let total: f64 = shares.iter().sum();
    let bar = progress(order.len() as u64);
    fill_cache(&timer, work, order[0])?;
    let mut searched = Searched {
        buckets: Vec::new(),
        out_of_budget: false,
        notes: Vec::new(),
    };
    let mut spent_share = 0.0;
    for (f, share) in facts.iter().zip(&shares) {
        spent_share += share;
        let deadline = started + budget.mul_f64(spent_share / total.max(1e-9));
        let bucket = f.rows;
        bar.set_message(format!("(bucket {bucket})"));
        match search_bucket(&timer, work, f, deadline, &mut searched.notes) {
            Ok((result, late)) => {
                searched.out_of_budget |= late;
                searched.buckets.push(result);
            }
            Err(e) => {
                searched
                    .notes
                    .push(format!("bucket {bucket}: {e}; the rules' choices kept"));
                work.set_bucket_choice(bucket, Tuning::default())?;
                searched.buckets.push(BucketResult {
                    bucket,
                    tuning: Tuning::default().to_string(),
                    rules_ms: None,
                    chosen_ms: None,
                    candidates: 0,
                });
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    work.write_rows(stream, &[])?;
    stream.synchronize()?;
    searched.buckets.sort_by_key(|b| b.bucket);
    Ok(searched)
}

/// Fills every row's cache up to the start position with the rules' steps (a graph of the
/// largest bucket replayed from position 0), so that the timed steps attend over real values.
fn fill_cache(timer: &Timer<'_>, work: &mut Decoder, largest: usize) -> Result<()> {
    let mut exec = timer.capture(work, largest, Tuning::default())?;
    timer.write_rows(work, largest, 0)?;
    for _ in 0..timer.position {
        exec.launch(timer.stream)?;
    }
    timer.stream.synchronize()?;
    Ok(())
}

/// One bucket's coordinate descent ([`descend`]) with duels on the device, within `deadline`.
/// A changed incumbent must finally beat the rules in a duel of their own, else the rules stand.
fn search_bucket(
    timer: &Timer<'_>,
    work: &mut Decoder,
    f: &BucketFacts,
    deadline: Instant,
    notes: &mut Vec<String>,
) -> Result<(BucketResult, bool)> {
    let bucket = f.rows;
    let rules = Tuning::default();
    let mut inc_exec = timer.capture(work, bucket, rules)?;
    let estimate = timer.turn(work, &mut inc_exec, bucket, 2)?;
    let replays = ((TURN_MS / estimate.max(1e-3)).ceil() as usize)
        .clamp(2, 16)
        .min(timer.most_replays);
    let descent = descend(
        f,
        |_, candidate| -> Result<Option<Verdict>> {
            let mut exec = match timer.capture(work, bucket, *candidate) {
                Ok(exec) => exec,
                Err(e) => {
                    notes.push(format!("bucket {bucket} [{candidate}]: {e}; skipped"));
                    return Ok(None);
                }
            };
            let v = timer.duel(work, (&mut inc_exec, &mut exec), bucket, replays)?;
            if v.wins {
                inc_exec = exec;
            }
            Ok(Some(v))
        },
        || Instant::now() >= deadline,
    )?;
    let mut chosen = descent.tuning;
    let last = descent.last.unwrap_or(estimate);
    let (mut rules_ms, mut chosen_ms) = (last, last);
    if chosen != rules {
        let mut rules_exec = timer.capture(work, bucket, rules)?;
        let v = timer.duel(work, (&mut rules_exec, &mut inc_exec), bucket, replays)?;
        (rules_ms, chosen_ms) = (v.incumbent, v.candidate);
        if !v.wins {
            notes.push(format!(
                "bucket {bucket}: [{chosen}] did not beat the rules in the final duel ({:+.2}%); the rules' choices kept",
                -100.0 * v.gain
            ));
            chosen = rules;
            chosen_ms = rules_ms;
        }
    }
    work.set_bucket_choice(bucket, chosen)?;
    Ok((
        BucketResult {
            bucket,
            tuning: chosen.to_string(),
            rules_ms: Some(rules_ms),
            chosen_ms: Some(chosen_ms),
            candidates: descent.duels,
        },
        descent.late,
    ))
}
