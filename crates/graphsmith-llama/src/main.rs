//! `graphsmith-llama`: check a Llama-architecture model against a transformers reference,
//! benchmark it eager against graphs, or generate text.
//!
//! Exit codes: 0 when everything holds, 1 when a check fails (or the runtime fails), 2 on bad
//! input (missing or malformed files, impossible requests).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use graphsmith::Context;
use graphsmith_llama::{bench, bench_loop, build_model, check, generate_with, load_host};
use graphsmith_llama::{bench_swap, SwapBench};
use graphsmith_llama::{Codec, DecoderOptions, Gemm, LlamaError, LoopBench, Mode, Pdl, Source};
use graphsmith_llama::{PrefillMode, Search, Tolerance, TtftBench, Tuning};

#[derive(Parser)]
#[command(
    name = "graphsmith-llama",
    version,
    about = "A Llama-architecture decoder on graphsmith's CUDA graphs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct ModelArgs {
    /// A model directory in the HF layout (config.json, model.safetensors or shards).
    #[arg(long, conflicts_with = "config")]
    model: Option<PathBuf>,
    /// A built-in config with random weights instead: tiny, small or 1b.
    #[arg(long)]
    config: Option<String>,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

impl ModelArgs {
    fn source(&self) -> Result<Source, LlamaError> {
        match (&self.model, &self.config) {
            (Some(dir), _) => Ok(Source::Dir(dir.clone())),
            (None, Some(c)) => Ok(Source::Random {
                config: c.clone(),
                seed: self.seed,
            }),
            (None, None) => Err(LlamaError::Input(
                "give --model DIR or --config tiny|small|1b".into(),
            )),
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Decode every sequence of a reference file together, teacher-forced, and compare logits.
    Check {
        #[arg(long)]
        model: PathBuf,
        #[arg(long)]
        reference: PathBuf,
        #[arg(long, default_value = "graphs")]
        mode: Mode,
        /// After checking, switch to this model's weights in place and check again.
        #[arg(long, requires = "swap_reference")]
        swap_model: Option<PathBuf>,
        #[arg(long, requires = "swap_model")]
        swap_reference: Option<PathBuf>,
        /// One absolute tolerance for every step (the largest logit difference allowed, and
        /// the top-2 margin above which argmax must agree). Default: per step, 16 bf16 ulps of
        /// the step's largest |reference logit| (see the crate's README).
        #[arg(long)]
        tolerance: Option<f32>,
        /// The projections' kernels: auto (own GEMV at one row, cuBLAS above; cuBLASLt above once
        /// the search has measured its algorithms), cublas, cublaslt, gemv.
        #[arg(long, default_value = "auto")]
        gemm: Gemm,
        /// Programmatic dependent launch between the decoder's kernels: auto (on where the
        /// device has it, compute capability 9.0+), on, off.
        #[arg(long, default_value = "auto")]
        pdl: Pdl,
        /// How the prompts are prefilled: rows per chunk (1 to 2048; every sequence's prompt
        /// together, one forward per chunk), or `steps` (one decode step per token).
        #[arg(long, default_value = "512")]
        prefill: PrefillMode,
        /// Graphs mode: the rules' launch choices alone, without measuring each bucket's at load
        /// (or reading them from the cache).
        #[arg(long)]
        no_search: bool,
        #[arg(long)]
        json: bool,
    },
    /// Decode tokens/s, eager and graphs, per batch size (prefill excluded), then the time to
    /// first token per prompt length.
    Bench {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
        batch: Vec<usize>,
        #[arg(long, default_value_t = 128)]
        steps: usize,
        #[arg(long, default_value_t = 16)]
        warmup: usize,
        /// Timed runs per point (the median is reported).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        #[arg(long, value_delimiter = ',', default_value = "eager,graphs")]
        mode: Vec<Mode>,
        /// The projections' kernels: auto (own GEMV at one row, cuBLAS above; cuBLASLt above once
        /// the search has measured its algorithms), cublas, cublaslt, gemv.
        #[arg(long, default_value = "auto")]
        gemm: Gemm,
        /// Programmatic dependent launch, one or more of auto, on, off (each is measured; a
        /// line measured with off is named e.g. graphsmith-graphs-nopdl).
        #[arg(long, value_delimiter = ',', default_value = "auto")]
        pdl: Vec<Pdl>,
        /// Hand-set launch choices, one or more separated by ';', each `default` or
        /// comma-separated KEY=N: warps per output column of a one-row projection (qkv, o,
        /// gate_up, down, head: 1, 2, 4 or 8), a cap on the attention's splits (splits) or on the
        /// projections' resident blocks per multiprocessor (blocks: 1 to 4), the attention as
        /// clusters (cluster: 0 or 1), MiB it prefetches into L2 (pf), the one-row projections on
        /// the ring GEMV (cpa: a bit each) and its blocks per multiprocessor (cpab: 1 or 2). Each
        /// is measured; they change where the work runs (and so the order of some sums, not the math).
        /// `gemv` (0 or 1) picks cuBLAS or the GEMV kernels for batches of up to 8 rows. Given,
        /// it replaces the search of the launch choices (`default` is then the rules').
        #[arg(long, value_delimiter = ';')]
        tune: Option<Vec<Tuning>>,
        /// Prompt lengths whose time to first token is measured (a length beyond the model's
        /// context is left out, with a warning).
        #[arg(long, value_delimiter = ',', default_value = "512,2048")]
        ttft: Vec<usize>,
        /// Sequences prefilled together for the time to first token.
        #[arg(long, value_delimiter = ',', default_value = "1")]
        ttft_batch: Vec<usize>,
        /// How the time-to-first-token prompts are prefilled: rows per chunk, or `steps`.
        #[arg(long, default_value = "512")]
        prefill: PrefillMode,
        /// Leave the time to first token out.
        #[arg(long)]
        no_ttft: bool,
        /// Graphs mode: the rules' launch choices alone, without measuring each bucket's at load
        /// (or reading them from the cache).
        #[arg(long)]
        no_search: bool,
        /// Turn profile collection on (`cuProfilerStart`) only around the last timed run's
        /// steps of each batch and off (`cuProfilerStop`) after them: a profiler started with
        /// profiling off at the start (Nsight Compute: `ncu --profile-from-start off`) then sees
        /// only those decode steps; outside a profiler the calls do nothing. The lines say
        /// `"profiled": true`.
        #[arg(long)]
        profile: bool,
        #[arg(long)]
        json: bool,
    },
    /// The device-side decode loop (one launch runs K steps) against K host launches of the
    /// step graph, turn by turn, with and without programmatic dependent launch.
    BenchLoop {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long, value_delimiter = ',', default_value = "1")]
        batch: Vec<usize>,
        /// Steps per launch of the loop (one point each).
        #[arg(long, value_delimiter = ',', default_value = "16,64,256")]
        k: Vec<usize>,
        #[arg(long, default_value_t = 3)]
        warmup: usize,
        /// Timed runs per point (the median is reported).
        #[arg(long, default_value_t = 9)]
        runs: usize,
        #[arg(long, value_delimiter = ',', default_value = "auto,off")]
        pdl: Vec<Pdl>,
        #[arg(long)]
        json: bool,
    },
    /// The weight swap on one shape: every bucket switched to new weights in place (preparation,
    /// the driver's per-node updates and graphsmith's own work timed apart), its verification,
    /// and re-capturing every bucket instead. Exit 1 when a swap was not made in place.
    SwapBench {
        #[command(flatten)]
        model: ModelArgs,
        /// The weights swapped in: a model directory of the same shape. Default: random weights
        /// of --config with --seed + 1, or --model's own weights loaded again (new buffers, same
        /// values: the verification cannot then tell a pointer left behind).
        #[arg(long)]
        swap_model: Option<PathBuf>,
        /// Swaps, back and forth between the two weight sets, then as many re-captures.
        #[arg(long, default_value_t = 9)]
        rounds: usize,
        /// The projections' kernels: auto (own GEMV at one row, cuBLAS above), cublas, gemv.
        #[arg(long, default_value = "auto")]
        gemm: Gemm,
        #[arg(long)]
        json: bool,
    },
    /// What the loader understands of a model directory (no GPU needed): every value used for
    /// decoding and where it came from, tensors, conversions, weight bytes, warnings.
    Inspect {
        /// A model directory in the HF layout (config.json, model.safetensors or shards).
        #[arg(long)]
        model: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Greedy generation from a prompt (text with tokenizer.json, else token ids).
    Generate {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long)]
        prompt: String,
        #[arg(long, default_value_t = 32)]
        new_tokens: usize,
        #[arg(long, default_value = "graphs")]
        mode: Mode,
        /// How the prompt is prefilled: rows per chunk (1 to 2048), or `steps` (one decode step
        /// per token).
        #[arg(long, default_value = "512")]
        prefill: PrefillMode,
        /// Graphs mode: the rules' launch choices alone, without measuring each bucket's at load
        /// (or reading them from the cache).
        #[arg(long)]
        no_search: bool,
        #[arg(long)]
        json: bool,
    },
}

/// The search of the launch choices unless `--no-search` (graphs mode only searches).
fn search(no_search: bool) -> Search {
    if no_search {
        Search::Off
    } else {
        Search::On
    }
}

/// One line on stderr about the search a model's load did.
fn say_search(report: Option<&graphsmith_llama::SearchReport>) {
    if let Some(r) = report {
        let how = if r.from_cache {
            "from the cache".to_string()
        } else {
            format!("searched in {:.1} s", r.search_ms / 1e3)
        };
        let each: Vec<String> = r
            .buckets
            .iter()
            .map(|b| format!("{}: {}", b.bucket, b.tuning))
            .collect();
        eprintln!("launch choices ({how}): {}", each.join("; "));
    }
}

fn print_error(e: &LlamaError) {
    eprintln!("error: {e}");
    let shown = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !shown.contains(&text) {
            eprintln!("Caused by: {text}");
        }
        source = s.source();
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match real_main(cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            print_error(&e);
            ExitCode::from(if e.is_bad_input() { 2 } else { 1 })
        }
    }
}

fn context() -> Result<Context, LlamaError> {
    Ok(Context::new(0)?)
}

fn real_main(cli: Cli) -> Result<bool, LlamaError> {
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    match cli.command {
        Command::Check {
            model,
            reference,
            mode,
            swap_model,
            swap_reference,
            tolerance,
            gemm,
            pdl,
            prefill,
            no_search,
            json,
        } => {
            let swap = swap_model.as_deref().zip(swap_reference.as_deref());
            let tolerance = match tolerance {
                Some(t) if t.is_finite() && t >= 0.0 => Tolerance::Absolute(t),
                Some(t) => {
                    return Err(LlamaError::Input(format!(
                        "--tolerance {t}: want a finite number >= 0"
                    )))
                }
                None => Tolerance::default(),
            };
            let out = check(
                context,
                &model,
                &reference,
                mode,
                swap,
                tolerance,
                DecoderOptions {
                    gemm,
                    pdl,
                    search: search(no_search),
                    ..DecoderOptions::default()
                },
                prefill,
                tty,
            )?;
            if json {
                println!("{}", serde_json::to_string(&out).unwrap_or_default());
            } else {
                say_search(out.search.as_ref());
                for c in &out.checks {
                    println!(
                        "{}: max |logit diff| {:.4}, worst diff/tolerance {:.3} (tolerance: {}) -> {}",
                        c.reference,
                        c.max_abs_diff,
                        c.worst_ratio,
                        out.tolerance_rule,
                        if c.pass { "ok" } else { "FAILED" }
                    );
                    for s in &c.sequences {
                        let part = s
                            .first_divergence
                            .as_ref()
                            .map_or("never".to_string(), |d| {
                                format!(
                                    "step {} (reference margin {:.4})",
                                    d.step, d.reference_margin
                                )
                            });
                        println!("  sequence {}: prompt {}, max diff {:.4}, argmax {}/{} agree above the margin, greedy parts at {part}", s.sequence, s.prompt_len, s.max_abs_diff, s.argmax_checked - s.argmax_mismatches, s.argmax_checked);
                    }
                }
                for (bucket, n) in &out.hazards {
                    println!("bucket {bucket}: {n} hazards");
                }
                for (bucket, n) in &out.prefill_hazards {
                    println!("prefill bucket {bucket}: {n} hazards");
                }
                if let Some(s) = &out.swap {
                    println!("weight swap ({}): {:.3} ms to switch {} executables ({} nodes; driver {:.3} ms, host {:.3} ms) after {:.3} ms preparing; verified in {:.1} ms; upload {:.1} ms; freed {} bytes", s.method, s.switch_ms, s.executables, s.nodes_updated, s.driver_ms, s.host_ms, s.index_ms, s.verify_ms, s.upload_ms, s.freed_bytes);
                }
                if let Some(ms) = out.recapture_ms {
                    println!("re-capturing every bucket instead: {ms:.3} ms");
                }
                println!("{}", if out.pass { "PASS" } else { "FAIL" });
            }
            Ok(out.pass)
        }
        Command::Bench {
            model,
            batch,
            steps,
            warmup,
            runs,
            mode,
            gemm,
            pdl,
            tune,
            ttft,
            ttft_batch,
            prefill,
            no_ttft,
            no_search,
            profile,
            json,
        } => {
            let source = model.source()?;
            let ttft = TtftBench {
                prompt_lens: ttft,
                batches: ttft_batch,
                prefill,
            };
            if steps == 0 || runs == 0 {
                return Err(LlamaError::Input(
                    "--steps and --runs must be at least 1".into(),
                ));
            }
            bench(
                context,
                &source,
                &batch,
                &mode,
                (gemm, search(no_search || tune.is_some())),
                &pdl,
                &tune.unwrap_or_default(),
                steps,
                warmup,
                runs,
                profile,
                tty,
                (!no_ttft).then_some(&ttft),
                |line| {
                    if json {
                        println!("{}", serde_json::to_string(line).unwrap_or_default());
                    } else {
                        println!("{:<18} batch {:>3}: {:>9.1} steps/s {:>10.1} tokens/s {:>8.3} ms/step (floor {:.3} ms, peak {} MiB, {})", line.implementation, line.batch, line.steps_per_s, line.tokens_per_s, line.ms_per_step, line.floor_ms, line.peak_mem_bytes >> 20, line.path);
                        if let Some(choice) = &line.choice {
                            if Some(&line.batch) == batch.first() {
                                say_search(line.search.as_ref());
                            }
                            println!(
                                "{:<18} batch {:>3}: launch choices {choice}",
                                "", line.batch
                            );
                        }
                    }
                },
                |line| {
                    if json {
                        println!("{}", serde_json::to_string(line).unwrap_or_default());
                    } else {
                        println!("{:<18} batch {:>3}: time to first token, prompt {:>5}: {:>9.3} ms device, {:>9.3} ms wall ({}, {} chunks, peak {} MiB)", line.implementation, line.batch, line.prompt_len, line.ttft_device_ms, line.ttft_wall_ms, line.prefill, line.buckets.len(), line.peak_mem_bytes >> 20);
                    }
                },
            )?;
            Ok(true)
        }
        Command::SwapBench {
            model,
            swap_model,
            rounds,
            gemm,
            json,
        } => {
            let source = model.source()?;
            let swap_source = match (swap_model, &source) {
                (Some(dir), _) => Source::Dir(dir),
                (None, Source::Random { config, seed }) => Source::Random {
                    config: config.clone(),
                    seed: seed.wrapping_add(1),
                },
                (None, Source::Dir(dir)) => Source::Dir(dir.clone()),
            };
            let what = SwapBench {
                source: &source,
                swap_source: &swap_source,
                rounds,
                options: DecoderOptions {
                    gemm,
                    ..DecoderOptions::default()
                },
                progress: tty,
            };
            let r = bench_swap(context, &what)?;
            if json {
                println!("{}", serde_json::to_string(&r).unwrap_or_default());
            } else {
                println!(
                    "{} ({} layers, hidden {}): {} executables, {} nodes per swap",
                    r.model, r.layers, r.hidden, r.executables, r.nodes_updated
                );
                println!(
                    "first swap: preparing {:.3} ms (read back and index, once per executable)",
                    r.index_ms_first
                );
                println!(
                    "switch {:.3} ms (driver {:.3} ms, {:.3} us/node; host {:.3} ms): {:.2}x the driver, {:.3} us/node",
                    r.switch_ms, r.driver_ms, r.driver_us_per_node, r.host_ms, r.switch_over_driver, r.switch_us_per_node
                );
                println!(
                    "verification {:.3} ms; re-capture {:.3} ms ({:.1}x the switch)",
                    r.verify_ms, r.recapture_ms, r.recapture_over_switch
                );
                for s in r.swaps.iter().filter(|s| s.method != "relocate") {
                    println!("not in place: {}", s.method);
                }
            }
            Ok(r.all_relocated)
        }
        Command::BenchLoop {
            model,
            batch,
            k,
            warmup,
            runs,
            pdl,
            json,
        } => {
            let source = model.source()?;
            let what = LoopBench {
                source: &source,
                batches: &batch,
                ks: &k,
                pdls: &pdl,
                warmup,
                runs,
                progress: tty,
            };
            let mut all_same = true;
            bench_loop(context, &what, |line| {
                all_same &= line.same_tokens && line.plain_same_tokens != Some(false);
                if json {
                    println!("{}", serde_json::to_string(line).unwrap_or_default());
                } else {
                    let plain = match (line.plain_ms_per_step, line.over_plain) {
                        (Some(ms), Some(x)) => {
                            format!("; plain step graph {ms:.4} ms/step, loop {x:.3}x")
                        }
                        _ => String::new(),
                    };
                    println!(
                        "{:<22} batch {:>2} K {:>3}: loop {:.4} ms/step, {} host launches {:.4} ms/step, {:.3}x{plain}{}",
                        line.implementation,
                        line.batch,
                        line.k,
                        line.loop_ms_per_step,
                        line.k,
                        line.host_ms_per_step,
                        line.speedup,
                        match (line.same_tokens, line.plain_same_tokens) {
                            (true, Some(false)) => " (PLAIN STEP GRAPH'S TOKENS DIFFER)",
                            (true, _) => "",
                            (false, _) => " (TOKENS DIFFER)",
                        }
                    );
                }
            })?;
            Ok(all_same)
        }
        Command::Inspect { model, json } => {
            let seen = graphsmith_llama::inspect(&model)?;
            if json {
                println!("{}", serde_json::to_string(&seen).unwrap_or_default());
            } else {
                print_inspection(&seen);
            }
            Ok(true)
        }
        Command::Generate {
            model,
            prompt,
            new_tokens,
            mode,
            prefill,
            no_search,
            json,
        } => {
            let source = model.source()?;
            let codec = match &source {
                Source::Dir(d) => Codec::for_model(d)?,
                Source::Random { .. } => Codec::ids_only(),
            };
            let ids: Vec<i32> = codec
                .encode(&prompt)?
                .into_iter()
                .map(|i| i as i32)
                .collect();
            let (config, host) = load_host(&source, tty)?;
            if ids.len() + new_tokens > config.max_position_embeddings {
                return Err(LlamaError::Input(format!(
                    "a prompt of {} tokens plus {new_tokens} new tokens is longer than the context of {} (max_position_embeddings)",
                    ids.len(), config.max_position_embeddings
                )));
            }
            let ctx = context()?;
            let mut m = build_model(
                &ctx,
                config,
                &host,
                (1, ids.len() + new_tokens + 1),
                mode,
                DecoderOptions {
                    search: search(no_search),
                    ..DecoderOptions::default()
                },
                tty,
            )?;
            say_search(m.search_report());
            let mut out = generate_with(&mut m, &ids, new_tokens, prefill)?;
            if codec.has_tokenizer() {
                let ids: Vec<u32> = out.tokens.iter().map(|&t| t as u32).collect();
                out.text = Some(codec.decode(&ids)?);
            }
            if json {
                println!("{}", serde_json::to_string(&out).unwrap_or_default());
            } else {
                match &out.text {
                    Some(t) => println!("{t}"),
                    None => println!(
                        "{}",
                        out.tokens
                            .iter()
                            .map(|t| t.to_string())
                            .collect::<Vec<_>>()
                            .join(" ")
                    ),
                }
                eprintln!(
                    "{} tokens, {:.1} tokens/s ({:?}); time to first token {:.3} ms device, {:.3} ms wall (prefill in {}; {} graphs captured before, {:.1} ms)",
                    out.tokens.len(),
                    out.decode_tokens_per_s,
                    out.mode,
                    out.ttft.device_ms,
                    out.ttft.wall_ms,
                    out.prefill,
                    out.ttft.graphs_captured,
                    out.ttft.capture_ms
                );
            }
            Ok(true)
        }
    }
}

fn print_inspection(seen: &graphsmith_llama::Inspection) {
    println!("model {}", seen.model);
    println!("decoding with:");
    for (field, (value, source)) in &seen.decoding {
        println!("  {field:<34} {value:<14} ({source})");
    }
    println!("rope: {}", seen.rope);
    let mut by_dtype = std::collections::BTreeMap::<&str, usize>::new();
    for t in &seen.tensors {
        *by_dtype.entry(t.dtype.as_str()).or_default() += 1;
    }
    println!("tensors: {} ({by_dtype:?})", seen.tensors.len());
    for t in seen
        .tensors
        .iter()
        .filter(|t| !t.name.starts_with("model.layers."))
    {
        println!("  {:<40} {:<5} {:?}", t.name, t.dtype, t.shape);
    }
    println!("  (and the layers' tensors)");
    for c in &seen.conversions {
        println!("conversion: {c}");
    }
    println!(
        "weights on the device: {:.1} MB (bf16)",
        seen.weight_bytes as f64 / 1e6
    );
    for w in &seen.warnings {
        println!("warning: {w}");
    }
}
