//! `graphsmith trace -- <command>`: runs a CUDA program under the capture tracer and reports
//! every graph capture it made. The work is in `graphsmith_trace::cli` (a library user may want
//! it too); this module wires it into the command line and plugs in the failure catalogue that
//! `graphsmith explain` prints.

use std::process::ExitCode;

use graphsmith_trace::explain::{Builtin, Catalogue, Explained};

pub use graphsmith_trace::cli::TraceArgs;

/// The tracer's classification of a raw CUDA call (which entry a `cudaMalloc` returning 900 is),
/// with the entry's title from `graphsmith::catalogue`, so that the report and
/// `graphsmith explain <id>` name the same failure mode.
struct FailureCatalogue;

impl Catalogue for FailureCatalogue {
    fn lookup(&self, call: &str, code: u32) -> Option<Explained> {
        let mut found = Builtin.lookup(call, code)?;
        if let Some(entry) = graphsmith::catalogue::entry(&found.id) {
            found.title = entry.title.to_string();
        }
        Some(found)
    }
}

/// Runs the command with the tracer, prints the report on stderr, and exits with the command's
/// own exit code.
pub fn run(args: TraceArgs) -> ExitCode {
    graphsmith_trace::cli::run_with(args, &FailureCatalogue)
}
