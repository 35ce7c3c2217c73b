//! A loaded model ready to decode: weights on the device, the [`Decoder`] state, and either a
//! plain stream (eager) or a [`GraphCache`] with the batch buckets up to the one that holds the
//! model's capacity (graphs; `buckets_for_capacity`), its decoder sized for that bucket's rows.
//! A batch above the capacity is an error in both modes; above the largest bucket (a capacity
//! above 64) a batch runs eagerly with the cache's reason.

use std::collections::HashMap;

use graphsmith::model::HazardReport;
use graphsmith::{CacheConfig, CaptureMode, Context, GraphCache, Oversize, Path, Stream};

use super::decoder::Decoder;
use super::device_loop::DecodeLoop;
use super::options::DecoderOptions;
use crate::error::{LlamaError, Result};
use crate::load::checkpoint::HostWeights;
use crate::load::config::Config;
use crate::load::weights::DeviceWeights;

mod loops;
mod prefill;
mod swap;

pub use prefill::PrefillRun;
pub use swap::SwapReport;

pub use super::buckets::{bucket_for, buckets_for_capacity, BUCKETS};
use super::buckets::{check_batch, graph_rows};

/// Eager launches, or replays of captured graphs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Eager,
    Graphs,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Mode, String> {
        match s {
            "eager" => Ok(Mode::Eager),
            "graphs" => Ok(Mode::Graphs),
            other => Err(format!("unknown mode {other:?} (want eager or graphs)")),
        }
    }
}

enum Runner {
    Eager { stream: Stream, work: Box<Decoder> },
    Graphs(Box<GraphCache<usize, Decoder>>),
}

/// How one step ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepPath {
    /// Eager mode.
    Eager,
    /// The executable of this bucket was replayed.
    Graph { bucket: usize },
    /// Graphs mode, but the step ran eagerly for this reason.
    Fallback { reason: String },
}

/// A model on the device, in one mode.
pub struct Model {
    ctx: Context,
    runner: Runner,
    mode: Mode,
    /// The most sequences a step or prefill may hold (the batch the model was made for; in
    /// graphs mode the decoder holds the rows of the bucket that holds it).
    capacity: usize,
    /// Device-side decode loops by bucket (`device_loop.rs`), built on first use; dropped
    /// when the weights change.
    loops: HashMap<usize, DecodeLoop>,
    /// The prefill's buffers and graphs (`model/prefill.rs`), made on first use.
    prefill: Option<prefill::PrefillState>,
    /// What the search of the launch choices did at load (graphs mode, `Search::On`).
    search: Option<super::search::SearchReport>,
}

impl Model {
    /// Uploads `host` and prepares `mode` for batches of up to `capacity` rows and `max_ctx`
    /// positions, its steps issued as `options` says (for the model's life). Graphs mode serves
    /// the buckets up to the one that holds `capacity` ([`buckets_for_capacity`]; the largest
    /// captured here, the others on first use) and sizes its decoder (and so its KV cache) for
    /// that bucket's rows: a model of one sequence holds one sequence's KV cache.
    pub fn new(
        ctx: &Context,
        config: Config,
        host: &HostWeights,
        (capacity, max_ctx): (usize, usize),
        mode: Mode,
        options: DecoderOptions,
        progress: impl FnMut(usize, usize),
    ) -> Result<Model> {
        if capacity == 0 {
            return Err(LlamaError::Input("a batch of zero sequences".into()));
        }
        let upload = ctx.stream("upload")?;
        let weights = DeviceWeights::upload(ctx, &upload, host, "weights", progress)?;
        upload.synchronize()?;
        let mut search = None;
        let runner = match mode {
            Mode::Eager => {
                let stream = ctx.stream("eager")?;
                let work =
                    Decoder::new(ctx, &stream, config, weights, (capacity, max_ctx), options)?;
                stream.synchronize()?;
                Runner::Eager {
                    stream,
                    work: Box::new(work),
                }
            }
            Mode::Graphs => {
                let rows = graph_rows(capacity);
                let mut work =
                    Decoder::new(ctx, &upload, config, weights, (rows, max_ctx), options)?;
                upload.synchronize()?;
                search = super::search::run(ctx, &upload, &mut work)?;
                let cache = GraphCache::new(
                    ctx,
                    CacheConfig {
                        buckets: buckets_for_capacity(capacity).to_vec(),
                        budget_bytes: u64::MAX,
                        warmup_runs: 1,
                        mode: CaptureMode::Global,
                        oversize: Oversize::Eager,
                    },
                    work,
                )?;
                Runner::Graphs(Box::new(cache))
            }
        };
        Ok(Model {
            ctx: ctx.clone(),
            runner,
            mode,
            capacity,
            loops: HashMap::new(),
            prefill: None,
            search,
        })
    }

    /// What the search of the launch choices did when the model was made: searched or read
    /// from the cache, each bucket's choices, the time spent (`None` without the search).
    pub fn search_report(&self) -> Option<&super::search::SearchReport> {
        self.search.as_ref()
    }

    /// The context the model lives in.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The stream, the decoder and the loops, in graphs mode (the device-side loop is built
    /// from the step graph's kernels and replays on the cache's stream).
    pub(crate) fn loop_parts(
        &mut self,
    ) -> Result<(&Stream, &mut Decoder, &mut HashMap<usize, DecodeLoop>)> {
        match &mut self.runner {
            Runner::Graphs(cache) => {
                let (stream, work) = cache.parts();
                Ok((stream, work, &mut self.loops))
            }
            Runner::Eager { .. } => Err(LlamaError::Input(
                "the device-side decode loop runs in graphs mode (--mode graphs)".into(),
            )),
        }
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The most sequences a step or prefill may hold (the batch the model was made for).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The buckets the model captures in graphs mode ([`buckets_for_capacity`]).
    pub fn buckets(&self) -> &'static [usize] {
        buckets_for_capacity(self.capacity)
    }

    /// The decoder state.
    pub(crate) fn decoder(&self) -> &Decoder {
        match &self.runner {
            Runner::Eager { work, .. } => work,
            Runner::Graphs(cache) => cache.work(),
        }
    }

    /// Whether a step of `rows` rows runs its matmuls on cuBLASLt (`--gemm cublaslt`, or
    /// `auto` above one row once the search has chosen its algorithms).
    pub fn uses_cublaslt(&self, rows: usize) -> bool {
        self.decoder().uses_lt(rows)
    }

    /// The cuBLASLt algorithm `projection` runs with at `rows` rows (as the cache keeps it),
    /// once a matmul of that many rows was planned; `None` without cuBLASLt.
    pub fn cublaslt_algo(
        &self,
        rows: usize,
        projection: crate::kernels::Projection,
    ) -> Option<crate::kernels::AlgoData> {
        self.decoder().lt()?.algo(rows, projection)
    }

    /// The stream the model runs on.
    pub fn stream(&self) -> &Stream {
        match &self.runner {
            Runner::Eager { stream, .. } => stream,
            Runner::Graphs(cache) => cache.stream(),
        }
    }

    /// How the model's steps are issued (fixed when it was made).
    pub fn options(&self) -> DecoderOptions {
        self.decoder().options()
    }

    /// Whether the model's kernels use programmatic dependent launch (asked for, and where
    /// [`crate::Pdl::Auto`] asked, available).
    pub fn uses_pdl(&self) -> bool {
        self.decoder().uses_pdl()
    }

    /// Whether a step of `rows` rows runs its projections on the GEMV kernels.
    pub fn uses_gemv(&self, rows: usize) -> bool {
        self.decoder().uses_gemv(rows)
    }

    /// The config.
    pub fn config(&self) -> &Config {
        self.decoder().config()
    }

    /// Writes (token, position) for each row and runs one step for them; rows past
    /// `rows.len()` in the bucket are padding. More rows than the model's capacity is an error.
    pub fn step(&mut self, rows: &[(i32, i32)]) -> Result<StepPath> {
        if rows.is_empty() {
            return Err(LlamaError::Input("a batch of zero sequences".into()));
        }
        check_batch("Model::step", rows.len(), self.capacity)?;
        match &mut self.runner {
            Runner::Eager { stream, work } => {
                work.write_rows(stream, rows)?;
                work.step(stream, rows.len())?;
                Ok(StepPath::Eager)
            }
            Runner::Graphs(cache) => {
                let mut input_error = None;
                let dispatch = cache.run_with(&rows.len(), |stream, work, _bucket| {
                    if let Err(e) = work.write_rows(stream, rows) {
                        input_error = Some(e);
                    }
                    Ok(())
                });
                if let Some(e) = input_error {
                    return Err(e);
                }
                let dispatch = dispatch.map_err(|e| {
                    cache
                        .work()
                        .take_cublas_failure()
                        .unwrap_or(LlamaError::Runtime(e))
                })?;
                Ok(match dispatch.path {
                    Path::Graph => StepPath::Graph {
                        bucket: dispatch.bucket,
                    },
                    Path::Eager { reason } => StepPath::Fallback { reason },
                })
            }
        }
    }

    /// Runs `steps` steps for `rows` rows without writing anything from the host: each step's
    /// advance feeds the next (greedy decoding on the device). For timing.
    pub fn run_free(&mut self, rows: usize, steps: usize) -> Result<()> {
        if rows == 0 {
            return Err(LlamaError::Input("a batch of zero sequences".into()));
        }
        check_batch("Model::run_free", rows, self.capacity)?;
        for _ in 0..steps {
            match &mut self.runner {
                Runner::Eager { stream, work } => work.step(stream, rows)?,
                Runner::Graphs(cache) => {
                    cache.run(&rows)?;
                }
            }
        }
        Ok(())
    }

    /// Logits of the first `rows` rows, `[rows, vocab]`, after the last step.
    pub fn logits(&self, rows: usize) -> Result<Vec<f32>> {
        let d = self.decoder();
        let mut all = self.stream().download(d.logits())?;
        all.truncate(rows * d.config().vocab_size);
        Ok(all)
    }

    /// The attention's counters (per row and key/value head), all 0 between steps.
    pub fn attention_counters(&self) -> Result<Vec<u32>> {
        Ok(self
            .stream()
            .download(self.decoder().attention_counters())?)
    }

    /// The argmax of the first `rows` rows after the last step (-1 for a row that was padding).
    pub fn next_tokens(&self, rows: usize) -> Result<Vec<i32>> {
        let mut all = self.stream().download(self.decoder().next_tokens())?;
        all.truncate(rows);
        Ok(all)
    }

    /// The hazard report of every held executable, by bucket (graphs mode; empty otherwise).
    pub fn hazard_reports(&self) -> Result<Vec<(usize, HazardReport)>> {
        let Runner::Graphs(cache) = &self.runner else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for bucket in cache.held_buckets() {
            if let Some(exec) = cache.exec(&bucket) {
                let report = exec.model().hazards().map_err(|e| {
                    LlamaError::Input(format!(
                        "bucket {bucket}: the graph model is malformed: {e}"
                    ))
                })?;
                out.push((bucket, report));
            }
        }
        Ok(out)
    }

    /// Fills the logits with NaN (tests poison outputs before a step, so a step that writes
    /// nothing cannot pass).
    pub fn poison_logits(&mut self) -> Result<()> {
        let (stream, work): (&Stream, &mut Decoder) = match &mut self.runner {
            Runner::Eager { stream, work } => (stream, work),
            Runner::Graphs(cache) => cache.parts(),
        };
        let nan = vec![f32::NAN; work.logits().len()];
        stream.upload(work.logits_mut(), &nan)?;
        Ok(())
    }

    /// The model of the bucket's executable (labels, lines, accesses), graphs mode.
    pub fn graph_model(&self, bucket: usize) -> Option<graphsmith::model::Graph> {
        match &self.runner {
            Runner::Graphs(cache) => cache.exec(&bucket).map(|e| e.model().clone()),
            Runner::Eager { .. } => None,
        }
    }

    /// Kernel and library nodes in the bucket's executable (graphs mode).
    pub fn node_count(&self, bucket: usize) -> Option<usize> {
        match &self.runner {
            Runner::Graphs(cache) => cache.exec(&bucket).map(|e| e.model().nodes.len()),
            Runner::Eager { .. } => None,
        }
    }

    /// The graph cache's counts (graphs mode): captures, in-place updates, re-instantiations.
    pub fn cache_stats(&self) -> Option<graphsmith::CacheStats> {
        match &self.runner {
            Runner::Graphs(cache) => Some(cache.stats()),
            Runner::Eager { .. } => None,
        }
    }

    /// Captures every bucket of the model ([`Model::buckets`]) now (each is otherwise captured
    /// on first use).
    pub fn capture_all(&mut self) -> Result<()> {
        let buckets = self.buckets();
        if let Runner::Graphs(cache) = &mut self.runner {
            for &b in buckets {
                let mut failed = None;
                cache.run_with(&b, |stream, work, _| {
                    failed = work.write_rows(stream, &[]).err();
                    Ok(())
                })?;
                if let Some(e) = failed {
                    return Err(e);
                }
            }
            cache.stream().synchronize()?;
        }
        Ok(())
    }

    /// Device memory in use on the device now (free memory's complement), bytes.
    pub fn device_used_bytes(&self) -> Result<u64> {
        let (free, total) = self.ctx.memory_info()?;
        Ok(total.saturating_sub(free) as u64)
    }
}
