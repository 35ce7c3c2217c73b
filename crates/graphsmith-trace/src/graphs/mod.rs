//! `graphsmith trace --graphs`: what each graph the traced process captured or built cost.
//!
//! - [`event`]: what the injection library records for it (`src/inject/graph_cost.rs` and
//!   `src/inject/graph_activity.rs` write it);
//! - [`cost`]: what a graph and a process cost (the JSON schema of `graph_costs`);
//! - [`report`]: those costs built from the event log (no CUDA);
//! - [`text`]: the section of the human report; [`plot`]: the SVG.

pub mod cost;
pub use crate::event::graph as event;
pub mod plot;
pub mod report;
pub mod text;

pub use cost::GraphCosts;
pub use text::render_costs;

/// The JSON report with `--graphs`: the report's own fields, and `graph_costs`.
#[derive(serde::Serialize)]
pub struct WithCosts<'a> {
    #[serde(flatten)]
    pub report: &'a crate::analysis::Report,
    pub graph_costs: &'a GraphCosts,
}

/// Where `--plot` goes: the file given, else beside the `--json` file (`r.json` -> `r.svg`),
/// else nowhere.
pub fn plot_path(
    plot: Option<&std::path::Path>,
    json: Option<&std::path::Path>,
) -> Option<std::path::PathBuf> {
    plot.map(std::path::Path::to_path_buf)
        .or_else(|| json.map(|j| j.with_extension("svg")))
}
