//! The device-side decode loop: one graph launch runs up to K greedy decode steps with no host
//! round trip in between.
//!
//! The graph holds one WHILE node. Its body is captured from the decoder's own step (embed,
//! the layers, lm_head with the argmax), ending in `ll_loop_advance` where the step graph has
//! `ll_advance`: it does what `ll_advance` does, then records each row's token of the step,
//! stops a row at the end-of-sequence id or the context's end (the row becomes padding), and
//! sets the loop's condition: go on while steps are left and some row decodes. An iteration
//! thus has as many kernels as a step. Steps and the end-of-sequence id are read from a small state
//! buffer written before each launch, so one executable serves any K up to the capacity it was
//! built for.
//!
//! ```ignore
//! model.step(&prompt_rows)?;            // prefill (or the last prompt token)
//! let run = model.decode_loop(1, 64, Some(eos))?;
//! println!("{} steps: {:?}", run.steps, run.tokens[0]);
//! ```

use graphsmith::{CaptureMode, Context, DeviceBuffer, Exec, Stream};

use super::decoder::Decoder;
use crate::error::{LlamaError, Result};

/// Words of the state buffer before the per-row flags: steps left, steps done, end id.
const STATE_HEAD: usize = 3;

/// One instantiated loop for a bucket of `rows` rows.
pub struct DecodeLoop {
    exec: Exec,
    rows: usize,
    max_steps: usize,
    state: DeviceBuffer<i32>,
    history: DeviceBuffer<i32>,
    pdl: bool,
    body_nodes: usize,
    /// The batch whose state the next launch was given (each launch consumes it).
    prepared: Option<usize>,
}

/// What one launch of the loop produced.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LoopRun {
    /// Steps the loop ran (fewer than asked when every row stopped).
    pub steps: usize,
    /// Per real row, the tokens it produced, in order (its end-of-sequence id included).
    pub tokens: Vec<Vec<i32>>,
}

impl Decoder {
    /// Captures the loop for `rows` rows (a bucket; rows past the batch are padding) and up to
    /// `max_steps` steps per launch, and instantiates it. The body uses the kernels chosen now
    /// (plain or programmatic).
    pub fn build_loop(
        &mut self,
        ctx: &Context,
        stream: &Stream,
        rows: usize,
        max_steps: usize,
    ) -> Result<DecodeLoop> {
        if rows == 0 || rows > self.capacity() {
            return Err(LlamaError::Input(format!(
                "a decode loop of {rows} rows (the decoder holds 1 to {})",
                self.capacity()
            )));
        }
        if max_steps == 0 {
            return Err(LlamaError::Input("a decode loop of zero steps".into()));
        }
        let mut state = ctx.alloc::<i32>(&format!("loop{rows}/state"), STATE_HEAD + rows)?;
        stream.upload(&mut state, &vec![0; STATE_HEAD + rows])?;
        let mut history = ctx.alloc::<i32>(&format!("loop{rows}/history"), max_steps * rows)?;
        let mut g = ctx.graph(&format!("decode loop b{rows}"))?;
        // Every launch enters the loop; ll_loop_advance decides when it leaves.
        let more = g.condition_handle("more", Some(1))?;
        let (_, body) = g.while_("decode step", more, &[])?;
        {
            let mut b = g.body(&body)?;
            stream
                .capture_into(&mut b, CaptureMode::Global, |s| {
                    self.issue_loop_body(s, rows, (&mut history, &mut state), max_steps, more)
                })
                .map_err(|e| self.take_cublas_failure().unwrap_or(LlamaError::Runtime(e)))?;
        }
        let body_nodes = g
            .model()
            .nodes
            .iter()
            .flat_map(|n| n.kind.nested_graphs())
            .map(|b| b.nodes.len())
            .sum();
        let exec = g.into_exec()?;
        Ok(DecodeLoop {
            exec,
            rows,
            max_steps,
            state,
            history,
            pdl: self.uses_pdl(),
            body_nodes,
            prepared: None,
        })
    }
}

impl DecodeLoop {
    /// The bucket's rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The most steps one launch runs.
    pub fn max_steps(&self) -> usize {
        self.max_steps
    }

    /// Whether the body's kernels use programmatic dependent launch.
    pub fn uses_pdl(&self) -> bool {
        self.pdl
    }

    /// Nodes in the loop's body (a step's, its last kernel the loop's advance).
    pub fn body_nodes(&self) -> usize {
        self.body_nodes
    }

    /// The executable (its model holds the WHILE node and the body, for the hazard checker).
    pub fn exec(&self) -> &Exec {
        &self.exec
    }

    /// Queues one launch: up to `steps` steps for the first `batch` rows (each decodes from
    /// the token and position the last step left), a row stopping at `eos`:
    /// [`DecodeLoop::prepare`], then [`DecodeLoop::launch_prepared`]. [`DecodeLoop::read`]
    /// waits and reads the tokens.
    ///
    /// A row among the first `batch` that already stopped (padding) is recorded with no token.
    /// Rows of the bucket past `batch` are not recorded; if they still hold a position they
    /// decode along, so make them padding first (a `Model::step` of `batch` rows does).
    pub fn launch(
        &mut self,
        stream: &Stream,
        steps: usize,
        batch: usize,
        eos: Option<i32>,
    ) -> Result<()> {
        self.prepare(stream, steps, batch, eos)?;
        self.launch_prepared(stream, batch)
    }

    /// Writes the state of the next launch (steps, end id, which rows decode). The upload
    /// waits for the stream, so a timing that should hold only the loop prepares first.
    pub fn prepare(
        &mut self,
        stream: &Stream,
        steps: usize,
        batch: usize,
        eos: Option<i32>,
    ) -> Result<()> {
        if steps == 0 || steps > self.max_steps {
            return Err(LlamaError::Input(format!(
                "a loop launch of {steps} steps (this loop runs 1 to {})",
                self.max_steps
            )));
        }
        if batch == 0 || batch > self.rows {
            return Err(LlamaError::Input(format!(
                "a loop launch for {batch} rows (this loop's bucket holds 1 to {})",
                self.rows
            )));
        }
        let mut state = vec![0i32; STATE_HEAD + self.rows];
        state[0] = steps as i32;
        state[2] = eos.unwrap_or(-1);
        for live in &mut state[STATE_HEAD..STATE_HEAD + batch] {
            *live = 1;
        }
        stream.upload(&mut self.state, &state)?;
        self.prepared = Some(batch);
        Ok(())
    }

    /// Queues the launch of `batch` rows that [`DecodeLoop::prepare`] wrote the state of
    /// (without waiting). Read its tokens after it, not between the two.
    pub fn launch_prepared(&mut self, stream: &Stream, batch: usize) -> Result<()> {
        match self.prepared.take() {
            Some(b) if b == batch => {}
            Some(b) => {
                return Err(LlamaError::Input(format!(
                    "a loop launch for {batch} rows, prepared for {b}: prepare it for {batch}"
                )))
            }
            None => {
                return Err(LlamaError::Input(
                    "a loop launch without its state: call DecodeLoop::prepare first (each launch needs its own)"
                        .into(),
                ))
            }
        }
        self.exec.launch(stream)?;
        Ok(())
    }

    /// Waits for the last launch and reads what it produced for the first `batch` rows.
    pub fn read(&self, stream: &Stream, batch: usize) -> Result<LoopRun> {
        let state = stream.download(&self.state)?;
        let history = stream.download(&self.history)?;
        Ok(split_history(
            &history,
            self.rows,
            batch.min(self.rows),
            state[1].max(0) as usize,
        ))
    }
}

/// Per row, the tokens of `steps` recorded steps (`history[step * rows + row]`, -1 once the row
/// had stopped).
pub fn split_history(history: &[i32], rows: usize, batch: usize, steps: usize) -> LoopRun {
    let steps = steps.min(history.len() / rows.max(1));
    let tokens = (0..batch)
        .map(|r| {
            (0..steps)
                .map(|s| history[s * rows + r])
                .take_while(|&t| t >= 0)
                .collect()
        })
        .collect();
    LoopRun { steps, tokens }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_splits_per_row_and_stops_at_the_first_gap() {
        // 3 rows, 4 steps recorded: row 1 stopped after its second token.
        let h = [10, 20, 30, 11, 21, 31, 12, -1, 32, 13, -1, 33];
        let run = split_history(&h, 3, 2, 4);
        assert_eq!(run.steps, 4);
        assert_eq!(run.tokens, vec![vec![10, 11, 12, 13], vec![20, 21]]);
    }

    #[test]
    fn history_never_reads_past_its_buffer() {
        let run = split_history(&[1, 2], 1, 1, 9);
        assert_eq!(run.steps, 2);
        assert_eq!(run.tokens, vec![vec![1, 2]]);
    }
}
