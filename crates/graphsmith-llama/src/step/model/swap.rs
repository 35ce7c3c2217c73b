//! Swapping a [`Model`]'s weights in place: every held executable is switched to the new
//! buffers ([`graphsmith::Exec::relocate`]), checked against an eager step, and re-captured
//! where that is impossible or incomplete. Each part is timed apart: preparing the executables
//! (reading a captured graph back and indexing its pointer words, once per executable), the
//! switch (the driver's per-node updates and the host's own work), the verification, and
//! re-capturing every bucket instead ([`Model::bench_swap`]).

use std::time::Instant;

use super::{Model, Runner};
use crate::error::{LlamaError, Result};
use crate::load::checkpoint::HostWeights;
use crate::load::weights::DeviceWeights;

/// What a weight swap took.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SwapReport {
    /// Uploading the new weights into new buffers (while the old ones still serve).
    pub upload_ms: f64,
    /// Preparing the executables for the switch ([`graphsmith::Exec::prepare_relocation`]):
    /// reading a captured graph back and indexing its pointer words, once per executable (0
    /// when every executable kept its index from an earlier swap).
    pub index_ms: f64,
    /// Switching every held executable to the new buffers in place (preparation excluded):
    /// `driver_ms` plus `host_ms` plus the loop over the buckets.
    pub switch_ms: f64,
    /// Of the switch: the driver's per-node updates (`cuGraphExecKernelNodeSetParams`).
    pub driver_ms: f64,
    /// Of the switch: graphsmith's own work per executable (finding the nodes, rewriting the
    /// model, swapping the kept buffers).
    pub host_ms: f64,
    /// Executables switched.
    pub executables: usize,
    /// Kernel nodes whose arguments changed, over all executables.
    pub nodes_updated: usize,
    /// Pointer words rewritten, over all executables.
    pub words: usize,
    /// Checking every relocated graph against an eager step (before the old weights go).
    pub verify_ms: f64,
    /// `relocate` (in place), or `recapture: <why relocation was impossible or incomplete>`.
    pub method: String,
    /// Re-capturing every bucket after a failed relocation or verification (0 otherwise).
    pub fallback_ms: f64,
    /// Device memory given back after the switch (the old set's bytes when all of it was freed).
    pub freed_bytes: u64,
}

/// The switch's figures, summed over the executables.
#[derive(Default)]
struct Switched {
    index_ms: f64,
    switch_ms: f64,
    executables: usize,
    nodes: usize,
    words: usize,
    driver_ns: u64,
    host_ns: u64,
}

impl Switched {
    fn add(&mut self, moved: &graphsmith::Relocated) {
        self.nodes += moved.nodes;
        self.words += moved.words;
        self.driver_ns += moved.driver_ns;
        self.host_ns += moved.host_ns;
    }
}

impl Model {
    /// Loads `host` into new buffers while the current weights serve, switches every held
    /// executable to them in place ([`graphsmith::Exec::relocate`]: no capture, no
    /// instantiation) and frees the old buffers once no launch uses them.
    pub fn swap_weights(&mut self, host: &HostWeights) -> Result<SwapReport> {
        // The loops point at the old weights: built again on next use.
        self.loops.clear();
        let t = Instant::now();
        let upload = self.ctx.stream("swap-upload")?;
        let new = DeviceWeights::upload(&self.ctx, &upload, host, "weights-swapped", |_, _| {})?;
        upload.synchronize()?;
        let upload_ms = t.elapsed().as_secs_f64() * 1e3;
        let old_bytes = self.decoder().weights().bytes();
        let moves = {
            let old = self.decoder().weights().buffers();
            let fresh = new.buffers();
            if old.len() != fresh.len() {
                return Err(LlamaError::Input(format!(
                    "the new weights have {} tensors, the model {} (tied and untied lm_head mixed?)",
                    fresh.len(),
                    old.len()
                )));
            }
            old.iter()
                .zip(&fresh)
                .map(|(o, n)| graphsmith::Relocation::new(o, n))
                .collect::<graphsmith::Result<Vec<_>>>()?
        };
        let used_before = self.device_used_bytes()?;
        let mut impossible = None;
        let mut switched = Switched::default();
        if let Runner::Graphs(cache) = &mut self.runner {
            // What is invariant across swaps first, timed apart (nothing is changed yet).
            let mut index_ns = 0;
            for bucket in cache.held_buckets() {
                if let Some(exec) = cache.exec_mut(&bucket) {
                    match exec.prepare_relocation(&moves) {
                        Ok(ns) => index_ns += ns,
                        Err(e) => {
                            impossible = Some(e);
                            break;
                        }
                    }
                }
            }
            switched.index_ms = index_ns as f64 / 1e6;
            let t = Instant::now();
            for bucket in cache.held_buckets() {
                let Some(exec) = cache.exec_mut(&bucket) else {
                    continue;
                };
                switched.executables += 1;
                if impossible.is_some() {
                    continue;
                }
                match exec.relocate(&moves) {
                    Ok(moved) => switched.add(&moved),
                    // Every executable is re-captured below.
                    Err(e) => impossible = Some(e),
                }
            }
            switched.switch_ms = t.elapsed().as_secs_f64() * 1e3;
        }
        drop(moves);
        let old = match &mut self.runner {
            Runner::Eager { stream, work } => {
                stream.synchronize()?;
                work.replace_weights(new)
            }
            Runner::Graphs(cache) => {
                let (stream, work) = cache.parts();
                stream.synchronize()?;
                work.replace_weights(new)
            }
        };
        // The old buffers stay alive until every relocated graph has been checked against an
        // eager step: a pointer the relocation could not see (e.g. encoded inside a TMA
        // descriptor) would still read the old weights, and is caught here, not by a fault.
        let t = Instant::now();
        let mismatch = match impossible {
            Some(e) => Some(e.to_string()),
            None => self.verify_graphs()?,
        };
        let verify_ms = t.elapsed().as_secs_f64() * 1e3;
        let mut fallback_ms = 0.0;
        let method = match mismatch {
            None => "relocate".to_string(),
            Some(reason) => {
                // Fall back to capturing every bucket again with the new weights.
                fallback_ms = self.recapture_all()?;
                format!("recapture: {reason}")
            }
        };
        drop(old);
        let used_after = self.device_used_bytes()?;
        Ok(SwapReport {
            upload_ms,
            index_ms: switched.index_ms,
            switch_ms: switched.switch_ms,
            driver_ms: switched.driver_ns as f64 / 1e6,
            host_ms: switched.host_ns as f64 / 1e6,
            executables: switched.executables,
            nodes_updated: switched.nodes,
            words: switched.words,
            verify_ms,
            method,
            fallback_ms,
            freed_bytes: used_before.saturating_sub(used_after).min(old_bytes),
        })
    }

    /// Runs every held bucket once from its graph and once eagerly (same inputs, all rows at
    /// position 0) and compares the logits bit for bit; the first bucket that differs is
    /// returned. Overwrites position 0 of the KV cache of those rows.
    pub fn verify_graphs(&mut self) -> Result<Option<String>> {
        let Runner::Graphs(cache) = &mut self.runner else {
            return Ok(None);
        };
        let vocab = cache.work().config().vocab_size;
        for bucket in cache.held_buckets() {
            let rows: Vec<(i32, i32)> = (0..bucket)
                .map(|r| (((r * 31 + 1) % vocab) as i32, 0))
                .collect();
            let mut failed = None;
            cache.run_with(&bucket, |stream, work, _| {
                failed = work.write_rows(stream, &rows).err();
                Ok(())
            })?;
            if let Some(e) = failed {
                return Err(e);
            }
            let (stream, work) = cache.parts();
            let graph = stream.download(work.logits())?;
            work.write_rows(stream, &rows)?;
            work.step(stream, bucket)?;
            let eager = stream.download(work.logits())?;
            let n = bucket * vocab;
            let same = graph[..n]
                .iter()
                .zip(&eager[..n])
                .all(|(a, b)| a.to_bits() == b.to_bits());
            if !same {
                return Ok(Some(format!(
                    "bucket {bucket}: the relocated graph's logits differ from an eager step's (a pointer the relocation could not see?)"
                )));
            }
        }
        Ok(None)
    }

    /// Re-captures every held bucket from the current state and updates the executables
    /// (the alternative to [`Model::swap_weights`]'s in-place switch), timed in ms.
    pub fn recapture_all(&mut self) -> Result<f64> {
        let Runner::Graphs(cache) = &mut self.runner else {
            return Ok(0.0);
        };
        let t = Instant::now();
        cache.refresh(graphsmith::UpdatePolicy::Reinstantiate)?;
        cache.stream().synchronize()?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    }
}
