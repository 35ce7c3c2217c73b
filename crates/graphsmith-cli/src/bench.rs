//! `graphsmith bench`: chains of N small kernels and a fork/join graph, eager and replayed, with
//! capture, instantiation, upload and updates (bench/SCHEMA.md). JSON lines, a markdown table,
//! and SVG plots of time per node against N.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use graphsmith_workloads::bench::{bench, BenchRow};
use indicatif::{ProgressBar, ProgressStyle};

/// What to measure and where to write it.
pub struct BenchArgs {
    pub device: usize,
    pub sizes: Vec<usize>,
    /// Timed repetitions; `None` for the schema's default (20, and 5 at N >= 10,000).
    pub reps: Option<usize>,
    pub json: bool,
    pub out: Option<PathBuf>,
}

pub fn run(args: BenchArgs) -> ExitCode {
    if !graphsmith::gpu_available() {
        eprintln!("error: graphsmith bench needs an NVIDIA GPU and driver; none is usable here");
        return ExitCode::from(2);
    }
    let ctx = match graphsmith::Context::new(args.device) {
        Ok(c) => c,
        Err(e) => {
            crate::report(&e);
            return ExitCode::FAILURE;
        }
    };
    let jobs: Vec<(&'static str, usize)> = ["chain", "forkjoin"]
        .iter()
        .flat_map(|w| args.sizes.iter().map(move |&n| (*w, n)))
        .collect();
    let bar = ProgressBar::new(jobs.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut rows = Vec::new();
    for (workload, n) in jobs {
        let reps = args.reps.unwrap_or(if n >= 10_000 { 5 } else { 20 });
        let mut progress = |phase: &str| bar.set_message(format!("{workload} N={n}: {phase}"));
        match bench(&ctx, workload, n, reps, &mut progress) {
            Ok(row) => {
                if args.json {
                    bar.suspend(|| println!("{}", row.to_json()));
                }
                rows.push(row);
            }
            Err(e) => {
                bar.abandon();
                crate::report(&e);
                return ExitCode::FAILURE;
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if !args.json {
        print!("{}", markdown(&rows));
    }
    if let Some(dir) = &args.out {
        if let Err(e) = write_outputs(dir, &rows) {
            eprintln!("error: could not write results to {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
        eprintln!(
            "wrote {0}/bench.jsonl, {0}/bench.md, {0}/bench.svg",
            dir.display()
        );
    }
    if rows.iter().all(|r| r.correct) {
        ExitCode::SUCCESS
    } else {
        eprintln!("error: a result did not match the host reference");
        ExitCode::FAILURE
    }
}

/// The results as a markdown table, per node where that is the meaningful unit.
pub fn markdown(rows: &[BenchRow]) -> String {
    let mut s = String::from(
        "| workload | N | eager submit µs/node | eager device µs/node | capture µs | capture, journal off µs | instantiate µs | upload µs | replay submit µs | replay device µs/node | per-node update µs/node | whole update µs/node | correct |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in rows {
        let n = r.nodes as f64;
        s.push_str(&format!(
            "| {} | {} | {:.2} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1} | {:.3} | {:.2} | {:.2} | {} |\n",
            r.workload,
            r.nodes,
            r.eager_submit_us / n,
            r.eager_device_us / n,
            r.capture_us,
            r.capture_journal_off_us,
            r.instantiate_us,
            r.upload_us,
            r.replay_submit_us,
            r.replay_device_us / n,
            r.per_node_update_us / n,
            r.whole_graph_update_us / n,
            if r.correct { "yes" } else { "NO" }
        ));
    }
    s
}

fn write_outputs(dir: &Path, rows: &[BenchRow]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let jsonl: String = rows.iter().map(|r| r.to_json() + "\n").collect();
    std::fs::write(dir.join("bench.jsonl"), jsonl)?;
    std::fs::write(dir.join("bench.md"), markdown(rows))?;
    plot(&dir.join("bench.svg"), rows).map_err(|e| std::io::Error::other(e.to_string()))
}

/// Device time per node against N (log-log), eager and replay, per workload.
fn plot(path: &Path, rows: &[BenchRow]) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let max_n = rows.iter().map(|r| r.nodes).max().unwrap_or(10).max(10) as f64;
    let per_node = |r: &BenchRow, eager: bool| {
        (if eager {
            r.eager_device_us
        } else {
            r.replay_device_us
        }) / r.nodes as f64
    };
    let max_y = rows
        .iter()
        .flat_map(|r| [per_node(r, true), per_node(r, false)])
        .fold(1.0f64, f64::max)
        * 2.0;
    let mut chart = ChartBuilder::on(&root)
        .caption("device time per node (µs) vs N", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((5.0..max_n * 2.0).log_scale(), (0.1..max_y).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("N (kernels)")
        .y_desc("µs per node")
        .draw()?;
    let series = [
        ("chain", true, RED),
        ("chain", false, BLUE),
        ("forkjoin", true, MAGENTA),
        ("forkjoin", false, CYAN),
    ];
    for (workload, eager, color) in series {
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.workload == workload)
            .map(|r| (r.nodes as f64, per_node(r, eager)))
            .collect();
        let name = format!(
            "{workload} {}",
            if eager { "eager" } else { "graph replay" }
        );
        chart
            .draw_series(LineSeries::new(points.clone(), color))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart.draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 3, color.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_markdown_table_has_capture_with_the_journal_on_and_off() {
        let row = BenchRow {
            workload: "chain",
            nodes: 10,
            eager_submit_us: 20.0,
            eager_device_us: 30.0,
            capture_us: 40.0,
            capture_journal_off_us: 35.0,
            instantiate_us: 12.0,
            upload_us: 3.0,
            replay_submit_us: 1.5,
            replay_device_us: 10.0,
            per_node_update_us: 4.0,
            whole_graph_update_us: 1.0,
            reinstantiate_us: 13.0,
            correct: true,
        };
        let md = markdown(&[row]);
        assert!(
            md.starts_with("| workload | N | eager submit µs/node | eager device µs/node | capture µs | capture, journal off µs | instantiate µs |"),
            "{md}"
        );
        assert!(
            md.ends_with("| chain | 10 | 2.00 | 3.00 | 40 | 35 | 12 | 3 | 1.5 | 1.000 | 0.40 | 0.10 | yes |\n"),
            "{md}"
        );
    }
}
