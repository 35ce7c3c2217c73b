//! `graphsmith doctor FILE`: reads a graph (graphsmith JSON, or a `cudaGraphDebugDotPrint`
//! dump) and reports its shape, its hazards (nodes that race) and its redundant edges; with
//! `--launches`, reads a launch sequence and reports races across graphs. The
//! analysis and the report are `graphsmith_analysis::doctor`'s, the same as the Python
//! package's; this file adds the DOT and SVG files and the exit code.
//!
//! Exit codes: 0 no certain hazard (possible ones too with `--strict`), 1 certain hazards
//! found (or, with `--strict`, possible ones), 2 the input could not be read (or an output file
//! could not be written); the message names the line where the input is wrong.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use graphsmith::analysis::doctor;

/// What `doctor` was asked to do.
pub(crate) struct Options {
    pub file: PathBuf,
    /// `file` is a launch sequence (races across graphs), not a graph.
    pub launches: bool,
    pub json: bool,
    pub strict: bool,
    pub svg: Option<PathBuf>,
    pub dot: Option<PathBuf>,
}

pub(crate) fn run(options: Options) -> ExitCode {
    if options.launches {
        return run_launches(&options);
    }
    let shown = options.file.display().to_string();
    let findings = match doctor::analyse_file(&options.file) {
        Ok(f) => f,
        Err(error) => {
            eprintln!("error: {shown}: {error}");
            return ExitCode::from(2);
        }
    };
    let mut notes = Vec::new();
    let drawn = findings.graph.to_dot_with(&findings.hazards.dot_options());
    if let Some(path) = &options.dot {
        if let Err(e) = std::fs::write(path, &drawn) {
            eprintln!(
                "error: cannot write {}: {e} (give --dot a path in a writable folder)",
                path.display()
            );
            return ExitCode::from(2);
        }
        notes.push(format!("wrote DOT to {}", path.display()));
    }
    if let Some(svg) = &options.svg {
        match render_svg(&drawn, svg) {
            Ok(note) => notes.push(note),
            Err(message) => {
                eprintln!("error: {message}");
                return ExitCode::from(2);
            }
        }
    }
    if options.json {
        println!("{}", findings.json(&shown, &notes, options.strict));
    } else {
        print!("{}", findings.text(&shown, &notes, options.strict));
    }
    ExitCode::from(findings.exit_code(options.strict))
}

/// `doctor --launches FILE`: the analysis crate's doctor over a launch sequence.
fn run_launches(options: &Options) -> ExitCode {
    if options.svg.is_some() || options.dot.is_some() {
        eprintln!("error: --svg and --dot draw a graph, and a launch sequence is none: leave them out with --launches");
        return ExitCode::from(2);
    }
    let shown = options.file.display().to_string();
    match doctor::analyse_launches_file(&options.file) {
        Ok(findings) => {
            if options.json {
                println!("{}", findings.json(&shown, options.strict));
            } else {
                print!("{}", findings.text(&shown, options.strict));
            }
            ExitCode::from(findings.exit_code(options.strict))
        }
        Err(error) => {
            eprintln!("error: {shown}: {error}");
            ExitCode::from(2)
        }
    }
}

/// Runs Graphviz `dot -Tsvg`; without Graphviz, writes the DOT beside the SVG's path instead.
fn render_svg(drawn: &str, svg: &Path) -> Result<String, String> {
    let child = Command::new("dot")
        .arg("-Tsvg")
        .arg("-o")
        .arg(svg)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let fallback = svg.with_extension("dot");
            std::fs::write(&fallback, drawn)
                .map_err(|e| format!("cannot write {}: {e}", fallback.display()))?;
            return Ok(format!(
                "Graphviz `dot` not found: install graphviz for --svg; wrote DOT to {} instead",
                fallback.display()
            ));
        }
        Err(e) => return Err(format!("cannot run Graphviz `dot`: {e}")),
    };
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        stdin
            .write_all(drawn.as_bytes())
            .map_err(|e| format!("cannot send the graph to Graphviz `dot`: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("Graphviz `dot` failed: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "Graphviz `dot` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(format!("wrote SVG to {}", svg.display()))
}
