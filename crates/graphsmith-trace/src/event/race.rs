//! The records of races across graphs (crate::races): a race when found, the summary and the
//! whole launch sequence at exit.

use graphsmith_analysis::launch_order::{LaunchSequence, Race};
use serde::{Deserialize, Serialize};

/// What the injection library records for races across graphs (inside
/// [`crate::event::Event::Race`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "what", rename_all = "snake_case")]
pub enum RaceEvent {
    /// A race, when the launch that makes it is issued.
    Found(RaceFound),
    /// At exit: the counts and notes of the whole sequence.
    Summary(RaceSummary),
    /// At exit, with `--launches-out`: the whole sequence (one line), which `graphsmith trace`
    /// writes to the file.
    Sequence(RaceSequence),
}

impl RaceEvent {
    /// The process that recorded it.
    pub fn pid(&self) -> u32 {
        match self {
            RaceEvent::Found(f) => f.pid,
            RaceEvent::Summary(s) => s.pid,
            RaceEvent::Sequence(s) => s.pid,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaceFound {
    pub pid: u32,
    pub seq: u64,
    pub race: Box<Race>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaceSummary {
    pub pid: u32,
    pub seq: u64,
    pub launches: usize,
    /// Executables launched.
    pub graphs: usize,
    pub streams: usize,
    #[serde(default)]
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RaceSequence {
    pub pid: u32,
    pub seq: u64,
    pub sequence: LaunchSequence,
}
