//! `graphsmith trace [--json FILE] [--strict] [--hazards [--launches-out FILE]] [--freed] [--graphs [--plot FILE]] --
//! <command> [args...]`: runs the command with the injection library, waits for it, and prints
//! the report on stderr (with `--graphs`, what each graph cost after it). The
//! command's stdin, stdout, stderr and exit code pass through unchanged (with `--strict`, a
//! command that exited 0 but whose report holds an error, a launch on freed memory included,
//! makes `graphsmith trace` exit 1; hazards are warnings and never change the exit code).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::analysis::{Attached, CommandExit, Report};
use crate::event::read_events;
use crate::explain::{Builtin, Catalogue};
use crate::graphs;
use crate::launch;
use crate::races;
use crate::render::render;

/// The arguments of `graphsmith trace`.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct TraceArgs {
    /// Also write the report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Treat silent escapes as errors; exit 1 when the command exited 0 but the report holds an
    /// error (a failed capture or an escape).
    #[arg(long)]
    pub strict: bool,
    /// Read each instantiated graph back and check it for hazards: two nodes that no path of
    /// edges orders, touching the same memory, one of them possibly writing. Reported as
    /// warnings (the exit code does not change).
    #[arg(long)]
    pub hazards: bool,
    /// With --hazards: write the traced process's launch sequence (graphs with what their
    /// nodes touch, launches, event records and waits, host synchronisations) to FILE, in the
    /// format `graphsmith doctor --launches FILE` reads. A second process of the command that
    /// launched graphs goes to FILE.PID.
    #[arg(long, value_name = "FILE", requires = "hazards")]
    pub launches_out: Option<PathBuf>,
    /// Watch the memory each instantiated graph touches, and report a launch of a graph whose
    /// memory was freed since its instantiation (before the launch runs): the node, the bytes,
    /// and where they were allocated and freed. Reported as errors.
    #[arg(long)]
    pub freed: bool,
    /// Report what each graph cost: where it was begun, capture, instantiation and upload wall
    /// times, nodes, device memory allocated while it was captured, replays and their device
    /// time; most costly first. With --json, the JSON report gets `graph_costs`.
    #[arg(long)]
    pub graphs: bool,
    /// With --graphs: draw capture time and memory per graph as SVG in FILE [default: beside
    /// the --json file, with the extension .svg].
    #[arg(long, value_name = "FILE", requires = "graphs")]
    pub plot: Option<PathBuf>,
    /// Keep the raw event log (one JSON object per line) in FILE.
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,
    /// The injection library [default: $GRAPHSMITH_TRACE_LIB, else libgraphsmith_trace.so
    /// beside the graphsmith binary].
    #[arg(long, value_name = "PATH")]
    pub lib: Option<PathBuf>,
    /// The libcupti to use when the command has not loaded one itself [default:
    /// $GRAPHSMITH_CUPTI, else searched: the command's Python packages, $CUDA_HOME, $CUDA_PATH,
    /// /usr/local/cuda*, LD_LIBRARY_PATH, ldconfig].
    #[arg(long, value_name = "PATH")]
    pub cupti: Option<PathBuf>,
    /// The command to trace, and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<OsString>,
}

/// Runs `graphsmith trace` with the built-in catalogue.
pub fn run(args: TraceArgs) -> ExitCode {
    run_with(args, &Builtin)
}

/// Runs `graphsmith trace`, explaining failures with `catalogue`.
pub fn run_with(args: TraceArgs, catalogue: &dyn Catalogue) -> ExitCode {
    let command: Vec<String> = args
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let plan = launch::plan(&launch::Request {
        lib: args.lib.as_deref(),
        events: args.events.as_deref(),
        cupti: args.cupti.as_deref(),
        hazards: args.hazards,
        freed: args.freed,
        graphs: args.graphs,
        command: &args.command,
    });
    let mut notes = plan.notes.clone();
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    for (k, v) in &plan.env {
        cmd.env(k, v);
    }
    if args.launches_out.is_some() {
        cmd.env(crate::races::LAUNCHES_VAR, "1");
    }
    let status = match launch::run(cmd) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("graphsmith trace: cannot run `{}`: {e}", command[0]);
            launch::cleanup(&plan);
            return ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
    };
    let exit = CommandExit {
        code: status.code,
        signal: status.signal,
    };
    let text = plan
        .events
        .as_deref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    let (events, bad) = read_events(&text);
    let mut report = Report::build(command, exit, &events, catalogue);
    if report
        .processes
        .iter()
        .any(|p| matches!(&p.attached, Attached::No { reason, .. } if reason == "CuptiMissing"))
    {
        let mut note = "libcupti was not found: give it with --cupti PATH (or GRAPHSMITH_CUPTI); it ships in the CUDA toolkit (extras/CUPTI/lib64) and in the nvidia-cuda-cupti Python package".to_string();
        if !plan.cupti_looked.is_empty() {
            note += &format!(". Looked in: {}", plan.cupti_looked.join(", "));
        }
        notes.push(note);
    }
    report.notes = notes;
    report.unreadable_lines = bad;
    report.strict = args.strict;
    report.hazards_requested = args.hazards;
    eprint!("{}", render(&report));
    let mut launch_races = args.hazards.then(|| races::LaunchRaces::build(&events));
    if let (Some(r), Some(out)) = (&mut launch_races, &args.launches_out) {
        r.write_sequences(out);
        if r.processes.iter().all(|p| p.sequence.is_none()) {
            eprintln!(
                "graphsmith trace: no launch sequence written to {}: no traced process \
                 launched a graph it had read back",
                out.display()
            );
        }
    }
    if let Some(r) = &launch_races {
        eprint!("{}", races::render_races(r));
    }
    let costs = args.graphs.then(|| graphs::GraphCosts::build(&events));
    if let Some(costs) = &costs {
        eprint!("{}", graphs::render_costs(costs));
        if let Some(path) = graphs::plot_path(args.plot.as_deref(), args.json.as_deref()) {
            match graphs::plot::write(&path, costs) {
                Ok(()) => eprintln!("graph costs plotted in {}", path.display()),
                Err(e) => eprintln!("graphsmith trace: no plot written: {e}"),
            }
        }
    }
    if let Some(path) = &args.json {
        if let Err(e) = write_json(path, &report, costs.as_ref(), launch_races.as_ref()) {
            eprintln!(
                "graphsmith trace: cannot write the JSON report to {}: {e}",
                path.display()
            );
        }
    }
    launch::cleanup(&plan);
    let code = match (status.code, status.signal) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => 1,
    };
    if code == 0 && args.strict && report.errors() > 0 {
        return ExitCode::from(1);
    }
    ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1))
}

fn write_json(
    path: &Path,
    report: &Report,
    costs: Option<&graphs::GraphCosts>,
    launch_races: Option<&races::LaunchRaces>,
) -> std::io::Result<()> {
    let text = match (costs, launch_races) {
        (None, None) => serde_json::to_string_pretty(report),
        (Some(costs), None) => serde_json::to_string_pretty(&graphs::WithCosts {
            report,
            graph_costs: costs,
        }),
        // `--hazards`: races across graphs, per process, as the doctor reports a sequence.
        (costs, Some(launch_races)) => serde_json::to_string_pretty(&races::WithRaces {
            report,
            graph_costs: costs,
            launch_races,
        }),
    }
    .map_err(std::io::Error::other)?;
    std::fs::write(path, text + "\n")
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        trace: TraceArgs,
    }

    fn parse(args: &[&str]) -> Result<TraceArgs, clap::Error> {
        let mut all = vec!["trace"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).map(|c| c.trace)
    }

    #[test]
    fn options_before_the_command_are_ours_the_rest_is_the_command() {
        let a = parse(&[
            "--json", "r.json", "--strict", "--", "python3", "x.py", "--json", "-v",
        ])
        .unwrap();
        assert_eq!(a.json, Some(PathBuf::from("r.json")));
        assert!(a.strict);
        assert!(!a.hazards);
        assert_eq!(a.command, ["python3", "x.py", "--json", "-v"]);
    }

    #[test]
    fn the_double_dash_may_be_left_out() {
        let a = parse(&["./faults", "stream-sync", "--x"]).unwrap();
        assert!(!a.strict);
        assert_eq!(a.command, ["./faults", "stream-sync", "--x"]);
        let a = parse(&["--strict", "./faults", "--strict"]).unwrap();
        assert!(a.strict);
        assert_eq!(a.command, ["./faults", "--strict"]);
        let a = parse(&["--hazards", "./faults", "race", "--hazards"]).unwrap();
        assert!(a.hazards && !a.strict);
        assert_eq!(a.command, ["./faults", "race", "--hazards"]);
    }

    #[test]
    fn plot_needs_graphs() {
        let a = parse(&["--graphs", "--plot", "g.svg", "--", "python3", "--graphs"]).unwrap();
        assert!(a.graphs);
        assert_eq!(a.plot, Some(PathBuf::from("g.svg")));
        assert_eq!(a.command, ["python3", "--graphs"]);
        assert!(parse(&["--plot", "g.svg", "--", "python3"]).is_err());
    }

    #[test]
    fn launches_out_needs_hazards() {
        let a = parse(&[
            "--hazards",
            "--launches-out",
            "s.json",
            "--",
            "./races",
            "race",
        ])
        .unwrap();
        assert_eq!(a.launches_out, Some(PathBuf::from("s.json")));
        assert_eq!(a.command, ["./races", "race"]);
        assert!(parse(&["--launches-out", "s.json", "--", "./races"]).is_err());
    }

    #[test]
    fn a_command_is_required() {
        assert!(parse(&["--strict"]).is_err());
        assert!(parse(&["--json", "r.json", "--"]).is_err());
    }
}
