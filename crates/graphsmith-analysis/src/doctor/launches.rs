//! The doctor over a launch sequence (`graphsmith doctor --launches FILE`): races between
//! launches of different executables ([`crate::launch_order`]), with the same exit-code rule as
//! hazards: certain races fail, possible ones only when strict.

use std::path::Path;

use serde_json::json;

use super::DoctorError;
use crate::launch_order::{self, LaunchReport, LaunchSequence};

/// What the doctor found in a launch sequence.
#[derive(Clone, Debug)]
pub struct LaunchFindings {
    pub report: LaunchReport,
}

/// Reads the launch sequence at `path` and checks it ([`analyse_launches_text`]).
pub fn analyse_launches_file(path: &Path) -> Result<LaunchFindings, DoctorError> {
    let text = std::fs::read_to_string(path).map_err(DoctorError::Read)?;
    analyse_launches_text(&text)
}

/// Checks the launch sequence in `text` (the `graphsmith-launches` JSON format).
pub fn analyse_launches_text(text: &str) -> Result<LaunchFindings, DoctorError> {
    let seq = LaunchSequence::from_json(text).map_err(DoctorError::Input)?;
    Ok(LaunchFindings {
        report: launch_order::check(&seq),
    })
}

impl LaunchFindings {
    /// Whether the sequence passes: no certain race, and with `strict` no possible one.
    pub fn passes(&self, strict: bool) -> bool {
        self.report.certain() == 0 && !(strict && self.report.possible() > 0)
    }

    /// 0 when the sequence passes, 1 otherwise (unreadable input is 2, decided by the caller).
    pub fn exit_code(&self, strict: bool) -> u8 {
        u8::from(!self.passes(strict))
    }

    /// The report as text, as `graphsmith doctor --launches` prints it.
    pub fn text(&self, file: &str, strict: bool) -> String {
        let verdict = if self.passes(strict) {
            "passes"
        } else {
            "fails"
        };
        format!(
            "{file}: launch sequence\n{}verdict: {verdict} (certain races fail{})\n",
            self.report.text(),
            if strict { ", possible ones too" } else { "" }
        )
    }

    /// The report as pretty-printed JSON: `file`, `format` (`launches`), `launches`,
    /// `graphs`, `streams`, `races` (each as [`launch_order::Race`] serializes), `race_counts`
    /// (`certain`, `possible`), `notes`, `strict` and `exit_code`.
    pub fn json(&self, file: &str, strict: bool) -> String {
        let r = &self.report;
        let report = json!({
            "file": file,
            "format": "launches",
            "launches": r.launches,
            "graphs": r.graphs,
            "streams": r.streams,
            "races": r.races,
            "race_counts": { "certain": r.certain(), "possible": r.possible() },
            "notes": r.notes,
            "strict": strict,
            "exit_code": self.exit_code(strict),
        });
        serde_json::to_string_pretty(&report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}
