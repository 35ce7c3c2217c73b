//! The manifests of the runtime-API and PyTorch dumps (which nodes race, on which bytes), read
//! for the data-driven tests of the model and of `graphsmith doctor`. Shared through `#[path]`,
//! next to `driver_dot_fixtures.rs`.
#![allow(dead_code)]

use serde_json::Value;

/// One side of a planted race.
#[derive(Debug, Clone)]
pub struct Side {
    /// `memcpy`, `memset`, `kernel`, or PyTorch's expected kind (`kernel or memset`).
    pub kind: String,
    /// `read`, `write` or `read-write`.
    pub access: String,
    /// The node handle printed in the dump (runtime-API cases only).
    pub handle: Option<u64>,
    /// Absolute `[lo, hi)` byte ranges it touches, one per row.
    pub ranges: Vec<(u64, u64)>,
}

/// One planted race and its fixed twin.
#[derive(Debug, Clone)]
pub struct Case {
    /// The case's name.
    pub name: String,
    /// Fixture paths (under `fixtures/driver-dot/`) of the racy and the fixed dump.
    pub racy: String,
    pub fixed: String,
    /// The buffer's base address.
    pub base: u64,
    /// The overlap: envelope `[lo, hi)`, and its intervals.
    pub overlap: (u64, u64),
    pub intervals: Vec<(u64, u64)>,
    pub first: Side,
    pub second: Side,
}

fn hex(v: &Value) -> u64 {
    let s = v.as_str().unwrap_or_default();
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("not hex: {v}"))
}

fn ranges(v: &Value) -> Vec<(u64, u64)> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|r| (hex(&r["lo"]), hex(&r["hi"])))
        .collect()
}

fn side(v: &Value) -> Side {
    Side {
        kind: v["kind"]
            .as_str()
            .or(v["expected_node_kind"].as_str())
            .unwrap_or_default()
            .to_string(),
        access: v["access"].as_str().unwrap_or_default().to_string(),
        handle: v.get("handle").map(hex),
        ranges: ranges(&v["ranges"]),
    }
}

/// The cases of a manifest (`runtime-api/manifest.json` or `torch/manifest.json`), with fixture
/// paths under `dir`.
pub fn cases(dir: &str, manifest: &str) -> Vec<Case> {
    let m: Value = serde_json::from_str(manifest).expect("manifest is JSON");
    m["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            let buffer = &c["buffer"];
            Case {
                name: c["case"].as_str().unwrap_or_default().to_string(),
                racy: format!("{dir}/{}", c["racy"].as_str().unwrap_or_default()),
                fixed: format!("{dir}/{}", c["fixed"].as_str().unwrap_or_default()),
                base: hex(buffer.get("base").unwrap_or(&buffer["data_ptr"])),
                overlap: (hex(&c["overlap"]["lo"]), hex(&c["overlap"]["hi"])),
                intervals: ranges(&c["overlap"]["intervals"]),
                first: side(&c["first"]),
                second: side(&c["second"]),
            }
        })
        .collect()
}

/// `[lo, hi)` ranges sorted, touching ones merged.
pub fn merged(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (lo, hi) in v {
        match out.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// The node number `N` of `graph_X_node_N` whose statement in `dump` prints `handle` on its
/// `node handle` line.
pub fn node_of_handle(dump: &str, handle: u64) -> Option<u32> {
    let mut current: Option<u32> = None;
    for line in dump.lines() {
        if let Some((name, tail)) = line
            .strip_prefix("\"graph_")
            .and_then(|r| r.split_once('"'))
        {
            if tail.starts_with('[') {
                current = name.split_once("_node_").and_then(|(_, n)| n.parse().ok());
            }
        }
        let printed = line
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter_map(|w| w.strip_prefix("0x"))
            .any(|h| u64::from_str_radix(h, 16) == Ok(handle));
        if printed && line.contains("node handle") {
            return current;
        }
    }
    None
}
