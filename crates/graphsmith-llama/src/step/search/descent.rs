//! Coordinate descent over one bucket's launch choices, apart from how candidates are timed:
//! from the rules' choices, for each key ([`keys`], asked again after every change), each
//! direction ([`directions`]) is walked while its steps win; a key whose direction won skips its
//! other direction (the other side of the value it came from). The duel is the caller's: on the
//! device it captures the candidate and times it against the incumbent; in the tests it is a
//! cost model.

use super::candidates::{directions, keys, Key, Verdict};
use crate::step::buckets::BucketFacts;
use crate::step::tuning::Tuning;

/// What a descent found.
#[derive(Clone, Debug, PartialEq)]
pub struct Descent {
    /// The choices that won every duel they took part in (the rules' when none won).
    pub tuning: Tuning,
    /// Duels fought.
    pub duels: usize,
    /// Whether the time ran out before every key was tried.
    pub late: bool,
    /// The incumbent's time in the last duel (`None` without duels).
    pub last: Option<f64>,
    /// Candidates the duel could not time (`None` from it), with the key they changed.
    pub skipped: Vec<(Key, Tuning)>,
}

/// Walks the keys of `f` from the rules' choices. `duel(incumbent, candidate)` times the
/// candidate against the incumbent (`Ok(None)`: the candidate cannot run; its direction ends);
/// a winning candidate becomes the incumbent. `out_of_time()` is asked before each duel.
pub fn descend<E>(
    f: &BucketFacts,
    mut duel: impl FnMut(&Tuning, &Tuning) -> Result<Option<Verdict>, E>,
    mut out_of_time: impl FnMut() -> bool,
) -> Result<Descent, E> {
    let mut d = Descent {
        tuning: Tuning::default(),
        duels: 0,
        late: false,
        last: None,
        skipped: Vec::new(),
    };
    let mut tried: Vec<Key> = Vec::new();
    'keys: while let Some(key) = keys(f, &d.tuning).into_iter().find(|k| !tried.contains(k)) {
        tried.push(key);
        for direction in directions(f, &d.tuning, key) {
            let mut won = false;
            for candidate in direction {
                if out_of_time() {
                    d.late = true;
                    break 'keys;
                }
                let Some(v) = duel(&d.tuning, &candidate)? else {
                    d.skipped.push((key, candidate));
                    break;
                };
                d.duels += 1;
                if !v.wins {
                    d.last = Some(v.incumbent);
                    break;
                }
                (d.tuning, d.last, won) = (candidate, Some(v.candidate), true);
            }
            if won {
                break;
            }
        }
    }
    Ok(d)
}
