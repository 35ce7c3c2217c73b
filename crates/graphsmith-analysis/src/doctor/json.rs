//! The doctor's report as JSON.

use serde_json::{json, Value};

use super::text::only_possible;
use super::{label, Findings};

/// The report as pretty-printed JSON (see [`Findings::json`]).
pub(crate) fn render(file: &str, f: &Findings, extra_notes: &[String], strict: bool) -> String {
    // Each hazard as the model serializes it, with `only_possible` where it is only possible.
    let hazards: Vec<Value> = f
        .hazards
        .hazards
        .iter()
        .map(|h| {
            let mut value = serde_json::to_value(h).unwrap_or(Value::Null);
            if let (Some(why), Some(map)) = (only_possible(h), value.as_object_mut()) {
                map.insert("only_possible".into(), why.into());
            }
            value
        })
        .collect();
    let path: Vec<Value> = f
        .critical_path
        .iter()
        .map(|&id| json!({ "id": id, "label": label(&f.graph, id) }))
        .collect();
    let redundant: Vec<Value> = f
        .redundant
        .iter()
        .map(|e| {
            json!({
                "from": e.from,
                "to": e.to,
                "from_label": label(&f.graph, e.from),
                "to_label": label(&f.graph, e.to),
            })
        })
        .collect();
    let notes: Vec<&String> = f.notes.iter().chain(extra_notes).collect();
    let report = json!({
        "file": file,
        "format": f.format.key(),
        "summary": f.summary,
        "critical_path": path,
        "memory": {
            "graphs": f.hazards.graphs,
            "nodes_with_accesses": f.hazards.nodes_with_accesses,
            "accesses": f.hazards.accesses,
        },
        "hazards": hazards,
        "hazard_counts": {
            "certain": f.certain(),
            "possible": f.possible(),
        },
        "unjudged_pairs": {
            "kernel_pairs": f.hazards.unjudged_kernel_pairs,
            "nested_pairs": f.hazards.unjudged_nested_pairs,
        },
        "redundant_edges": redundant,
        "notes": notes,
        "strict": strict,
        "exit_code": f.exit_code(strict),
    });
    serde_json::to_string_pretty(&report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
