//! How a decoder issues its steps ([`DecoderOptions`], fixed when it is made): which kernels
//! run the projections, plain or programmatic launches, and hand-set launch choices.

use super::buckets::BucketChoices;
use super::tuning::Tuning;

/// How a decoder issues its steps, fixed when it is made (a captured graph keeps what its
/// capture issued, so these never change under it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecoderOptions {
    /// Which kernels run the projections.
    pub gemm: Gemm,
    /// Plain kernels, or kernels opted into programmatic dependent launch.
    pub pdl: Pdl,
    /// Hand-set launch choices of the one-row projections and the attention, for every bucket
    /// (default: the rules'). Where set, they win over `buckets`'.
    pub tuning: Tuning,
    /// Whether graphs mode measures the launch choices of each bucket at load
    /// (`step::search`), or takes the rules' (default: the rules', so that a library user's
    /// model never writes files it was not asked to).
    pub search: Search,
    /// The launch choices of each bucket: what the search found, or set by hand (default: the
    /// rules'). A step takes its bucket's ([`BucketChoices::for_rows`]), under `tuning`.
    pub buckets: BucketChoices,
}

impl DecoderOptions {
    /// The launch choices of a step of `rows` rows: `tuning` where set, else its bucket's.
    pub fn tuning_for(&self, rows: usize) -> Tuning {
        self.tuning.over(self.buckets.for_rows(rows))
    }
}

/// Whether graphs mode searches the launch choices of each bucket when a model is made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Search {
    /// The rules' choices (and `DecoderOptions::buckets` as given).
    #[default]
    Off,
    /// Measured on the model's own weights at first load, for each bucket, and cached on disk
    /// per GPU, driver, version, kernels and shape (a cached load spends no time searching).
    On,
}

/// With [`Gemm::Auto`], batches of at most this many rows use the GEMV kernels: above one row
/// they reach a much smaller share of the memory bandwidth than at one row, and cuBLAS serves
/// such batches faster.
pub(crate) const GEMV_AUTO_MAX_ROWS: usize = 1;

/// Which kernels run the projections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Gemm {
    /// The decoder's own GEMV kernels (norm, SwiGLU and residual fused) for batches of at most
    /// `GEMV_AUTO_MAX_ROWS` rows, cuBLAS above (cuBLASLt once the search has chosen its
    /// algorithms: graphs mode with `Search::On`).
    #[default]
    Auto,
    /// cuBLAS for every batch (separate norm and SwiGLU kernels).
    Cublas,
    /// cuBLASLt for every batch (as `Cublas`, each matmul with its own descriptor, a
    /// workspace per bucket, and the algorithm the search measured, else the heuristic's first).
    #[serde(rename = "cublaslt")]
    CublasLt,
    /// The GEMV kernels for every batch (in chunks of 8 rows above 8).
    Gemv,
}

/// The choice named `s` among `choices`, or an error naming `what` and every choice.
fn parse_choice<T: Copy>(s: &str, what: &str, choices: &[(&str, T)]) -> Result<T, String> {
    choices
        .iter()
        .find(|(name, _)| *name == s)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            format!("unknown {what} {s:?} (want {})", names.join(", "))
        })
}

impl std::str::FromStr for Gemm {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Gemm, String> {
        let choices = [
            ("auto", Gemm::Auto),
            ("cublas", Gemm::Cublas),
            ("cublaslt", Gemm::CublasLt),
            ("gemv", Gemm::Gemv),
        ];
        parse_choice(s, "GEMM path", &choices)
    }
}

/// Whether the decoder's kernels use programmatic dependent launch (PDL).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pdl {
    /// On where the device has it (compute capability 9.0 or newer), off elsewhere.
    #[default]
    Auto,
    /// On; a device without it is an error naming the feature.
    On,
    /// Off: every launch waits for its predecessor to finish.
    Off,
}

impl std::str::FromStr for Pdl {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Pdl, String> {
        let choices = [("auto", Pdl::Auto), ("on", Pdl::On), ("off", Pdl::Off)];
        parse_choice(s, "--pdl", &choices)
    }
}

#[cfg(test)]
mod tests {
    use super::{Gemm, Pdl};

    #[test]
    fn choices_parse_and_name_every_choice_when_unknown() {
        assert_eq!("cublas".parse::<Gemm>(), Ok(Gemm::Cublas));
        assert_eq!("cublaslt".parse::<Gemm>(), Ok(Gemm::CublasLt));
        assert_eq!("off".parse::<Pdl>(), Ok(Pdl::Off));
        assert_eq!(
            "fast".parse::<Gemm>(),
            Err("unknown GEMM path \"fast\" (want auto, cublas, cublaslt, gemv)".to_string())
        );
        assert_eq!(
            "yes".parse::<Pdl>(),
            Err("unknown --pdl \"yes\" (want auto, on, off)".to_string())
        );
    }
}
