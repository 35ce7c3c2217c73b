//! `--hazards` across graphs: races between launches of different executables on different
//! streams with no wait between them, in the traced process.
//!
//! Two halves, like the rest of the crate. In the traced process (`src/inject/races.rs`) each
//! executable read back at its instantiation (the same read-back, with the same pointer bounds,
//! as the hazard check inside one graph) becomes a [`GraphInfo`] (its nodes' byte ranges and
//! its event record and wait nodes), and every `cuGraphLaunch`, stream event record and wait,
//! and host synchronisation outside a capture is pushed, in the order the host issued them,
//! into a [`Recorder`]: the analysis crate's launch-order check (`launch_order::Checker`,
//! the one `graphsmith doctor --launches` runs), incrementally. The log gets one
//! [`RaceEvent::Found`] per race when it is found and a [`RaceEvent::Summary`] at exit, never
//! one line per launch. Here ([`LaunchRaces::build`], [`render_races`]) those events become the
//! report's section, in the doctor's words.

mod recorder;

use std::fmt::Write as _;

use graphsmith_analysis::launch_order::{LaunchReport, LaunchSequence, Race};
use serde::Serialize;

use crate::event::Event;

pub use crate::event::race::{RaceEvent, RaceFound, RaceSequence, RaceSummary};
pub use graphsmith_analysis::launch_order::GraphInfo;
pub use recorder::{event_handle, graph_info, Recorder, MAX_KEPT};

/// The environment variable that asks the traced process to keep its whole launch sequence and
/// record it at exit (`--launches-out`): `1` to keep it, anything else not to.
pub const LAUNCHES_VAR: &str = "GRAPHSMITH_TRACE_LAUNCHES";

/// One process's races across graphs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProcessRaces {
    pub pid: u32,
    /// As the doctor reports a launch sequence (`launches`, `graphs`, `streams`, `races`,
    /// `notes`).
    pub report: LaunchReport,
    /// The process wrote its summary at exit (false: it crashed or called `_exit`; the counts
    /// are then unknown and only the races found before are listed).
    pub complete: bool,
    /// Where `--launches-out` wrote the sequence, or why it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launches_out: Option<String>,
    /// The sequence recorded with `--launches-out`.
    #[serde(skip)]
    pub sequence: Option<LaunchSequence>,
}

/// Races across graphs of every process that recorded any (the JSON report's
/// `launch_races`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LaunchRaces {
    pub processes: Vec<ProcessRaces>,
}

impl LaunchRaces {
    /// Gathers the race events of the log, process by process, in the order recorded.
    pub fn build(events: &[Event]) -> LaunchRaces {
        let mut processes: Vec<ProcessRaces> = Vec::new();
        let mut found: Vec<&RaceEvent> = events
            .iter()
            .filter_map(|e| match e {
                Event::Race(r) => Some(r),
                _ => None,
            })
            .collect();
        found.sort_by_key(|r| match r {
            RaceEvent::Found(f) => (f.pid, 0, f.seq),
            RaceEvent::Summary(s) => (s.pid, 1, s.seq),
            RaceEvent::Sequence(s) => (s.pid, 2, s.seq),
        });
        for r in found {
            let pid = r.pid();
            if processes.last().map(|p| p.pid) != Some(pid) {
                processes.push(ProcessRaces {
                    pid,
                    report: LaunchReport::default(),
                    complete: false,
                    launches_out: None,
                    sequence: None,
                });
            }
            let Some(p) = processes.last_mut() else {
                continue;
            };
            match r {
                RaceEvent::Found(f) => p.report.races.push((*f.race).clone()),
                RaceEvent::Summary(s) => {
                    p.report.launches = s.launches;
                    p.report.graphs = s.graphs;
                    p.report.streams = s.streams;
                    p.report.notes = s.notes.clone();
                    p.complete = true;
                }
                RaceEvent::Sequence(s) => p.sequence = Some(s.sequence.clone()),
            }
        }
        LaunchRaces { processes }
    }

    /// `--launches-out FILE`: writes each process's sequence, the first to `path`, the others
    /// to `path.PID`, and says where (or why not) in `launches_out`.
    pub fn write_sequences(&mut self, path: &std::path::Path) {
        let mut first = true;
        for p in &mut self.processes {
            let Some(seq) = &p.sequence else { continue };
            let target = if first {
                path.to_path_buf()
            } else {
                let mut name = path.as_os_str().to_owned();
                name.push(format!(".{}", p.pid));
                std::path::PathBuf::from(name)
            };
            first = false;
            p.launches_out = Some(match std::fs::write(&target, seq.to_json() + "\n") {
                Ok(()) => format!("written to {}", target.display()),
                Err(e) => format!("not written: cannot write {}: {e}", target.display()),
            });
        }
    }

    /// Races found, every process.
    pub fn total(&self) -> usize {
        self.processes.iter().map(|p| p.report.races.len()).sum()
    }
}

/// The JSON report with `--hazards`: the report's own fields, `graph_costs` with `--graphs`,
/// and `launch_races`.
#[derive(Serialize)]
pub struct WithRaces<'a> {
    #[serde(flatten)]
    pub report: &'a crate::analysis::Report,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph_costs: Option<&'a crate::graphs::GraphCosts>,
    pub launch_races: &'a LaunchRaces,
}

/// The report's section on races across graphs (`--hazards`): per process, the doctor's text
/// of its launch sequence.
pub fn render_races(races: &LaunchRaces) -> String {
    let mut out = String::new();
    // A process that launched no graph (a launcher, a helper that only initialised CUDA) has
    // nothing to say.
    let shown: Vec<&ProcessRaces> = races
        .processes
        .iter()
        .filter(|p| p.report.launches > 0 || !p.report.races.is_empty() || !p.complete)
        .collect();
    if shown.is_empty() {
        out.push_str("\ncross-graph races: no graph launch was checked (none was launched)\n");
        return out;
    }
    for p in shown {
        let _ = writeln!(out, "\ncross-graph races, process {}:", p.pid);
        if !p.complete {
            let _ = writeln!(
                out,
                "the process did not exit normally: the races found before its end follow"
            );
        }
        for line in p.report.text().lines() {
            if !p.complete && (line.contains(" launches of ") && line.ends_with("streams")) {
                continue;
            }
            let _ = writeln!(out, "{line}");
        }
        for (i, r) in p.report.races.iter().enumerate() {
            let _ = writeln!(out, "race {} in CUDA terms: {}", i + 1, cuda_fix(r));
        }
        if let Some(o) = &p.launches_out {
            let _ = writeln!(out, "launch sequence: {o}");
        }
    }
    out
}

/// The missing wait in the words of the CUDA runtime and PyTorch.
pub fn cuda_fix(r: &Race) -> String {
    let (a, b) = (&r.first, &r.second);
    format!(
        "cudaEventRecord(event, stream {}) after launch #{}, then cudaStreamWaitEvent(stream \
         {}, event) before launch #{} (PyTorch: the second stream's wait_stream(first stream) \
         before the second replay)",
        a.stream_label, a.launch, b.stream_label, b.launch
    )
}

#[cfg(test)]
mod tests;
