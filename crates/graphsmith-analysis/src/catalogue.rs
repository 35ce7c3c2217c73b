//! The failure catalogue: every capture failure mode graphsmith knows, with the codes the driver
//! really returns (measured on an H200, driver 580, CUDA 13.0, by `examples/capture_codes.rs`),
//! what graphsmith reports and the fix. Diagnoses point into it; `graphsmith explain` prints it;
//! `docs/failures.md` is generated from it ([`markdown`]) and a CPU test keeps the two in step.

use std::fmt;

use serde::Serialize;

mod calls;
mod entries;

pub use calls::classify_call;
pub use entries::ENTRIES;

/// The three failure families that CUDA-graph tutorials name, mapped onto real codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// The capture was invalidated by a call that is not allowed while capturing (tutorials
    /// call it "invalid context"): codes 900, 901, 903, 906, 907, 908.
    Invalidated,
    /// Parameters or pointers that changed after capture ("kernel launch mismatch").
    StaleParameters,
    /// A memory dependency the graph does not hold ("memory dependency violation"):
    /// work outside the graph, waits the capture cannot express (902, 904, 905).
    MemoryDependency,
}

impl Family {
    /// The family a capture-related code belongs to, when no catalogue entry says more.
    pub fn of_code(number: u32) -> Family {
        match number {
            902 | 904 | 905 => Family::MemoryDependency,
            _ => Family::Invalidated,
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::Invalidated => "capture invalidated by a forbidden call",
            Family::StaleParameters => "parameters or pointers changed after capture",
            Family::MemoryDependency => "memory dependency violated",
        })
    }
}

/// A CUDA result code under both of its names (the driver's and the runtime's share the number
/// for every code in the catalogue).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Code {
    pub number: u32,
    /// `CUDA_ERROR_*`.
    pub driver: &'static str,
    /// `cudaError*`.
    pub runtime: &'static str,
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.driver, self.number)
    }
}

/// One failure mode.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// Stable id, e.g. `sync-in-capture`.
    pub id: &'static str,
    pub title: &'static str,
    /// `None`: not a failure (the entry documents that something is allowed).
    pub family: Option<Family>,
    /// The codes seen, in the order they appear (the first is where it starts); empty when the
    /// driver reports nothing at all.
    pub codes: &'static [Code],
    /// graphsmith operations that run into it (used to match a diagnosis to its entry).
    pub ops: &'static [&'static str],
    pub trigger: &'static str,
    /// What the driver did on the H200.
    pub seen: &'static str,
    /// What graphsmith reports.
    pub reports: &'static str,
    pub fix: &'static str,
    /// The GPU test that reproduces it and checks graphsmith's diagnosis.
    pub test: &'static str,
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "[{}] {}", self.id, self.title)?;
        match self.family {
            Some(family) => writeln!(f, "  family:   {family}")?,
            None => writeln!(f, "  family:   none (allowed)")?,
        }
        let codes: Vec<String> = self.codes.iter().map(|c| c.to_string()).collect();
        let codes = if codes.is_empty() {
            "none: the driver reports no error".to_string()
        } else {
            codes.join(", ")
        };
        writeln!(f, "  codes:    {codes}")?;
        writeln!(f, "  trigger:  {}", self.trigger)?;
        writeln!(f, "  on H200:  {}", self.seen)?;
        writeln!(f, "  graphsmith reports: {}", self.reports)?;
        writeln!(f, "  fix:      {}", self.fix)?;
        write!(f, "  reproduced by: {}", self.test)
    }
}

/// Every code the catalogue mentions.
pub fn codes() -> Vec<Code> {
    let mut all: Vec<Code> = Vec::new();
    for e in ENTRIES {
        for c in e.codes {
            if !all.contains(c) {
                all.push(*c);
            }
        }
    }
    all.sort_by_key(|c| c.number);
    all
}

/// The entry with this id.
pub fn entry(id: &str) -> Option<&'static Entry> {
    ENTRIES.iter().find(|e| e.id == id)
}

/// The entry that best matches a failed (or refused, `code: None`) graphsmith operation: one
/// that lists the operation and the code; else the first whose first code is this code; else,
/// for a failure, one that lists the operation (an interop call reports its library's code).
pub fn classify(op: &str, code: Option<u32>) -> Option<&'static Entry> {
    let has = |e: &Entry| match code {
        Some(n) => e.codes.iter().any(|c| c.number == n),
        None => e.codes.is_empty(),
    };
    let listed = |e: &&Entry| e.ops.contains(&op);
    ENTRIES
        .iter()
        .find(|e| listed(e) && has(e))
        .or_else(|| {
            let n = code?;
            ENTRIES
                .iter()
                .find(|e| e.codes.first().is_some_and(|c| c.number == n))
        })
        .or_else(|| code.and(ENTRIES.iter().find(listed)))
}

/// What `graphsmith explain` found for a query.
#[derive(Debug, Serialize)]
pub struct Explanation {
    /// The code the query named, when it named one.
    pub code: Option<Code>,
    pub entries: Vec<&'static Entry>,
}

/// Looks up a CUDA error code (`900`), its driver or runtime name
/// (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, `cudaErrorStreamCaptureUnsupported`, any case) or
/// an entry id (`unjoined-fork`). `Err` says why nothing matched.
pub fn explain(query: &str) -> Result<Explanation, String> {
    let q = query.trim();
    if q.is_empty() {
        return Err("give a CUDA error code (900), its name (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cudaErrorStreamCaptureUnsupported) or a catalogue id".into());
    }
    if let Some(e) = ENTRIES.iter().find(|e| e.id.eq_ignore_ascii_case(q)) {
        return Ok(Explanation {
            code: None,
            entries: vec![e],
        });
    }
    let code = match q.parse::<u32>() {
        Ok(n) => codes().into_iter().find(|c| c.number == n),
        Err(_) => codes()
            .into_iter()
            .find(|c| c.driver.eq_ignore_ascii_case(q) || c.runtime.eq_ignore_ascii_case(q)),
    };
    let Some(code) = code else {
        let known: Vec<String> = codes()
            .iter()
            .map(|c| format!("{} {}", c.number, c.driver))
            .collect();
        return Err(format!(
            "'{q}' is not a code, name or id in graphsmith's failure catalogue; it knows {} and the ids listed in docs/failures.md",
            known.join(", ")
        ));
    };
    let entries = ENTRIES.iter().filter(|e| e.codes.contains(&code)).collect();
    Ok(Explanation {
        code: Some(code),
        entries,
    })
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(code) = &self.code {
            let n = self.entries.len();
            writeln!(
                f,
                "{code}, {}: {n} catalogue entr{}",
                code.runtime,
                if n == 1 { "y" } else { "ies" }
            )?;
        }
        for (i, e) in self.entries.iter().enumerate() {
            writeln!(f)?;
            write!(f, "{e}")?;
            if i + 1 < self.entries.len() {
                writeln!(f)?;
            }
        }
        Ok(())
    }
}

/// `docs/failures.md`, generated from [`ENTRIES`].
pub fn markdown() -> String {
    let mut out = String::from(entries::DOC_HEADER);
    out.push_str("\n| id | family | codes on H200 | title |\n|---|---|---|---|\n");
    for e in ENTRIES {
        let family = e
            .family
            .map_or("none (allowed)".to_string(), |f| f.to_string());
        let codes: Vec<String> = e.codes.iter().map(|c| c.number.to_string()).collect();
        let codes = if codes.is_empty() {
            "none".to_string()
        } else {
            codes.join(", ")
        };
        out.push_str(&format!(
            "| [`{}`](#{}) | {family} | {codes} | {} |\n",
            e.id, e.id, e.title
        ));
    }
    for e in ENTRIES {
        out.push_str(&format!("\n## {}\n\n**{}**\n\n", e.id, e.title));
        let codes: Vec<String> = e
            .codes
            .iter()
            .map(|c| format!("`{}` / `{}` ({})", c.driver, c.runtime, c.number))
            .collect();
        let codes = if codes.is_empty() {
            "none: the driver reports no error".to_string()
        } else {
            codes.join(", ")
        };
        let family = e
            .family
            .map_or("none (allowed)".to_string(), |f| f.to_string());
        out.push_str(&format!("- **Family**: {family}\n- **Codes**: {codes}\n"));
        out.push_str(&format!("- **Trigger**: {}\n", e.trigger));
        out.push_str(&format!("- **Seen on the H200**: {}\n", e.seen));
        out.push_str(&format!("- **graphsmith reports**: {}\n", e.reports));
        out.push_str(&format!("- **Fix**: {}\n", e.fix));
        out.push_str(&format!("- **Reproduced by**: `{}`\n", e.test));
    }
    out
}
