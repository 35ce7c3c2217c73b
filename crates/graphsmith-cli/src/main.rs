//! The `graphsmith` command.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod probe;
mod tour;

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
    /// A guided run: probe, then eager launches against a replayed graph, measured.
    /// Without a GPU it runs what needs none and says what it skipped.
    Tour {
        /// Device ordinal.
        #[arg(long, default_value_t = 0)]
        device: usize,
        /// Kernels in the demo chain.
        #[arg(long, default_value_t = 1000)]
        nodes: usize,
    },
}

/// Prints an error the way every command does: the message, then the fix when one is known.
pub(crate) fn report(error: &graphsmith::Error) {
    eprintln!("error: {error}");
    if let Some(code) = error.cuda_code() {
        eprintln!("  CUDA code: {code}");
    }
    if let Some(fix) = error.fix() {
        eprintln!("  fix: {fix}");
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Probe { device, json } => probe::run(device, json),
        Command::Tour { device, nodes } => tour::run(device, nodes),
    }
}
