//! `graphsmith trace -- <command>`: runs a CUDA program under the capture tracer and reports
//! every graph capture it made. The work is in `graphsmith_trace::cli` (a library user may want
//! it too), which explains failures with the one failure catalogue (`graphsmith_analysis`),
//! the one `graphsmith explain` prints. Its flags (`--hazards`, `--graphs [--plot FILE]`, ...)
//! are `TraceArgs`, flattened into the command line as they are.

use std::process::ExitCode;

pub use graphsmith_trace::cli::TraceArgs;

/// Runs the command with the tracer, prints the report on stderr, and exits with the command's
/// own exit code.
pub fn run(args: TraceArgs) -> ExitCode {
    graphsmith_trace::cli::run(args)
}
