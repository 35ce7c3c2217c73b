//! What the commands do: `check` against a reference, `generate`, and the tour's short decode
//! (the benches are in `bench/`), with the helpers they share. Each returns data
//! (serialisable); the binary prints it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use graphsmith::Context;
use serde::Serialize;

use crate::error::{LlamaError, Result};
use crate::load::checkpoint::{load_weights, random_weights, HostWeights};
use crate::load::config::Config;
use crate::load::reference::{load_reference, top2, RefSequence};
use crate::load::tolerance::Tolerance;
use crate::step::SwapReport;
use crate::step::{DecoderOptions, Gemm, Mode, Model, PrefillMode, PrefillRun, SearchReport};

/// Where weights come from: an HF directory, or a named config with random weights.
#[derive(Clone, Debug)]
pub enum Source {
    Dir(PathBuf),
    Random { config: String, seed: u64 },
}

impl Source {
    /// A display name: the directory or `random:<config>:<seed>`.
    pub fn name(&self) -> String {
        match self {
            Source::Dir(d) => d.display().to_string(),
            Source::Random { config, seed } => format!("random:{config}:{seed}"),
        }
    }
}

/// A progress bar on stderr (hidden when stderr is not a terminal or `show` is false).
pub fn bar(show: bool, len: u64, what: &str) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::with_draw_target(
        Some(len),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} {elapsed}")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(what.to_string());
    pb
}

/// Reads the config and host weights of `source`.
pub fn load_host(source: &Source, progress: bool) -> Result<(Config, HostWeights)> {
    match source {
        Source::Dir(dir) => {
            let (config, understood) = Config::read_file(&dir.join("config.json"))?;
            for w in &understood.warnings {
                eprintln!("warning: {}: {w}", dir.join("config.json").display());
            }
            let pb = bar(progress, 1, "reading");
            let w = load_weights(dir, &config, |done, total| {
                pb.set_length(total as u64);
                pb.set_position(done as u64);
            })?;
            pb.finish_and_clear();
            Ok((config, w))
        }
        Source::Random { config, seed } => {
            let config = Config::named(config)?;
            let w = random_weights(&config, *seed);
            Ok((config, w))
        }
    }
}

/// Uploads and prepares a model for `capacity` rows of `max_ctx` positions, with a progress bar.
pub fn build_model(
    ctx: &Context,
    config: Config,
    host: &HostWeights,
    (capacity, max_ctx): (usize, usize),
    mode: Mode,
    options: DecoderOptions,
    progress: bool,
) -> Result<Model> {
    let pb = bar(progress, 1, "uploading");
    let size = (capacity, max_ctx);
    let model = Model::new(ctx, config, host, size, mode, options, |done, total| {
        pb.set_length(total as u64);
        pb.set_position(done as u64);
    })?;
    pb.finish_and_clear();
    Ok(model)
}

/// Whether two configs have the same shape (the same tensors, so weights of one can be swapped
/// into a model of the other).
pub(crate) fn same_shape(a: &Config, b: &Config) -> bool {
    a.hidden_size == b.hidden_size
        && a.num_hidden_layers == b.num_hidden_layers
        && a.vocab_size == b.vocab_size
        && a.intermediate_size == b.intermediate_size
        && a.tie_word_embeddings == b.tie_word_embeddings
}

/// One sequence's result in a check.
#[derive(Clone, Debug, Serialize)]
pub struct SequenceCheck {
    pub sequence: usize,
    pub prompt_len: usize,
    pub max_abs_diff: f32,
    /// The largest ratio of a step's logit difference to that step's tolerance (pass: <= 1).
    pub worst_ratio: f32,
    /// Steps whose reference top-2 margin exceeds the tolerance.
    pub argmax_checked: usize,
    /// Of those, steps whose argmax differs from the reference's.
    pub argmax_mismatches: usize,
    /// The first step where our argmax differs from the reference token, with the reference's
    /// top-2 margin there.
    pub first_divergence: Option<Divergence>,
}

/// Where a sequence first parts from the reference.
#[derive(Clone, Debug, Serialize)]
pub struct Divergence {
    pub step: usize,
    pub ours: i32,
    pub reference: i32,
    pub reference_margin: f32,
}

/// The result of checking one reference.
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    pub reference: String,
    pub sequences: Vec<SequenceCheck>,
    pub max_abs_diff: f32,
    /// The largest ratio of a step's logit difference to that step's tolerance (pass: <= 1).
    pub worst_ratio: f32,
    pub pass: bool,
}

/// Decodes every sequence of `refs` together in one batch, teacher-forced on the reference
/// tokens, comparing logits at each generated step: the difference must stay within the step's
/// tolerance ([`Tolerance::at`]), and the argmax must agree wherever the reference's top-2 margin
/// exceeds it. The prompts are prefilled as `prefill` says: in chunks ([`Model::prefill`], every
/// sequence together), or one step per token.
pub fn check_against(
    model: &mut Model,
    refs: &[RefSequence],
    name: &str,
    tolerance: Tolerance,
    prefill: PrefillMode,
) -> Result<CheckReport> {
    let mut checks: Vec<SequenceCheck> = refs
        .iter()
        .enumerate()
        .map(|(s, r)| SequenceCheck {
            sequence: s,
            prompt_len: r.prompt_len,
            max_abs_diff: 0.0,
            worst_ratio: 0.0,
            argmax_checked: 0,
            argmax_mismatches: 0,
            first_divergence: None,
        })
        .collect();
    match prefill {
        PrefillMode::Steps => check_by_steps(model, refs, &mut checks, tolerance)?,
        PrefillMode::Chunks(chunk) => {
            check_after_prefill(model, refs, &mut checks, tolerance, chunk)?
        }
    }
    let max_abs_diff = checks.iter().map(|c| c.max_abs_diff).fold(0.0, f32::max);
    let worst_ratio = checks.iter().map(|c| c.worst_ratio).fold(0.0, f32::max);
    let pass = worst_ratio <= 1.0 && checks.iter().all(|c| c.argmax_mismatches == 0);
    Ok(CheckReport {
        reference: name.to_string(),
        sequences: checks,
        max_abs_diff,
        worst_ratio,
        pass,
    })
}

/// Steps `t = 0..` with every sequence's token `t` in its row (rows past a sequence's end are
/// padding); the logits of a step at or after the last prompt token are compared.
fn check_by_steps(
    model: &mut Model,
    refs: &[RefSequence],
    checks: &mut [SequenceCheck],
    tolerance: Tolerance,
) -> Result<()> {
    let vocab = model.config().vocab_size;
    let steps = refs
        .iter()
        .map(|r| r.prompt_len + r.new_tokens - 1)
        .max()
        .unwrap_or(0);
    for t in 0..steps {
        let rows: Vec<(i32, i32)> = refs
            .iter()
            .map(|r| {
                if t < r.prompt_len + r.new_tokens - 1 {
                    (r.tokens[t], t as i32)
                } else {
                    (0, -1)
                }
            })
            .collect();
        model.step(&rows)?;
        if !refs
            .iter()
            .any(|r| t + 1 >= r.prompt_len && t < r.prompt_len + r.new_tokens - 1)
        {
            continue;
        }
        let logits = model.logits(refs.len())?;
        for (s, r) in refs.iter().enumerate() {
            if t + 1 < r.prompt_len || t >= r.prompt_len + r.new_tokens - 1 {
                continue;
            }
            let ours = &logits[s * vocab..(s + 1) * vocab];
            compare_step(&mut checks[s], r, t + 1 - r.prompt_len, ours, tolerance);
        }
    }
    Ok(())
}

/// Every prompt prefilled in chunks of `chunk` rows (generated step 0 is the prefill's
/// logits), then steps `i = 1..` with sequence `s` at position `prompt_len + i - 1`.
fn check_after_prefill(
    model: &mut Model,
    refs: &[RefSequence],
    checks: &mut [SequenceCheck],
    tolerance: Tolerance,
    chunk: usize,
) -> Result<()> {
    let vocab = model.config().vocab_size;
    let prompts: Vec<&[i32]> = refs.iter().map(|r| &r.tokens[..r.prompt_len]).collect();
    model.prefill(&prompts, chunk)?;
    let steps = refs.iter().map(|r| r.new_tokens).max().unwrap_or(0);
    for i in 0..steps {
        if i > 0 {
            let rows: Vec<(i32, i32)> = refs
                .iter()
                .map(|r| {
                    let t = r.prompt_len + i - 1;
                    if i < r.new_tokens {
                        (r.tokens[t], t as i32)
                    } else {
                        (0, -1)
                    }
                })
                .collect();
            model.step(&rows)?;
        }
        let logits = model.logits(refs.len())?;
        for (s, r) in refs.iter().enumerate() {
            if i < r.new_tokens {
                let ours = &logits[s * vocab..(s + 1) * vocab];
                compare_step(&mut checks[s], r, i, ours, tolerance);
            }
        }
    }
    Ok(())
}

/// Folds generated step `i` of sequence `r` (our logits `ours`) into its check.
fn compare_step(
    c: &mut SequenceCheck,
    r: &RefSequence,
    i: usize,
    ours: &[f32],
    tolerance: Tolerance,
) {
    let vocab = ours.len();
    let theirs = &r.logits[i * vocab..(i + 1) * vocab];
    let diff = ours
        .iter()
        .zip(theirs)
        .map(|(a, b)| (a - b).abs())
        .fold(
            0.0f32,
            |m, d| if d.is_nan() { f32::INFINITY } else { m.max(d) },
        );
    c.max_abs_diff = c.max_abs_diff.max(diff);
    let tol = tolerance.at(theirs);
    let ratio = if diff == 0.0 { 0.0 } else { diff / tol };
    c.worst_ratio = c.worst_ratio.max(ratio);
    let (our_top, _) = top2(ours);
    let (ref_top, margin) = top2(theirs);
    if margin > tol {
        c.argmax_checked += 1;
        if our_top != ref_top {
            c.argmax_mismatches += 1;
        }
    }
    let reference = r.tokens[r.prompt_len + i];
    if c.first_divergence.is_none() && our_top as i32 != reference {
        c.first_divergence = Some(Divergence {
            step: i,
            ours: our_top as i32,
            reference,
            reference_margin: margin,
        });
    }
}

/// Everything `check` reports.
#[derive(Clone, Debug, Serialize)]
pub struct CheckOutcome {
    pub model: String,
    pub mode: Mode,
    /// The projections' kernels asked for (`auto`: GEMV at one row, cuBLAS above).
    pub gemm: Gemm,
    /// Whether the decoder's kernels used programmatic dependent launch.
    pub pdl: bool,
    /// The tolerance ([`Tolerance`]): the rule or the absolute value.
    pub tolerance: Tolerance,
    /// The tolerance in words.
    pub tolerance_rule: String,
    pub checks: Vec<CheckReport>,
    /// Hazards found in the captured graphs, per bucket (graphs mode): all zero when clean.
    pub hazards: Vec<(usize, usize)>,
    /// How the prompts were prefilled.
    pub prefill: PrefillMode,
    /// Hazards found in the captured prefill graphs, per chunk bucket (graphs mode).
    pub prefill_hazards: Vec<(usize, usize)>,
    pub swap: Option<SwapReport>,
    /// Re-capturing every held bucket instead of switching in place, ms.
    pub recapture_ms: Option<f64>,
    /// What the search of the launch choices did at load (graphs mode with the search).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<SearchReport>,
    pub pass: bool,
}

/// The `check` command. `ctx` is called once every input has been read and checked (so bad
/// input is reported before any device work).
#[allow(clippy::too_many_arguments)]
pub fn check(
    ctx: impl FnOnce() -> Result<Context>,
    model_dir: &Path,
    reference: &Path,
    mode: Mode,
    swap: Option<(&Path, &Path)>,
    tolerance: Tolerance,
    options: DecoderOptions,
    prefill: PrefillMode,
    progress: bool,
) -> Result<CheckOutcome> {
    let source = Source::Dir(model_dir.to_path_buf());
    let (config, host) = load_host(&source, progress)?;
    let refs = load_reference(reference, config.vocab_size)?;
    let swap_data = match swap {
        Some((dir, r)) => {
            let (c2, h2) = load_host(&Source::Dir(dir.to_path_buf()), progress)?;
            if !same_shape(&c2, &config) {
                return Err(LlamaError::Input(format!(
                    "--swap-model {} has another shape than --model {}",
                    dir.display(),
                    model_dir.display()
                )));
            }
            Some((
                h2,
                load_reference(r, config.vocab_size)?,
                r.display().to_string(),
            ))
        }
        None => None,
    };
    let all_refs = refs.iter().chain(swap_data.iter().flat_map(|s| s.1.iter()));
    let max_ctx = all_refs.clone().map(|r| r.tokens.len()).max().unwrap_or(1);
    let rows = refs.len().max(swap_data.as_ref().map_or(0, |s| s.1.len()));
    let ctx = &ctx()?;
    let size = (rows, max_ctx);
    let mut model = build_model(ctx, config, &host, size, mode, options, progress)?;
    let uses_pdl = model.uses_pdl();
    let mut checks = vec![check_against(
        &mut model,
        &refs,
        &reference.display().to_string(),
        tolerance,
        prefill,
    )?];
    let mut hazards: Vec<(usize, usize)> = model
        .hazard_reports()?
        .iter()
        .map(|(b, r)| (*b, r.hazards.len()))
        .collect();
    let (mut swap_report, mut recapture_ms) = (None, None);
    if let Some((h2, refs2, name2)) = swap_data {
        // Every bucket is held before the switch, so that switching in place and re-capturing
        // every bucket (timed after the second check) compare the same work.
        model.capture_all()?;
        swap_report = Some(model.swap_weights(&h2)?);
        checks.push(check_against(
            &mut model, &refs2, &name2, tolerance, prefill,
        )?);
        hazards.extend(
            model
                .hazard_reports()?
                .iter()
                .map(|(b, r)| (*b, r.hazards.len())),
        );
        if mode == Mode::Graphs {
            recapture_ms = Some(model.recapture_all()?);
        }
    }
    let prefill_hazards: Vec<(usize, usize)> = model
        .prefill_hazard_reports()?
        .iter()
        .map(|(b, r)| (*b, r.hazards.len()))
        .collect();
    let pass = checks.iter().all(|c| c.pass)
        && hazards.iter().all(|h| h.1 == 0)
        && prefill_hazards.iter().all(|h| h.1 == 0);
    Ok(CheckOutcome {
        model: model_dir.display().to_string(),
        mode,
        gemm: options.gemm,
        pdl: uses_pdl,
        tolerance,
        tolerance_rule: tolerance.describe(),
        checks,
        hazards,
        prefill,
        prefill_hazards,
        swap: swap_report,
        recapture_ms,
        search: model.search_report().cloned(),
        pass,
    })
}

/// The prompt the bench decodes from (ids below 512, valid for every config).
pub fn bench_prompt(len: usize, vocab: usize) -> Vec<i32> {
    (0..len)
        .map(|i| ((i * 37 + 11) % vocab.min(512)) as i32)
        .collect()
}

/// What `generate` produced.
#[derive(Clone, Debug, Serialize)]
pub struct Generation {
    pub prompt_tokens: Vec<i32>,
    pub tokens: Vec<i32>,
    pub text: Option<String>,
    /// Time to first token on the host (ms): from the prefill's start until the first new
    /// token is read back (the same as `ttft.wall_ms`).
    pub prefill_ms: f64,
    pub decode_tokens_per_s: f64,
    pub mode: Mode,
    /// How the prompt was prefilled.
    pub prefill: PrefillMode,
    /// Time to first token.
    pub ttft: Ttft,
}

/// Time to first token: the prefill and its lm_head, until the first new token is known.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Ttft {
    /// Between CUDA events recorded on the model's stream before the prefill and after its
    /// last launch (ms). The host's gaps between chunks (each chunk's inputs are uploaded
    /// before its launch) are inside it.
    pub device_ms: f64,
    /// On the host, from the prefill's start until the first token is read back (ms).
    pub wall_ms: f64,
    /// Graphs captured before the timed prefill (graphs mode) and the time their capture
    /// took (ms), not counted in either figure.
    pub graphs_captured: usize,
    pub capture_ms: f64,
}

/// Prefills `prompts` as `prefill` says and reads each sequence's first new token, timed
/// ([`Ttft`]). Chunk graphs are captured first (graphs mode), outside the timing. A step-by-step
/// prefill steps every sequence together (a sequence whose prompt has ended is padding).
pub fn timed_prefill(
    model: &mut Model,
    prompts: &[&[i32]],
    prefill: PrefillMode,
) -> Result<(Vec<i32>, Ttft, Option<PrefillRun>)> {
    let mut ttft = Ttft::default();
    if let PrefillMode::Chunks(chunk) = prefill {
        let lens: Vec<usize> = prompts.iter().map(|p| p.len()).collect();
        let buckets: Vec<usize> = crate::step::plan_prefill(&lens, chunk)?
            .iter()
            .map(|c| c.bucket)
            .collect();
        (ttft.graphs_captured, ttft.capture_ms) = model.prepare_prefill(&buckets)?;
    }
    model.stream().synchronize()?;
    let ctx = model.context().clone();
    let (start, end) = (ctx.event("ttft/start", true)?, ctx.event("ttft/end", true)?);
    let t = Instant::now();
    model.stream().record(&start)?;
    let run = match prefill {
        PrefillMode::Chunks(chunk) => Some(model.prefill(prompts, chunk)?),
        PrefillMode::Steps => {
            let longest = prompts.iter().map(|p| p.len()).max().unwrap_or(0);
            for i in 0..longest {
                let rows: Vec<(i32, i32)> = prompts
                    .iter()
                    .map(|p| {
                        // A sequence whose prompt ended stays at its last token: stepping it
                        // again there writes the same K and V and leaves its next token.
                        let j = i.min(p.len().saturating_sub(1));
                        (p.get(j).copied().unwrap_or(0), j as i32)
                    })
                    .collect();
                model.step(&rows)?;
            }
            None
        }
    };
    model.stream().record(&end)?;
    let first = model.next_tokens(prompts.len())?;
    ttft.wall_ms = t.elapsed().as_secs_f64() * 1e3;
    end.synchronize()?;
    ttft.device_ms = end.elapsed_ms_since(&start)? as f64;
    Ok((first, ttft, run))
}

/// Checks a generation request before anything goes to the device: a non-empty prompt and
/// batch, and prompt plus new tokens within `context` positions. Returns the context to
/// allocate.
pub fn check_request(
    config: &Config,
    prompt_len: usize,
    new_tokens: usize,
    batch: usize,
) -> Result<usize> {
    if batch == 0 {
        return Err(LlamaError::Input("a batch of zero sequences".into()));
    }
    if prompt_len == 0 {
        return Err(LlamaError::Input("an empty prompt".into()));
    }
    let need = prompt_len + new_tokens;
    if need > config.max_position_embeddings {
        return Err(LlamaError::Input(format!(
            "a prompt of {prompt_len} tokens plus {new_tokens} new tokens is longer than the context of {} (max_position_embeddings)",
            config.max_position_embeddings
        )));
    }
    Ok(need + 1)
}

/// Greedy decoding of one prompt: prefill (in chunks of the default size), then
/// `new_tokens`.
pub fn generate(model: &mut Model, prompt: &[i32], new_tokens: usize) -> Result<Generation> {
    generate_with(model, prompt, new_tokens, PrefillMode::default())
}

/// [`generate`] with the prompt prefilled as `prefill` says; the time to first token is
/// measured ([`timed_prefill`]).
pub fn generate_with(
    model: &mut Model,
    prompt: &[i32],
    new_tokens: usize,
    prefill: PrefillMode,
) -> Result<Generation> {
    if prompt.is_empty() {
        return Err(LlamaError::Input("an empty prompt".into()));
    }
    let max_ctx = model.decoder().max_ctx();
    if prompt.len() + new_tokens > max_ctx {
        return Err(LlamaError::Input(format!(
            "a prompt of {} tokens plus {new_tokens} new tokens is longer than the context of {max_ctx}",
            prompt.len()
        )));
    }
    let (first, ttft, _) = timed_prefill(model, &[prompt], prefill)?;
    let mut next = first.first().copied().unwrap_or(0);
    let mut tokens = vec![next];
    let t = Instant::now();
    for i in 1..new_tokens {
        model.step(&[(next, (prompt.len() + i - 1) as i32)])?;
        next = model.next_tokens(1)?[0];
        tokens.push(next);
    }
    let secs = t.elapsed().as_secs_f64().max(1e-9);
    tokens.truncate(new_tokens);
    Ok(Generation {
        prompt_tokens: prompt.to_vec(),
        tokens,
        text: None,
        prefill_ms: ttft.wall_ms,
        decode_tokens_per_s: new_tokens.saturating_sub(1) as f64 / secs,
        mode: model.mode(),
        prefill,
        ttft,
    })
}

/// The tour's decode: eager against graphs on one config with random weights.
#[derive(Clone, Debug, Serialize)]
pub struct TourDecode {
    pub config: String,
    pub prompt_len: usize,
    pub new_tokens: usize,
    pub eager_tokens_per_s: f64,
    pub graphs_tokens_per_s: f64,
    /// Both modes produced the same tokens.
    pub equal: bool,
    pub tokens: Vec<i32>,
    /// Hazards found in the captured graphs (0 when clean).
    pub hazards: usize,
}

/// A short decode of the `small` config (random weights, seed 0), eager against graphs, with
/// tokens/s of each and whether they agree (the tour's centrepiece).
pub fn tour_decode(ctx: &Context) -> Result<TourDecode> {
    tour_decode_with(ctx, "small", 16, 64)
}

/// [`tour_decode`] for any named config and lengths.
pub fn tour_decode_with(
    ctx: &Context,
    config: &str,
    prompt_len: usize,
    new_tokens: usize,
) -> Result<TourDecode> {
    let (config, host) = load_host(
        &Source::Random {
            config: config.into(),
            seed: 0,
        },
        false,
    )?;
    let prompt = bench_prompt(prompt_len, config.vocab_size);
    let max_ctx = prompt_len + new_tokens + 1;
    let (size, opts) = ((1, max_ctx), DecoderOptions::default());
    let build = |mode| build_model(ctx, config.clone(), &host, size, mode, opts, false);
    let mut eager = build(Mode::Eager)?;
    let e = generate(&mut eager, &prompt, new_tokens)?;
    drop(eager);
    let mut graphs = build(Mode::Graphs)?;
    let g = generate(&mut graphs, &prompt, new_tokens)?;
    let hazards = graphs
        .hazard_reports()?
        .iter()
        .map(|(_, r)| r.hazards.len())
        .sum();
    Ok(TourDecode {
        config: config.name.clone(),
        prompt_len,
        new_tokens,
        eager_tokens_per_s: e.decode_tokens_per_s,
        graphs_tokens_per_s: g.decode_tokens_per_s,
        equal: e.tokens == g.tokens,
        tokens: g.tokens,
        hazards,
    })
}
