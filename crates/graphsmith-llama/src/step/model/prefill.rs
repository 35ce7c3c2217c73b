//! [`Model::prefill`]: prompts in chunks (`step/prefill.rs`), one forward per chunk, eager or
//! replaying one captured graph per chunk bucket; then lm_head and the advance for every
//! sequence, so that decoding goes on from the step after the prompt.
//!
//! In graphs mode a bucket is captured before its first chunk runs: one eager run with every
//! row padding (it writes nothing to the KV cache) warms the libraries up, then the capture.
//! The graphs are kept until the weights' buffers change (a swap) or a larger chunk needs
//! larger buffers.

use std::collections::HashMap;
use std::time::Instant;

use graphsmith::model::HazardReport;
use graphsmith::{CaptureMode, Exec, Stream};

use super::{Model, Runner};
use crate::error::{LlamaError, Result};
use crate::step::decoder::{Decoder, PrefillBuffers};
use crate::step::prefill::{chunk_inputs, plan_prefill, ChunkInputs};

/// The prefill's buffers and its graphs by bucket.
pub(crate) struct PrefillState {
    bufs: PrefillBuffers,
    graphs: HashMap<usize, Exec>,
    /// The weights' device addresses the graphs were captured with.
    weights_key: Vec<u64>,
}

/// How a prefill ran.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PrefillRun {
    /// Prompt tokens over every sequence.
    pub tokens: usize,
    /// Rows per chunk asked for.
    pub chunk: usize,
    /// The bucket each chunk ran in, in order.
    pub buckets: Vec<usize>,
    /// Whether the chunks replayed captured graphs (graphs mode).
    pub graphs: bool,
    /// Buckets captured by this call, and the host time their capture took (ms).
    pub captured: usize,
    pub capture_ms: f64,
}

impl Model {
    /// The stream and decoder in either mode.
    fn stream_and_decoder(&mut self) -> (&Stream, &mut Decoder) {
        match &mut self.runner {
            Runner::Eager { stream, work } => (stream, work),
            Runner::Graphs(cache) => cache.parts(),
        }
    }

    /// Prefills `prompts` (sequence `s` into decode row `s`, whose KV cache it fills from
    /// position 0) in chunks of at most `chunk` rows, then runs lm_head over each sequence's
    /// last prompt token and advances every row: afterwards [`Model::logits`] hold those
    /// logits, [`Model::next_tokens`] each sequence's first new token, and the rows stand at
    /// position `prompt length` with that token (rows past the batch are padding), as after a
    /// step-by-step prefill. In graphs mode every chunk replays its bucket's graph, captured on
    /// first use.
    pub fn prefill(&mut self, prompts: &[&[i32]], chunk: usize) -> Result<PrefillRun> {
        let lens: Vec<usize> = prompts.iter().map(|p| p.len()).collect();
        // The decoder's rows (its cache slots): the capacity's bucket in graphs mode.
        let (slots, max_ctx) = (self.decoder().capacity(), self.decoder().max_ctx());
        crate::step::buckets::check_batch("Model::prefill", prompts.len(), self.capacity)?;
        if let Some((s, n)) = lens.iter().enumerate().find(|(_, &n)| n > max_ctx) {
            return Err(LlamaError::Input(format!(
                "prompt {s} of {n} tokens is longer than the context of {max_ctx}"
            )));
        }
        let plan = plan_prefill(&lens, chunk)?;
        let buckets: Vec<usize> = plan.iter().map(|c| c.bucket).collect();
        let (captured, capture_ms) = self.prepare_prefill(&buckets)?;
        let graphs = self.mode == super::Mode::Graphs;
        let Some(state) = self.prefill.as_mut() else {
            return Err(LlamaError::Input(
                "the prefill's buffers are missing".into(),
            ));
        };
        let (stream, work): (&Stream, &mut Decoder) = match &mut self.runner {
            Runner::Eager { stream, work } => (stream, work),
            Runner::Graphs(cache) => cache.parts(),
        };
        for c in &plan {
            let inputs = chunk_inputs(c, prompts, slots)?;
            work.write_prefill_chunk(stream, &mut state.bufs, &inputs)?;
            match state.graphs.get_mut(&c.bucket) {
                Some(exec) if graphs => exec.launch(stream)?,
                _ => work
                    .issue_prefill_chunk(stream, &mut state.bufs, c.bucket)
                    .map_err(|e| work.take_cublas_failure().unwrap_or(LlamaError::Runtime(e)))?,
            }
        }
        let last: Vec<(i32, i32)> = prompts
            .iter()
            .map(|p| (p.last().copied().unwrap_or(0), p.len() as i32 - 1))
            .collect();
        work.write_rows(stream, &last)?;
        work.issue_prefill_head(stream, prompts.len())
            .map_err(|e| work.take_cublas_failure().unwrap_or(LlamaError::Runtime(e)))?;
        Ok(PrefillRun {
            tokens: lens.iter().sum(),
            chunk,
            buckets,
            graphs,
            captured,
            capture_ms,
        })
    }

    /// Makes the prefill's buffers (for the largest of `buckets`) and, in graphs mode,
    /// captures every bucket of `buckets` not held: what [`Model::prefill`] does before its
    /// first chunk, callable ahead of a timed prefill. Returns the buckets captured and the
    /// host time their capture took (ms).
    pub fn prepare_prefill(&mut self, buckets: &[usize]) -> Result<(usize, f64)> {
        let rows = buckets.iter().copied().max().unwrap_or(0);
        if rows == 0 {
            return Ok((0, 0.0));
        }
        let key: Vec<u64> = self
            .decoder()
            .weights()
            .buffers()
            .iter()
            .map(|b| b.device_ptr())
            .collect();
        let ctx = self.ctx.clone();
        let graphs = self.mode == super::Mode::Graphs;
        let mut state = self.prefill.take();
        let (stream, work) = self.stream_and_decoder();
        if state.as_ref().is_none_or(|s| s.bufs.rows() < rows) {
            // Larger buffers: the graphs of the old ones go with them.
            drop(state.take());
            state = Some(PrefillState {
                bufs: work.prefill_buffers(&ctx, stream, rows)?,
                graphs: HashMap::new(),
                weights_key: key.clone(),
            });
        }
        let Some(mut st) = state else {
            return Err(LlamaError::Input(
                "the prefill's buffers are missing".into(),
            ));
        };
        if st.weights_key != key {
            // The graphs point at weights that were swapped out.
            st.graphs.clear();
            st.weights_key = key;
        }
        let t = Instant::now();
        let mut captured = 0;
        let result = (|| -> Result<()> {
            if !graphs {
                return Ok(());
            }
            for &b in buckets {
                if st.graphs.contains_key(&b) {
                    continue;
                }
                // A warm-up run with every row padding: it reads the weights and writes only
                // the prefill's own activations (no cache position, no last row).
                let padding = ChunkInputs {
                    tokens: vec![0; b],
                    pos: vec![-1; b],
                    slot: vec![-1; b],
                    last: vec![-1; work.capacity()],
                };
                work.write_prefill_chunk(stream, &mut st.bufs, &padding)?;
                let failed =
                    |w: &Decoder, e| w.take_cublas_failure().unwrap_or(LlamaError::Runtime(e));
                work.issue_prefill_chunk(stream, &mut st.bufs, b)
                    .map_err(|e| failed(work, e))?;
                stream.synchronize()?;
                let label = format!("prefill chunk b{b}");
                let bufs = &mut st.bufs;
                let (graph, ()) = stream
                    .capture(CaptureMode::Global, &label, |s| {
                        work.issue_prefill_chunk(s, bufs, b)
                    })
                    .map_err(|e| failed(work, e))?;
                st.graphs.insert(b, graph.into_exec()?);
                captured += 1;
            }
            Ok(())
        })();
        self.prefill = Some(st);
        result?;
        Ok((captured, t.elapsed().as_secs_f64() * 1e3))
    }

    /// The hazard report of every held prefill graph, by bucket (graphs mode; empty before the
    /// first prefill).
    pub fn prefill_hazard_reports(&self) -> Result<Vec<(usize, HazardReport)>> {
        let Some(state) = &self.prefill else {
            return Ok(Vec::new());
        };
        let mut buckets: Vec<usize> = state.graphs.keys().copied().collect();
        buckets.sort_unstable();
        let mut out = Vec::new();
        for b in buckets {
            if let Some(exec) = state.graphs.get(&b) {
                let report = exec.model().hazards().map_err(|e| {
                    LlamaError::Input(format!(
                        "prefill bucket {b}: the graph model is malformed: {e}"
                    ))
                })?;
                out.push((b, report));
            }
        }
        Ok(out)
    }

    /// Layer `layer`'s K and V caches as bf16 bits, `[rows, n_kv, max_ctx, head_dim]` each (rows:
    /// the decoder's: in graphs mode those of the bucket that holds the capacity).
    pub fn kv_cache(&mut self, layer: usize) -> Result<(Vec<u16>, Vec<u16>)> {
        let (stream, work) = self.stream_and_decoder();
        let Some((k, v)) = work.kv_cache_mut(layer) else {
            return Err(LlamaError::Input(format!("no layer {layer}")));
        };
        Ok((stream.download(k)?, stream.download(v)?))
    }

    /// Fills every layer's K and V caches with bf16 NaN (tests poison them, so that a position
    /// nothing wrote cannot pass for one written).
    pub fn poison_kv_cache(&mut self) -> Result<()> {
        let layers = self.config().num_hidden_layers;
        let (stream, work) = self.stream_and_decoder();
        for l in 0..layers {
            if let Some((k, v)) = work.kv_cache_mut(l) {
                let nan = vec![0x7fc0u16; k.len()];
                stream.upload(k, &nan)?;
                stream.upload(v, &nan)?;
            }
        }
        Ok(())
    }

    /// Kernel and library nodes in the prefill graph of `bucket` (graphs mode, once captured).
    pub fn prefill_node_count(&self, bucket: usize) -> Option<usize> {
        self.prefill
            .as_ref()
            .and_then(|s| s.graphs.get(&bucket))
            .map(|e| e.model().nodes.len())
    }
}
