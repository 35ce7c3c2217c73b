//! The `graphsmith` command.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod doctor;
mod explain;
mod probe;
mod tour;
mod trace;

#[derive(Parser)]
#[command(
    name = "graphsmith",
    version,
    about = "CUDA graphs made safe, fast and debuggable"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The GPU, the driver and which graph features they support (each tried on a tiny graph).
    Probe {
        /// Device ordinal.
        #[arg(long, default_value_t = 0)]
        device: usize,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// A guided run: a planted race found; probe; a short decode of a SmolLM2-135M-shaped model
    /// (random weights), eager against graphs; eager launches against a replayed graph,
    /// measured; an in-place update; a planted capture failure. Without a GPU it runs what needs
    /// none and says what it skipped.
    Tour {
        /// Device ordinal.
        #[arg(long, default_value_t = 0)]
        device: usize,
        /// Kernels in the demo chain.
        #[arg(long, default_value_t = 1000)]
        nodes: usize,
    },
    /// Measures chains of N small kernels and a fork/join graph, eager and as replayed graphs,
    /// with capture, instantiation, upload and updates (bench/SCHEMA.md). Needs a GPU.
    Bench {
        /// Device ordinal.
        #[arg(long, default_value_t = 0)]
        device: usize,
        /// Graph sizes N (kernels per chain), comma-separated.
        #[arg(long, alias = "sizes", value_delimiter = ',', default_values_t = [10, 100, 1000, 10000])]
        nodes: Vec<usize>,
        /// Timed repetitions per measurement, after warm-up (default: 20, and 5 at N >= 10,000).
        #[arg(long)]
        reps: Option<usize>,
        /// Print one JSON object per measurement row instead of a table.
        #[arg(long)]
        json: bool,
        /// Also write bench.jsonl, bench.md and bench.svg into this folder.
        #[arg(long, value_name = "DIR")]
        out: Option<std::path::PathBuf>,
    },
    /// The failure catalogue's entries for a CUDA error code or name (900,
    /// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cudaErrorStreamCaptureUnsupported) or an entry id.
    /// Needs no GPU.
    Explain {
        /// A CUDA error code, its driver or runtime name, or a catalogue id.
        query: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Runs a CUDA program under the capture tracer and reports every graph capture it made.
    Trace(trace::TraceArgs),
    /// Checks a graph file (graphsmith JSON, or a cudaGraphDebugDotPrint dump) for races
    /// between nodes that nothing orders, and reports its shape and redundant edges.
    /// Exit code: 0 no certain hazard, 1 certain hazards found (with --strict, possible ones
    /// too), 2 unreadable input.
    Doctor {
        /// The graph: graphsmith JSON (starts with `{`) or DOT (starts with `digraph`); with
        /// --launches, a launch sequence.
        file: std::path::PathBuf,
        /// FILE is a launch sequence (`graphsmith-launches` JSON, as the runtime's launch log
        /// writes it): report races between launches of different executables that nothing
        /// orders (docs/ordering.md). Same exit codes.
        #[arg(long)]
        launches: bool,
        /// Print a JSON report instead of text.
        #[arg(long)]
        json: bool,
        /// Also fail (exit 1) on possible hazards (a kernel of unknown memory beside a copy or
        /// set, a pointer of unknown direction), not only on certain ones.
        #[arg(long)]
        strict: bool,
        /// Also draw the graph, hazards in red, as SVG (needs Graphviz `dot`; without it the
        /// DOT is written next to this path).
        #[arg(long, value_name = "OUT.svg")]
        svg: Option<std::path::PathBuf>,
        /// Also write the graph, hazards in red, as DOT.
        #[arg(long, value_name = "OUT.dot")]
        dot: Option<std::path::PathBuf>,
    },
}

/// Prints an error the way every command does: the message, the errors it wraps (one
/// `Caused by:` line each, outermost first), then the CUDA code and the fix when known.
pub(crate) fn report(error: &graphsmith::Error) {
    eprintln!("error: {error}");
    for cause in causes(error) {
        eprintln!("Caused by: {cause}");
    }
    if let Some(code) = error.cuda_code() {
        eprintln!("  CUDA code: {code}");
    }
    if let Some(fix) = error.fix() {
        eprintln!("  fix: {fix}");
    }
}

/// The chain of errors `error` wraps ([`std::error::Error::source`]), outermost first.
pub(crate) fn causes(error: &dyn std::error::Error) -> Vec<String> {
    let mut out = Vec::new();
    let mut next = error.source();
    while let Some(cause) = next {
        out.push(cause.to_string());
        next = cause.source();
    }
    out
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Probe { device, json } => probe::run(device, json),
        Command::Tour { device, nodes } => tour::run(device, nodes),
        Command::Bench {
            device,
            nodes,
            reps,
            json,
            out,
        } => bench::run(bench::BenchArgs {
            device,
            sizes: nodes,
            reps,
            json,
            out,
        }),
        Command::Explain { query, json } => explain::run(&query, json),
        Command::Trace(args) => trace::run(args),
        Command::Doctor {
            file,
            launches,
            json,
            strict,
            svg,
            dot,
        } => doctor::run(doctor::Options {
            file,
            launches,
            json,
            strict,
            svg,
            dot,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::causes;
    use graphsmith::{Error, ErrorKind, ObjectKind, ObjectRef, SourceLine};

    #[test]
    fn a_wrapped_error_is_printed_as_its_cause() {
        let model_error = graphsmith::model::Graph::new("g")
            .add_edge(graphsmith::model::NodeId(0), graphsmith::model::NodeId(1))
            .unwrap_err();
        let error = Error {
            kind: ErrorKind::InvalidGraph(Box::new(model_error.clone())),
            object: ObjectRef::new(ObjectKind::Node, "n"),
            op: "Graph::empty",
            at: SourceLine {
                file: "src/main.rs",
                line: 3,
                column: 1,
            },
        };
        assert_eq!(
            error.to_string(),
            "Graph::empty on Node 'n' at src/main.rs:3:1: the graph model refused the change"
        );
        assert_eq!(causes(&error), [model_error.to_string()]);
    }
}
