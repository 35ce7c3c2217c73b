//! `--plot FILE.svg`: what each graph cost, as a picture. Two panels over the graphs in the
//! order they were begun (for a server that captures one graph per batch size, the batch
//! sizes in order): the host time of each (capture, instantiation and upload, stacked) and the
//! device memory allocated while it was captured.

use plotters::prelude::*;

use super::cost::{GraphCost, GraphCosts, ProcessCosts};

const CAPTURE: RGBColor = RGBColor(31, 119, 180);
const INSTANTIATE: RGBColor = RGBColor(255, 127, 14);
const UPLOAD: RGBColor = RGBColor(44, 160, 44);
const MEMORY: RGBColor = RGBColor(148, 103, 189);

/// Where one part of a graph's bar starts and ends, in ns.
type Span = fn(&GraphCost) -> (u64, u64);

/// The process plotted: the one with the most graphs (the first of those).
pub fn plotted(costs: &GraphCosts) -> Option<&ProcessCosts> {
    costs.processes.iter().rev().max_by_key(|p| p.graphs.len())
}

/// The SVG text, or why it could not be drawn.
pub fn svg(costs: &GraphCosts) -> Result<String, String> {
    let Some(p) = plotted(costs) else {
        return Err("no graph to plot".to_string());
    };
    let mut text = String::new();
    draw(&mut text, p).map_err(|e| format!("drawing the plot failed: {e}"))?;
    Ok(text)
}

/// Writes the SVG file.
pub fn write(path: &std::path::Path, costs: &GraphCosts) -> Result<(), String> {
    let text = svg(costs)?;
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type Panel<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// One panel: graphs 1..=n along x, 0..max along y.
fn panel<'a, 'b>(
    area: &'a Area<'b>,
    caption: String,
    unit: &str,
    n: f64,
    max: f64,
) -> Result<Panel<'a, 'b>, Box<dyn std::error::Error>> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0.5..n + 0.5, 0.0..max)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels((n as usize).min(36))
        .x_label_formatter(&|x| {
            if (x - x.round()).abs() < 1e-6 {
                format!("{}", x.round())
            } else {
                String::new()
            }
        })
        .x_desc("graph, in the order begun")
        .y_desc(unit)
        .draw()?;
    Ok(chart)
}

fn draw(text: &mut String, p: &ProcessCosts) -> Result<(), Box<dyn std::error::Error>> {
    let mut graphs: Vec<_> = p.graphs.iter().collect();
    graphs.sort_by_key(|g| g.number);
    let n = graphs.len().max(1) as f64;
    let width = (240 + 18 * graphs.len()).clamp(640, 2400) as u32;
    let root = SVGBackend::with_string(text, (width, 640)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(340);
    let ms = |ns: u64| ns as f64 / 1e6;
    let max_ms = graphs
        .iter()
        .map(|g| ms(g.cost_ns))
        .fold(0.0f64, f64::max)
        .max(0.001)
        * 1.15;
    let caption = format!(
        "host time per graph, process {} ({} graphs, {:.1} ms in all)",
        p.pid,
        graphs.len(),
        ms(p.totals.cost_ns)
    );
    let mut chart = panel(&top, caption, "ms", n, max_ms)?;
    let bar = |i: usize, from: f64, to: f64, color: RGBColor| {
        let x = (i + 1) as f64;
        Rectangle::new([(x - 0.38, from), (x + 0.38, to)], color.filled())
    };
    let parts: [(&str, RGBColor, Span); 3] = [
        ("capture", CAPTURE, |g| (0, g.capture_ns.unwrap_or(0))),
        ("instantiate", INSTANTIATE, |g| {
            let c = g.capture_ns.unwrap_or(0);
            (c, c + g.instantiate_ns)
        }),
        ("upload", UPLOAD, |g| {
            let c = g.capture_ns.unwrap_or(0) + g.instantiate_ns;
            (c, c + g.upload_ns)
        }),
    ];
    for (name, color, span) in parts {
        chart
            .draw_series(graphs.iter().enumerate().map(|(i, g)| {
                let (from, to) = span(g);
                bar(i, ms(from), ms(to), color)
            }))?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()?;

    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let max_mib = graphs
        .iter()
        .map(|g| mib(g.memory.total_bytes))
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.15;
    let caption = format!(
        "device memory allocated while captured ({:.1} MiB in all)",
        mib(p.totals.total_bytes)
    );
    let mut chart = panel(&bottom, caption, "MiB", n, max_mib)?;
    chart.draw_series(
        graphs
            .iter()
            .enumerate()
            .map(|(i, g)| bar(i, 0.0, mib(g.memory.total_bytes), MEMORY)),
    )?;
    root.present()?;
    Ok(())
}
