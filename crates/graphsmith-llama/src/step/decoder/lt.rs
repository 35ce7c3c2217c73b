//! The decoder's cuBLASLt: made where the options may run it, which steps and chunks run on it
//! ([`lt_route`]), and each projection's matmul on the decoder's own buffers (what the search
//! times, `step/search/lt.rs`).

use graphsmith::{Context, Stream};

use super::Decoder;
use crate::error::Result;
use crate::kernels::cublas::{operand, output};
use crate::kernels::cublaslt::{AlgoData, CublasLt, Projection};
use crate::step::buckets::buckets_for_capacity;
use crate::step::options::{DecoderOptions, Gemm, Search};

/// cuBLASLt for `options` with a workspace per bucket of a decoder of `capacity` rows: made
/// with `--gemm cublaslt` (an error when it cannot be), and with `auto` when the search runs
/// (then a missing library leaves cuBLAS in its place, and the second value says why); none
/// otherwise.
pub(super) fn make_lt(
    ctx: &Context,
    options: &DecoderOptions,
    capacity: usize,
) -> Result<(Option<CublasLt>, Option<String>)> {
    let buckets = buckets_for_capacity(capacity);
    match (options.gemm, options.search) {
        (Gemm::CublasLt, _) => Ok((Some(CublasLt::new(ctx, "cublaslt", buckets)?), None)),
        (Gemm::Auto, Search::On) => match CublasLt::new(ctx, "cublaslt", buckets) {
            Ok(lt) => Ok((Some(lt), None)),
            Err(e) => Ok((None, Some(format!("{e}; cuBLAS runs above one row")))),
        },
        _ => Ok((None, None)),
    }
}

/// The cuBLASLt that a step or prefill chunk of `rows` rows runs its matmuls on, if any
/// ([`routes_to_lt`]).
pub(super) fn lt_route(lt: &Option<CublasLt>, gemm: Gemm, rows: usize) -> Option<&CublasLt> {
    lt.as_ref()
        .filter(|lt| routes_to_lt(gemm, rows, lt.has_chosen()))
}

/// Whether the matmuls of `rows` rows run on cuBLASLt (where it was made): every one with
/// `--gemm cublaslt`; with `auto`, those above one row once the search has `chosen` the
/// algorithms; never otherwise.
pub(crate) fn routes_to_lt(gemm: Gemm, rows: usize, chosen: bool) -> bool {
    match gemm {
        Gemm::CublasLt => true,
        Gemm::Auto => rows > 1 && chosen,
        Gemm::Cublas | Gemm::Gemv => false,
    }
}

impl Decoder {
    /// The cuBLASLt handle, where one was made.
    pub(crate) fn lt(&self) -> Option<&CublasLt> {
        self.lt.as_ref()
    }

    /// Lets cuBLASLt go (`auto` after its measuring failed; before any capture): every matmul
    /// runs on cuBLAS from now on. Waits for the work issued on `stream` first, so that no
    /// matmul still uses a workspace when it is freed.
    pub(crate) fn drop_lt(&mut self, stream: &Stream) -> Result<()> {
        stream.synchronize()?;
        self.lt = None;
        Ok(())
    }

    /// Whether a step or prefill chunk of `rows` rows runs its matmuls on cuBLASLt (not on the
    /// GEMV kernels, and routed to it by [`lt_route`]).
    pub(crate) fn uses_lt(&self, rows: usize) -> bool {
        !self.uses_gemv(rows) && lt_route(&self.lt, self.options.gemm, rows).is_some()
    }

    /// Why `auto` runs without cuBLASLt (the library could not be loaded), if it does.
    pub(crate) fn lt_missing(&self) -> Option<&str> {
        self.lt_missing.as_deref()
    }

    /// The buckets of the decoder ([`Decoder::buckets`]) whose matmuls run on cuBLASLt once
    /// chosen: every one with `--gemm cublaslt`, those above one row with `auto`.
    pub(crate) fn lt_buckets(&self) -> Vec<usize> {
        let from = usize::from(self.options.gemm == Gemm::Auto) + 1;
        self.buckets()
            .iter()
            .copied()
            .filter(|&b| b >= from)
            .collect()
    }

    /// Sets `projection`'s algorithm at `rows` rows (from the cache; checked by cuBLASLt).
    pub(crate) fn set_lt_algo(
        &self,
        rows: usize,
        projection: Projection,
        data: AlgoData,
    ) -> Result<()> {
        match &self.lt {
            Some(lt) => lt.set_algo(projection, projection.params(&self.config, rows), data),
            None => Ok(()),
        }
    }

    /// Makes `projection`'s plan at `rows` rows (its descriptor and candidates).
    pub(crate) fn prepare_lt(&self, rows: usize, projection: Projection) -> Result<()> {
        match &self.lt {
            Some(lt) => lt.prepare(projection, projection.params(&self.config, rows)),
            None => Ok(()),
        }
    }

    /// One cuBLASLt matmul of `projection` over `rows` rows on layer 0's weights (lm_head's
    /// for [`Projection::Head`]) and the decoder's own activations, with its current algorithm:
    /// what the search times. Without cuBLASLt, nothing.
    pub(crate) fn issue_lt_matmul(
        &mut self,
        stream: &Stream,
        rows: usize,
        projection: Projection,
    ) -> graphsmith::Result<()> {
        let Some(lt) = self.lt.as_ref() else {
            return Ok(());
        };
        let rows = rows.min(self.capacity);
        let m = (projection, projection.params(&self.config, rows));
        let Some(lw) = self.weights.layers.first() else {
            return Ok(());
        };
        let label = "search: cublaslt matmul";
        let (x, w, y) = match projection {
            Projection::Qkv => (
                operand(&self.xn),
                operand(&lw.qkv),
                output(&mut self.qkv, false),
            ),
            Projection::O => (
                operand(&self.attn),
                operand(&lw.o),
                output(&mut self.hidden, true),
            ),
            Projection::GateUp => (
                operand(&self.xn),
                operand(&lw.gate_up),
                output(&mut self.gate_up, false),
            ),
            Projection::Down => (
                operand(&self.act),
                operand(&lw.down),
                output(&mut self.hidden, true),
            ),
            Projection::Head => (
                operand(&self.xn),
                operand(self.weights.head()),
                output(&mut self.logits, false),
            ),
        };
        lt.matmul(stream, label, m, x, w, y)
    }
}

#[cfg(test)]
mod tests {
    use super::routes_to_lt;
    use crate::step::options::Gemm;

    #[test]
    fn auto_takes_cublaslt_above_one_row_once_chosen_and_cublaslt_always() {
        let at = |gemm, chosen| -> Vec<bool> {
            [1, 2, 8, 64, 512]
                .iter()
                .map(|&rows| routes_to_lt(gemm, rows, chosen))
                .collect()
        };
        assert_eq!(at(Gemm::CublasLt, false), vec![true; 5]);
        assert_eq!(at(Gemm::Auto, true), vec![false, true, true, true, true]);
        assert_eq!(at(Gemm::Auto, false), vec![false; 5]);
        assert_eq!(at(Gemm::Cublas, true), vec![false; 5]);
        assert_eq!(at(Gemm::Gemv, true), vec![false; 5]);
    }
}
