//! What the attention asks L2 to fetch for the kernels after it.
//!
//! At batch 1 the attention is latency-bound: while it runs (and while the o projection, whose
//! blocks load their weights before their programmatic wait, finishes), the memory is mostly
//! idle. So the attention also issues bulk L2 prefetches (`cp.async.bulk.prefetch.L2`,
//! `Prefetch` in `kernels/llama_kernels.cu`) of the weights the next kernels read: gate/up, then
//! down, then the next layer's q/k/v (lm_head after the last layer), before its programmatic
//! wait by default. Only weights are prefetched: no kernel of a step writes them, and L2 is
//! where the GPU's memory is coherent, so a prefetch changes no value, whenever it runs.
//!
//! The prefetch is issued before the wait, so it overlaps the end of the q/k/v projection; the
//! budget (`tuning::PREFETCH_MIB_RULE` unless tuned) is about what the memory fetches while the
//! attention runs. Only the attention prefetches: a GEMV cannot exit before its bulk operations
//! complete, so prefetches issued there would lengthen it.
//!
//! The gate/up GEMV reads its gate and up rows together (column `o` takes rows `o` and
//! `n + o`), so a budget smaller than gate/up takes the beginning of each half.

/// Which weight buffer a range lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The layer's gate/up weights (`[2 * ffn, hidden]`: gate rows, then up rows).
    GateUp,
    /// The layer's down weights.
    Down,
    /// The next layer's q/k/v weights, or lm_head after the last layer.
    Next,
}

/// Bytes `[offset, offset + bytes)` of a buffer; `bytes == 0` asks for nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefetchRange {
    pub source: Source,
    pub offset: u64,
    pub bytes: u64,
}

const NONE: PrefetchRange = PrefetchRange {
    source: Source::GateUp,
    offset: 0,
    bytes: 0,
};

/// The kernel's bulk prefetch takes 16-byte-aligned ranges whose length is a multiple of 16.
fn whole16(n: u64) -> u64 {
    n & !15
}

/// The three ranges the attention prefetches with `budget` bytes, given the byte sizes of the
/// layer's gate/up and down weights and of the next q/k/v (or lm_head). Every range starts at
/// a multiple of 16 bytes into its buffer and is a multiple of 16 bytes long; their sum is at
/// most `budget`.
pub fn prefetch_plan(budget: u64, gate_up: u64, down: u64, next: u64) -> [PrefetchRange; 3] {
    if budget < 32 {
        return [NONE; 3];
    }
    if budget < gate_up {
        // The beginning of the gate half and of the up half, in equal parts.
        let half = gate_up / 2;
        let each = whole16((budget / 2).min(half));
        // The up half only when it starts on a 16-byte boundary.
        let up = if half.is_multiple_of(16) {
            PrefetchRange {
                source: Source::GateUp,
                offset: half,
                bytes: each,
            }
        } else {
            NONE
        };
        let gate = PrefetchRange {
            source: Source::GateUp,
            offset: 0,
            bytes: each,
        };
        return [gate, up, NONE];
    }
    let gate_up = whole16(gate_up);
    let down_bytes = whole16((budget - gate_up).min(down));
    let next_bytes = whole16((budget - gate_up - down_bytes).min(next));
    [
        PrefetchRange {
            source: Source::GateUp,
            offset: 0,
            bytes: gate_up,
        },
        PrefetchRange {
            source: Source::Down,
            offset: 0,
            bytes: down_bytes,
        },
        PrefetchRange {
            source: Source::Next,
            offset: 0,
            bytes: next_bytes,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    fn total(plan: &[PrefetchRange; 3]) -> u64 {
        plan.iter().map(|r| r.bytes).sum()
    }

    #[test]
    fn nothing_without_a_budget() {
        assert_eq!(prefetch_plan(0, 64 * MB, 32 * MB, 12 * MB), [NONE; 3]);
    }

    #[test]
    fn a_small_budget_takes_the_start_of_gate_and_of_up() {
        // The 1B config: gate/up 64 MiB, down 32 MiB.
        let plan = prefetch_plan(16 * MB, 64 * MB, 32 * MB, 12 * MB);
        assert_eq!(
            plan[0],
            PrefetchRange {
                source: Source::GateUp,
                offset: 0,
                bytes: 8 * MB
            }
        );
        assert_eq!(
            plan[1],
            PrefetchRange {
                source: Source::GateUp,
                offset: 32 * MB,
                bytes: 8 * MB
            }
        );
        assert_eq!(plan[2].bytes, 0);
    }

    #[test]
    fn a_large_budget_takes_gate_up_down_then_the_next_layer() {
        // The small config: gate/up 3.5 MB, down 1.77 MB, q/k/v 1.1 MB.
        let (gu, d, n) = (2 * 1536 * 576 * 2, 576 * 1536 * 2, 960 * 576 * 2);
        let plan = prefetch_plan(8 * MB, gu, d, n);
        assert_eq!(plan.map(|r| r.bytes), [gu, d, n]);
        assert_eq!(
            plan.map(|r| r.source),
            [Source::GateUp, Source::Down, Source::Next]
        );
        let plan = prefetch_plan(gu + d / 2, gu, d, n);
        assert_eq!(plan.map(|r| r.bytes), [gu, whole16(d / 2), 0]);
    }

    #[test]
    fn ranges_are_whole_16_byte_pieces_within_the_budget() {
        for budget in [1, 31, 32, 100, 4097, 5 * MB + 3, 70 * MB, 1 << 40] {
            for (gu, d, n) in [(64 * MB, 32 * MB, 12 * MB), (1000, 998, 30), (34, 18, 2)] {
                let plan = prefetch_plan(budget, gu, d, n);
                assert!(total(&plan) <= budget, "{budget} {gu}");
                for r in plan {
                    assert_eq!(r.offset % 16, 0);
                    assert_eq!(r.bytes % 16, 0);
                    let size = match r.source {
                        Source::GateUp => gu,
                        Source::Down => d,
                        Source::Next => n,
                    };
                    assert!(r.offset + r.bytes <= size, "{r:?} of {size}");
                }
            }
        }
    }
}
