//! How a prefill splits prompts into chunks, as data: the rows of every prompt, sequence after
//! sequence, cut into chunks of at most `chunk` rows, each run in the smallest
//! [`PREFILL_BUCKETS`] size that holds it (a graph per bucket in graphs mode; rows past the
//! chunk's are padding).
//!
//! Rows of several sequences share a chunk: a batch of 8 prompts of 5 to 48 tokens is one
//! chunk of 187 rows (bucket 256), not 8 chunks of mostly padding. The matmuls cost the same per
//! row whichever sequence a row belongs to, and the attention kernels take each row's position
//! and cache slot, so nothing else changes. Every position of a sequence before a row is in an
//! earlier chunk or earlier in the same chunk, whose K and V are in the cache before the
//! chunk's attention runs.

use crate::error::{LlamaError, Result};

/// The row counts a prefill chunk runs at (a captured graph each, in graphs mode).
pub const PREFILL_BUCKETS: [usize; 8] = [16, 32, 64, 128, 256, 512, 1024, 2048];

/// Rows per chunk unless asked otherwise.
pub const DEFAULT_PREFILL_CHUNK: usize = 512;

/// The prefill bucket a chunk of `rows` rows runs in: the smallest that holds it.
pub fn prefill_bucket(rows: usize) -> Option<usize> {
    PREFILL_BUCKETS
        .iter()
        .copied()
        .find(|&b| rows <= b && rows > 0)
}

/// Consecutive positions `start..start + len` of sequence `seq`, as rows of a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Span {
    pub seq: usize,
    pub start: usize,
    pub len: usize,
}

/// One chunk: its spans in row order, its rows and its bucket.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Chunk {
    pub spans: Vec<Span>,
    pub rows: usize,
    pub bucket: usize,
}

/// The chunks of a prefill of prompts of `lens` tokens (sequence `s` fills cache slot `s`), at
/// most `chunk` rows each. Errors name an empty prompt or batch, or a chunk size outside
/// 1..=the largest bucket.
pub fn plan_prefill(lens: &[usize], chunk: usize) -> Result<Vec<Chunk>> {
    let largest = PREFILL_BUCKETS[PREFILL_BUCKETS.len() - 1];
    if chunk == 0 || chunk > largest {
        return Err(LlamaError::Input(format!(
            "a prefill chunk of {chunk} rows: want 1 to {largest}"
        )));
    }
    if lens.is_empty() {
        return Err(LlamaError::Input("a prefill of zero sequences".into()));
    }
    if let Some(s) = lens.iter().position(|&n| n == 0) {
        return Err(LlamaError::Input(format!("prompt {s} is empty")));
    }
    let mut chunks = Vec::new();
    let mut spans = Vec::new();
    let mut rows = 0;
    for (seq, &len) in lens.iter().enumerate() {
        let mut start = 0;
        while start < len {
            let take = (len - start).min(chunk - rows);
            spans.push(Span {
                seq,
                start,
                len: take,
            });
            rows += take;
            start += take;
            if rows == chunk {
                chunks.push(close(std::mem::take(&mut spans), rows));
                rows = 0;
            }
        }
    }
    if rows > 0 {
        chunks.push(close(spans, rows));
    }
    Ok(chunks)
}

fn close(spans: Vec<Span>, rows: usize) -> Chunk {
    Chunk {
        spans,
        rows,
        // `rows` is at most the chunk size, which is at most the largest bucket.
        bucket: prefill_bucket(rows).unwrap_or(rows),
    }
}

/// What a chunk's rows hold on the device, `bucket` rows long (padding: token 0, position and
/// slot -1), and per cache slot (`slots` of them) the chunk row of that sequence's last prompt
/// token when it is in this chunk (-1 otherwise).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkInputs {
    pub tokens: Vec<i32>,
    pub pos: Vec<i32>,
    pub slot: Vec<i32>,
    pub last: Vec<i32>,
}

/// The inputs of `chunk` for `prompts` (the plan's prompts) in a decoder of `slots` cache
/// slots. Errors name a sequence beyond the slots or a span beyond its prompt.
pub fn chunk_inputs(chunk: &Chunk, prompts: &[&[i32]], slots: usize) -> Result<ChunkInputs> {
    let b = chunk.bucket;
    let mut out = ChunkInputs {
        tokens: vec![0; b],
        pos: vec![-1; b],
        slot: vec![-1; b],
        last: vec![-1; slots],
    };
    let mut r = 0;
    for sp in &chunk.spans {
        if sp.seq >= slots {
            return Err(LlamaError::Input(format!(
                "sequence {} of a prefill: the decoder holds {slots} sequences",
                sp.seq
            )));
        }
        let prompt = prompts.get(sp.seq).copied().unwrap_or(&[]);
        if sp.start + sp.len > prompt.len() || r + sp.len > b {
            return Err(LlamaError::Input(format!(
                "span {}..{} of sequence {} is outside its prompt of {} tokens or the chunk of {b} rows",
                sp.start,
                sp.start + sp.len,
                sp.seq,
                prompt.len()
            )));
        }
        for i in 0..sp.len {
            out.tokens[r] = prompt[sp.start + i];
            out.pos[r] = (sp.start + i) as i32;
            out.slot[r] = sp.seq as i32;
            if sp.start + i + 1 == prompt.len() {
                out.last[sp.seq] = r as i32;
            }
            r += 1;
        }
    }
    Ok(out)
}

/// How a prompt is prefilled: one decode step per token, or chunks of at most N rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PrefillMode {
    Steps,
    Chunks(usize),
}

impl Default for PrefillMode {
    fn default() -> PrefillMode {
        PrefillMode::Chunks(DEFAULT_PREFILL_CHUNK)
    }
}

impl std::fmt::Display for PrefillMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PrefillMode::Steps => write!(f, "steps"),
            PrefillMode::Chunks(n) => write!(f, "chunks of {n}"),
        }
    }
}

impl std::str::FromStr for PrefillMode {
    type Err = String;
    /// `steps`, or the rows per chunk (1 to the largest bucket).
    fn from_str(s: &str) -> std::result::Result<PrefillMode, String> {
        let largest = PREFILL_BUCKETS[PREFILL_BUCKETS.len() - 1];
        if s == "steps" {
            return Ok(PrefillMode::Steps);
        }
        match s.parse::<usize>() {
            Ok(n) if (1..=largest).contains(&n) => Ok(PrefillMode::Chunks(n)),
            _ => Err(format!(
                "unknown prefill {s:?} (want steps, or rows per chunk from 1 to {largest})"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(chunk: &Chunk) -> Vec<(usize, usize, usize)> {
        chunk
            .spans
            .iter()
            .map(|s| (s.seq, s.start, s.len))
            .collect()
    }

    #[test]
    fn one_prompt_splits_into_full_chunks_and_a_bucketed_rest() {
        let plan = plan_prefill(&[2048], 512).unwrap();
        assert_eq!(plan.len(), 4);
        assert!(plan.iter().all(|c| c.rows == 512 && c.bucket == 512));
        assert_eq!(spans(&plan[3]), vec![(0, 1536, 512)]);
        // 1,000 rows in chunks of 384: 384, 384, then 232 in bucket 256.
        let plan = plan_prefill(&[1000], 384).unwrap();
        let shape: Vec<(usize, usize)> = plan.iter().map(|c| (c.rows, c.bucket)).collect();
        assert_eq!(shape, vec![(384, 512), (384, 512), (232, 256)]);
        assert_eq!(spans(&plan[2]), vec![(0, 768, 232)]);
    }

    #[test]
    fn a_batch_shares_chunks_in_sequence_order() {
        // The batch8 set's lengths: 187 rows, one chunk in bucket 256.
        let lens = [5, 17, 32, 9, 48, 23, 41, 12];
        let plan = plan_prefill(&lens, 512).unwrap();
        assert_eq!(plan.len(), 1);
        assert_eq!((plan[0].rows, plan[0].bucket), (187, 256));
        assert_eq!(plan[0].spans.len(), 8);
        // Chunks of 32: sequence 2 (32 rows) straddles the first two chunks.
        let plan = plan_prefill(&lens, 32).unwrap();
        assert_eq!(plan.len(), 6);
        assert_eq!(spans(&plan[0]), vec![(0, 0, 5), (1, 0, 17), (2, 0, 10)]);
        assert_eq!(spans(&plan[1]), vec![(2, 10, 22), (3, 0, 9), (4, 0, 1)]);
        assert_eq!((plan[5].rows, plan[5].bucket), (27, 32));
        // Every position of every sequence appears once, in order.
        for (s, &n) in lens.iter().enumerate() {
            let pos: Vec<usize> = plan
                .iter()
                .flat_map(|c| c.spans.iter())
                .filter(|sp| sp.seq == s)
                .flat_map(|sp| sp.start..sp.start + sp.len)
                .collect();
            assert_eq!(pos, (0..n).collect::<Vec<_>>());
        }
        assert!(plan.iter().all(|c| c.rows <= 32));
    }

    #[test]
    fn chunk_sizes_map_to_the_smallest_bucket() {
        assert_eq!(prefill_bucket(1), Some(16));
        assert_eq!(prefill_bucket(16), Some(16));
        assert_eq!(prefill_bucket(17), Some(32));
        assert_eq!(prefill_bucket(2048), Some(2048));
        assert_eq!(prefill_bucket(2049), None);
        assert_eq!(prefill_bucket(0), None);
        let plan = plan_prefill(&[7], 3).unwrap();
        let shape: Vec<(usize, usize)> = plan.iter().map(|c| (c.rows, c.bucket)).collect();
        assert_eq!(shape, vec![(3, 16), (3, 16), (1, 16)]);
    }

    #[test]
    fn bad_requests_are_named() {
        let err = |lens: &[usize], chunk| plan_prefill(lens, chunk).unwrap_err().to_string();
        assert_eq!(
            err(&[4], 0),
            "bad input: a prefill chunk of 0 rows: want 1 to 2048"
        );
        assert_eq!(
            err(&[4], 4096),
            "bad input: a prefill chunk of 4096 rows: want 1 to 2048"
        );
        assert_eq!(err(&[], 16), "bad input: a prefill of zero sequences");
        assert_eq!(err(&[3, 0], 16), "bad input: prompt 1 is empty");
    }

    #[test]
    fn chunk_inputs_pad_and_mark_each_sequences_last_row() {
        let (a, b): (Vec<i32>, Vec<i32>) = ((10..15).collect(), (20..23).collect());
        let prompts: [&[i32]; 2] = [&a, &b];
        let plan = plan_prefill(&[5, 3], 6).unwrap();
        assert_eq!(plan.len(), 2);
        let first = chunk_inputs(&plan[0], &prompts, 4).unwrap();
        assert_eq!(first.tokens.len(), 16);
        assert_eq!(&first.tokens[..7], &[10, 11, 12, 13, 14, 20, 0]);
        assert_eq!(&first.pos[..7], &[0, 1, 2, 3, 4, 0, -1]);
        assert_eq!(&first.slot[..7], &[0, 0, 0, 0, 0, 1, -1]);
        // Sequence 0 ends in this chunk at row 4; sequence 1 does not.
        assert_eq!(first.last, vec![4, -1, -1, -1]);
        let second = chunk_inputs(&plan[1], &prompts, 4).unwrap();
        assert_eq!(&second.tokens[..3], &[21, 22, 0]);
        assert_eq!(&second.pos[..3], &[1, 2, -1]);
        assert_eq!(second.last, vec![-1, 1, -1, -1]);
        let err = chunk_inputs(&plan[0], &prompts, 1).unwrap_err().to_string();
        assert_eq!(
            err,
            "bad input: sequence 1 of a prefill: the decoder holds 1 sequences"
        );
    }

    #[test]
    fn prefill_modes_parse_and_name_the_choices() {
        assert_eq!("steps".parse::<PrefillMode>(), Ok(PrefillMode::Steps));
        assert_eq!("384".parse::<PrefillMode>(), Ok(PrefillMode::Chunks(384)));
        assert_eq!(
            "0".parse::<PrefillMode>(),
            Err("unknown prefill \"0\" (want steps, or rows per chunk from 1 to 2048)".into())
        );
        assert_eq!(PrefillMode::default(), PrefillMode::Chunks(512));
        assert_eq!(PrefillMode::Chunks(64).to_string(), "chunks of 64");
        // As `--json` writes it (bench/llama/report.py reads it).
        let json = |m: PrefillMode| serde_json::to_string(&m).unwrap();
        assert_eq!(json(PrefillMode::Chunks(512)), r#"{"chunks":512}"#);
        assert_eq!(json(PrefillMode::Steps), r#""steps""#);
    }
}
