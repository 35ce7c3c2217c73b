//! A source location: the caller's line an error or a journal entry points to.

use std::fmt;
use std::panic::Location;

/// A source location (the caller's, taken with `#[track_caller]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SourceLine {
    pub file: &'static str,
    pub line: u32,
    pub column: u32,
}

impl SourceLine {
    /// The caller of the `#[track_caller]` function that calls this.
    #[track_caller]
    pub fn caller() -> Self {
        Location::caller().into()
    }
}

impl From<&'static Location<'static>> for SourceLine {
    fn from(l: &'static Location<'static>) -> Self {
        Self {
            file: l.file(),
            line: l.line(),
            column: l.column(),
        }
    }
}

impl fmt::Display for SourceLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}
