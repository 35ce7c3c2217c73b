//! [`Model`]'s device-side decode loops (`device_loop.rs`): one per bucket, built on first use
//! and kept until the weights change.

use super::{bucket_for, Model};
use crate::error::{LlamaError, Result};
use crate::step::buckets::check_batch;
use crate::step::device_loop::{DecodeLoop, LoopRun};

impl Model {
    /// Runs up to `steps` decode steps for the first `batch` rows in one launch of the
    /// device-side loop (graphs mode), from where the last step left each row. The loop of
    /// the batch's bucket is built on first use (for at least `steps` steps) and kept.
    pub fn decode_loop(&mut self, batch: usize, steps: usize, eos: Option<i32>) -> Result<LoopRun> {
        self.launch_loop(batch, steps, eos)?;
        let bucket = bucket_for(batch).unwrap_or(batch);
        let (stream, _, loops) = self.loop_parts()?;
        match loops.get(&bucket) {
            Some(l) => l.read(stream, batch),
            None => Err(LlamaError::Input(format!(
                "no device-side loop for bucket {bucket}"
            ))),
        }
    }

    /// Queues one launch of the loop without reading its tokens.
    pub fn launch_loop(&mut self, batch: usize, steps: usize, eos: Option<i32>) -> Result<()> {
        self.prepare_loop(batch, steps, eos)?;
        self.launch_prepared_loop(batch)
    }

    /// Queues the launch [`Model::prepare_loop`] prepared (for timing only the loop).
    pub fn launch_prepared_loop(&mut self, batch: usize) -> Result<()> {
        let bucket = bucket_for(batch).unwrap_or(batch);
        let (stream, _, loops) = self.loop_parts()?;
        match loops.get_mut(&bucket) {
            Some(l) => l.launch_prepared(stream, batch),
            None => Err(LlamaError::Input(format!(
                "no device-side loop for bucket {bucket}: prepare it first"
            ))),
        }
    }

    /// Builds the bucket's loop if needed and writes the state of its next launch
    /// ([`DecodeLoop::prepare`]).
    pub fn prepare_loop(&mut self, batch: usize, steps: usize, eos: Option<i32>) -> Result<()> {
        if batch == 0 || steps == 0 {
            return Err(LlamaError::Input(format!(
                "a device-side loop for {batch} rows and {steps} steps: both must be at least 1"
            )));
        }
        check_batch("Model::decode_loop", batch, self.capacity())?;
        let bucket = bucket_for(batch)
            .filter(|b| self.buckets().contains(b))
            .ok_or_else(|| {
                LlamaError::Input(format!(
                    "a device-side loop for {batch} rows: the largest bucket holds {}",
                    self.buckets().last().unwrap_or(&1)
                ))
            })?;
        let ctx = self.context().clone();
        let (stream, work, loops) = self.loop_parts()?;
        let fits = loops.get(&bucket).is_some_and(|l| l.max_steps() >= steps);
        if !fits {
            let built = work.build_loop(&ctx, stream, bucket, steps.max(256))?;
            loops.insert(bucket, built);
        }
        match loops.get_mut(&bucket) {
            Some(l) => l.prepare(stream, steps, batch, eos),
            None => Err(LlamaError::Input(format!(
                "no device-side loop for bucket {bucket}"
            ))),
        }
    }

    /// The held loop of `bucket`, if built.
    pub fn held_loop(&self, bucket: usize) -> Option<&DecodeLoop> {
        self.loops.get(&bucket)
    }
}
