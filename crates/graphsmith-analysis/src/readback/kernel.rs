//! A kernel's memory accesses from its parameter bytes (see the module docs of
//! [`crate::readback`]): pointer-sized parameters as before, and every 8-byte-aligned word of
//! the larger ones (structs passed by value: PyTorch's arrays of data pointers, offset
//! calculators, `TensorInfo`) that falls in a known region.

use graphsmith_model::{
    char_pointer_arrays, demangled_name, pointer_param_modes, Access, AccessMode, KernelParams,
};

use super::Resolver;

/// Words below this are never device addresses (sizes, strides, flags): not looked up.
const LOWEST_ADDRESS: u64 = 1 << 16;

/// Whether `symbol` is one of PyTorch's elementwise kernels (`at::native::elementwise_kernel`,
/// `vectorized_elementwise_kernel`, `unrolled_elementwise_kernel`), whose arrays of data
/// pointers hold the output first, then the inputs.
pub fn is_elementwise(symbol: &str) -> bool {
    demangled_name(symbol)
        .is_some_and(|n| n.starts_with("at::") && n.ends_with("elementwise_kernel"))
}

/// One word of a parameter that points into a known allocation or region.
struct Hit {
    /// Its position in the parameter, in words from the first aligned one.
    word: usize,
    pointer: u64,
}

impl Resolver<'_> {
    /// An access from `pointer` to the end of the allocation or region holding it.
    fn access_at(&mut self, pointer: u64, mode: AccessMode) -> Option<Access> {
        if pointer < LOWEST_ADDRESS {
            return None;
        }
        let found = self.allocation(pointer)?;
        let offset = pointer - found.base;
        Some(Access {
            buffer: found.base,
            label: found.label,
            offset,
            len: found.size - offset,
            mode,
        })
    }

    /// The words of a parameter at byte `offset` of the parameter buffer, 8-byte aligned in
    /// that buffer, that point into a known allocation or region.
    fn hits(&mut self, offset: u32, bytes: &[u8]) -> Vec<Hit> {
        let skip = (8 - offset as usize % 8) % 8;
        let words = bytes.get(skip..).unwrap_or_default().chunks_exact(8);
        let mut out = Vec::new();
        for (word, chunk) in words.enumerate() {
            let Ok(array) = <[u8; 8]>::try_from(chunk) else {
                continue;
            };
            let pointer = u64::from_le_bytes(array);
            if pointer >= LOWEST_ADDRESS && self.allocation(pointer).is_some() {
                out.push(Hit { word, pointer });
            }
        }
        out
    }

    /// A kernel's accesses through its parameters.
    ///
    /// - A parameter typed `at::detail::Array<char*, N>` or `std::array<char*, N>` of one of
    ///   PyTorch's elementwise kernels ([`is_elementwise`]): its first pointer is written, the
    ///   next `N - 1` read.
    /// - Any other pointer-sized parameter: a pointer, `const T*` read, else unknown.
    /// - A larger parameter (a struct by value): each aligned word in a known region is an
    ///   access of unknown direction, except in an elementwise kernel whose parameter starts
    ///   with its only run of such words (a closure holding the array of data pointers first):
    ///   the first written, the others read.
    pub(super) fn kernel(&mut self, k: &KernelParams) -> Vec<Access> {
        let modes = pointer_param_modes(&k.name);
        let elementwise = is_elementwise(&k.name);
        let arrays = if elementwise {
            char_pointer_arrays(&k.name)
        } else {
            None
        };
        let mut out: Vec<Access> = Vec::new();
        for (i, arg) in k.args.iter().enumerate() {
            if let Some(n) = arrays.as_ref().and_then(|a| a.get(i).copied().flatten()) {
                for hit in self.hits(arg.offset, &arg.bytes) {
                    let mode = match hit.word {
                        0 => AccessMode::Write,
                        w if w < n => AccessMode::Read,
                        _ => AccessMode::Unknown,
                    };
                    out.extend(self.access_at(hit.pointer, mode));
                }
                continue;
            }
            if let Ok(bytes) = <[u8; 8]>::try_from(arg.bytes.as_slice()) {
                let mode = modes
                    .as_ref()
                    .and_then(|m| m.get(i).copied().flatten())
                    .unwrap_or(AccessMode::Unknown);
                out.extend(self.access_at(u64::from_le_bytes(bytes), mode));
                continue;
            }
            let hits = self.hits(arg.offset, &arg.bytes);
            let leading_run = hits.iter().enumerate().all(|(j, h)| h.word == j);
            for (j, hit) in hits.iter().enumerate() {
                let mode = match (elementwise && leading_run, j) {
                    (false, _) => AccessMode::Unknown,
                    (true, 0) => AccessMode::Write,
                    (true, _) => AccessMode::Read,
                };
                out.extend(self.access_at(hit.pointer, mode));
            }
        }
        let mut seen = std::collections::HashSet::new();
        out.retain(|a| seen.insert((a.buffer, a.offset, a.len, a.mode)));
        out
    }
}

#[cfg(test)]
mod tests;
