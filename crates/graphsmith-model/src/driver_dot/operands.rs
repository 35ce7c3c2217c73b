//! The bytes that the copies and sets of a dump touch: pitched blocks (the rules of a
//! `CUDA_MEMCPY3D` / `cudaMemcpy3DParms` and of a 2-D memset) turned into one byte range per
//! row, and the two layouts in which a verbose dump prints a copy.
//!
//! A block is `depth` slices of `height` rows of `width` bytes; rows lie `pitch` bytes apart and
//! slices `pitch * slice_rows` bytes apart (`slice_rows` is the `Height` / `ysize` of the
//! allocation, at least `height`). Its first byte is `ptr + x + y * pitch + z * pitch *
//! slice_rows`. All arithmetic saturates: absurd numbers in a dump give absurd ranges, never a
//! panic.

use crate::node::{AccessMode, MemorySpace};

/// At most this many ranges per operand. A block of more rows is taken one range per slice
/// (from the slice's first byte to its last), or, with more slices too, as one range from its
/// first byte to its last: a cover that may report bytes between rows, never one that misses a
/// byte.
pub(super) const MAX_ROWS: u64 = 4096;

/// A pitched block of bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Block {
    /// Address of the first byte.
    pub start: u64,
    /// Bytes per row.
    pub width: u64,
    /// Rows per slice.
    pub height: u64,
    /// Slices.
    pub depth: u64,
    /// Bytes from one row to the next (at least `width`).
    pub pitch: u64,
    /// Rows from one slice to the next (at least `height`).
    pub slice_rows: u64,
}

impl Block {
    /// A block at `ptr` moved by `(x, y, z)`; a zero pitch means rows `width` apart, a zero
    /// `slice_rows` means slices `height` rows apart; empty heights and depths count as 1.
    #[allow(clippy::too_many_arguments)]
    pub fn at(
        ptr: u64,
        (x, y, z): (u64, u64, u64),
        pitch: u64,
        slice_rows: u64,
        width: u64,
        height: u64,
        depth: u64,
    ) -> Block {
        let height = height.max(1);
        let depth = depth.max(1);
        let pitch = pitch.max(width);
        let slice_rows = slice_rows.max(height);
        let start = ptr
            .saturating_add(x)
            .saturating_add(y.saturating_mul(pitch))
            .saturating_add(z.saturating_mul(pitch).saturating_mul(slice_rows));
        Block {
            start,
            width,
            height,
            depth,
            pitch,
            slice_rows,
        }
    }

    fn slice_stride(&self) -> u64 {
        self.pitch.saturating_mul(self.slice_rows)
    }

    /// Bytes from the first byte of a slice to the end of its last row.
    fn slice_span(&self) -> u64 {
        self.height
            .saturating_sub(1)
            .saturating_mul(self.pitch)
            .saturating_add(self.width)
    }

    /// The ranges `(address, len)` the block touches, in address order, touching rows merged
    /// (see [`MAX_ROWS`] for very tall blocks). Empty when `width` is 0.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        if self.width == 0 {
            return out;
        }
        let mut push = |a: u64, len: u64| match out.last_mut() {
            Some(last) if a <= last.0.saturating_add(last.1) => {
                let end = a.saturating_add(len).max(last.0.saturating_add(last.1));
                last.1 = end - last.0;
            }
            _ => out.push((a, len)),
        };
        let rows = self.height.saturating_mul(self.depth);
        if rows <= MAX_ROWS {
            for k in 0..self.depth {
                let slice = self
                    .start
                    .saturating_add(k.saturating_mul(self.slice_stride()));
                for i in 0..self.height {
                    push(
                        slice.saturating_add(i.saturating_mul(self.pitch)),
                        self.width,
                    );
                }
            }
        } else if self.depth <= MAX_ROWS {
            for k in 0..self.depth {
                let slice = self
                    .start
                    .saturating_add(k.saturating_mul(self.slice_stride()));
                push(slice, self.slice_span());
            }
        } else {
            push(self.start, self.envelope_len());
        }
        out
    }

    /// Bytes from the first byte of the block to the end of its last row.
    pub fn envelope_len(&self) -> u64 {
        self.depth
            .saturating_sub(1)
            .saturating_mul(self.slice_stride())
            .saturating_add(self.slice_span())
    }
}

/// The bytes one operand of a node touches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Operand {
    /// `(address, len)` per row, merged where rows touch.
    pub ranges: Vec<(u64, u64)>,
    /// The first byte to the end of the last row: all of it lies in one allocation.
    pub envelope: (u64, u64),
    /// Read (a copy's source) or written (a copy's destination, a set).
    pub mode: AccessMode,
}

impl Operand {
    /// The operand of `block`, at `ptr` before its position is added; `None` when it touches
    /// nothing or the pointer is unknown (0).
    pub fn of(ptr: u64, block: Block, mode: AccessMode) -> Option<Operand> {
        if ptr == 0 || block.width == 0 {
            return None;
        }
        Some(Operand {
            ranges: block.ranges(),
            envelope: (block.start, block.envelope_len()),
            mode,
        })
    }
}

/// The memory space of a dump's word for it: `DEVICE`, `HOST PINNED`, `HOST`, `ARRAY`, or the
/// letters `D`, `H`, `A`.
pub(super) fn space(word: &str) -> MemorySpace {
    let w = word.trim().to_ascii_uppercase();
    if w == "D" || w.starts_with("DEVICE") {
        MemorySpace::Device
    } else if w == "H" || w.starts_with("HOST") {
        MemorySpace::Host
    } else if w == "A" || w.starts_with("ARRAY") {
        MemorySpace::Array
    } else {
        MemorySpace::Unknown
    }
}

/// The `(source, destination)` spaces of a runtime-API copy's `kind` row:
/// `HtoD (HOST PINNED to DEVICE)`, `default (HOST PINNED to DEVICE)`, or just `DtoH`.
pub(super) fn kind_spaces(kind: &str) -> (MemorySpace, MemorySpace) {
    let inner = kind
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(inner, _)| inner);
    let (src, dst) = match inner.and_then(|i| i.split_once(" to ")) {
        Some(pair) => pair,
        None => kind
            .split_whitespace()
            .next()
            .and_then(|k| k.split_once("to"))
            .unwrap_or(("", "")),
    };
    (space(src), space(dst))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_a_pitched_block() {
        // 3 rows of 64 bytes, pitch 512, 2 slices of 8 rows, at (16, 2, 1).
        let b = Block::at(0x10000, (16, 2, 1), 512, 8, 64, 3, 2);
        assert_eq!(b.start, 0x10000 + 16 + 2 * 512 + 4096);
        let offsets: Vec<(u64, u64)> = b.ranges().iter().map(|&(a, l)| (a - 0x10000, l)).collect();
        assert_eq!(
            offsets,
            vec![
                (5136, 64),
                (5648, 64),
                (6160, 64),
                (9232, 64),
                (9744, 64),
                (10256, 64)
            ]
        );
        assert_eq!(b.envelope_len(), 10256 + 64 - 5136);
    }

    #[test]
    fn contiguous_rows_merge_and_tall_blocks_are_covered() {
        let b = Block::at(0x1000, (0, 0, 0), 0, 0, 1024, 1, 1);
        assert_eq!(b.ranges(), vec![(0x1000, 1024)]);
        let b = Block::at(0x1000, (0, 0, 0), 64, 0, 64, 100, 1);
        assert_eq!(b.ranges(), vec![(0x1000, 6400)]);
        let tall = Block::at(0x1000, (0, 0, 0), 128, 0, 64, MAX_ROWS + 1, 1);
        assert_eq!(tall.ranges(), vec![(0x1000, MAX_ROWS * 128 + 64)]);
        let huge = Block::at(
            1,
            (u64::MAX, u64::MAX, u64::MAX),
            u64::MAX,
            u64::MAX,
            7,
            u64::MAX,
            u64::MAX,
        );
        assert_eq!(huge.ranges().len(), 1);
        assert_eq!(Block::at(0x1000, (0, 0, 0), 0, 0, 0, 4, 1).ranges(), vec![]);
    }

    #[test]
    fn spaces_of_kind_rows() {
        use MemorySpace::*;
        assert_eq!(kind_spaces("HtoD (HOST PINNED to DEVICE)"), (Host, Device));
        assert_eq!(
            kind_spaces("default (HOST PINNED to DEVICE)"),
            (Host, Device)
        );
        assert_eq!(kind_spaces("DtoH (DEVICE to HOST PINNED)"), (Device, Host));
        assert_eq!(kind_spaces("DtoD"), (Device, Device));
        assert_eq!(kind_spaces("???"), (Unknown, Unknown));
    }
}
