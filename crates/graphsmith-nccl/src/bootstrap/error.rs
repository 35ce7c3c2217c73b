//! What can go wrong while the ranks find each other: each error names the peer (its address
//! and, once known, its rank), what was expected and what came.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// The other end of a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Its address.
    pub addr: SocketAddr,
    /// Its rank, once it said (rank 0 for a connection a rank made to rank 0).
    pub rank: Option<u32>,
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rank {
            Some(r) => write!(f, "rank {r} at {}", self.addr),
            None => write!(f, "{} (rank not yet known)", self.addr),
        }
    }
}

/// Four bytes as hex and, where printable, as text: `48 54 54 50 ("HTTP")`.
pub(crate) fn show_bytes(b: &[u8; 4]) -> String {
    let hex: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    let text: String = b
        .iter()
        .map(|&c| {
            if c.is_ascii_graphic() || c == b' ' {
                c as char
            } else {
                '.'
            }
        })
        .collect();
    format!("{} (\"{text}\")", hex.join(" "))
}

/// A failed bootstrap. Nothing waits without a deadline, so every failure ends as one of these.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The arguments cannot describe a run (world size 0, rank not below the world size).
    #[error("invalid bootstrap arguments: {0}")]
    InvalidArgs(String),
    /// Rank 0 could not listen.
    #[error("rank 0 cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// An address that does not resolve.
    #[error("cannot resolve the bootstrap address {addr:?}: {reason}")]
    Resolve {
        /// The address as given.
        addr: String,
        /// Why.
        reason: String,
    },
    /// A rank could not connect to rank 0 before its deadline.
    #[error(
        "rank {rank} could not connect to rank 0 at {addr} within {after:?} \
         (last attempt: {last}); is rank 0 running and listening there?"
    )]
    Connect {
        /// The rank that tried.
        rank: u32,
        /// Rank 0's address.
        addr: SocketAddr,
        /// How long it tried.
        after: Duration,
        /// The last attempt's error.
        last: std::io::Error,
    },
    /// Rank 0 waited for ranks that never arrived.
    #[error(
        "rank 0 timed out after {after:?} waiting for rank(s) {missing:?} of {world} to connect \
         to {addr} (arrived: {arrived:?})"
    )]
    MissingRanks {
        /// The ranks that did not say hello.
        missing: Vec<u32>,
        /// The ranks that did (rank 0 included).
        arrived: Vec<u32>,
        /// The world size.
        world: u32,
        /// Where rank 0 listened.
        addr: SocketAddr,
        /// How long it waited.
        after: Duration,
    },
    /// A connected peer did not send the expected message in time.
    #[error("timed out after {after:?} waiting for {peer} to send its {expected}")]
    PeerTimeout {
        /// Who was silent.
        peer: Peer,
        /// The message waited for.
        expected: &'static str,
        /// How long the wait was.
        after: Duration,
    },
    /// A peer closed its connection.
    #[error("{peer} closed the connection while its {expected} was expected")]
    Closed {
        /// Who closed.
        peer: Peer,
        /// The message waited for.
        expected: &'static str,
    },
    /// A peer speaks another protocol.
    #[error(
        "garbage from {peer}: expected a {expected} frame starting with the magic \"GSNC\" \
         (47 53 4e 43), got {}; is something else connecting to this port?",
        show_bytes(got)
    )]
    Garbage {
        /// Who sent it.
        peer: Peer,
        /// The message waited for.
        expected: &'static str,
        /// The first four bytes that came.
        got: [u8; 4],
    },
    /// A peer speaks another version of the protocol (another build of graphsmith-nccl).
    #[error(
        "protocol version mismatch: {peer} speaks version {theirs}, this process speaks \
         {ours}; run the same build of graphsmith-nccl on every rank"
    )]
    Version {
        /// Who.
        peer: Peer,
        /// Its version.
        theirs: u16,
        /// Ours.
        ours: u16,
    },
    /// A frame longer than the protocol allows.
    #[error("{peer} sent a frame of {len} bytes; at most {max} are allowed")]
    TooLarge {
        /// Who.
        peer: Peer,
        /// The length it announced.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// A well-formed frame of the wrong kind or shape.
    #[error("{peer} sent {got} where its {expected} was expected")]
    Unexpected {
        /// Who.
        peer: Peer,
        /// The message waited for.
        expected: &'static str,
        /// What came.
        got: String,
    },
    /// The ranks disagree on the world size.
    #[error("world size mismatch: rank {rank} (at {addr}) says {theirs}, rank 0 says {ours}")]
    WorldMismatch {
        /// The rank that disagrees.
        rank: u32,
        /// Its address.
        addr: SocketAddr,
        /// Its world size.
        theirs: u32,
        /// Rank 0's.
        ours: u32,
    },
    /// Two connections claimed the same rank.
    #[error("duplicate rank {rank}: first from {first}, again from {second}")]
    DuplicateRank {
        /// The rank claimed twice.
        rank: u32,
        /// The first connection's address.
        first: SocketAddr,
        /// The second's.
        second: SocketAddr,
    },
    /// A peer claimed a rank outside `1..world`.
    #[error(
        "rank out of range: {addr} says it is rank {rank}, but the world has ranks 0..{world} \
         and rank 0 is the listener"
    )]
    RankOutOfRange {
        /// The rank claimed.
        rank: u32,
        /// The world size.
        world: u32,
        /// Who claimed it.
        addr: SocketAddr,
    },
    /// Rank 0 refused this rank, or called the run off.
    #[error("{by} refused this rank: {reason}")]
    Rejected {
        /// Rank 0.
        by: Peer,
        /// Its reason.
        reason: String,
    },
    /// A barrier or proposal from another run (another rank 0).
    #[error(
        "{peer} belongs to another run: its token is {theirs:#018x}, this run's is {ours:#018x}"
    )]
    TokenMismatch {
        /// Who.
        peer: Peer,
        /// Its token.
        theirs: u64,
        /// Ours.
        ours: u64,
    },
    /// The ranks proposed different things (rank 0's explanation).
    #[error("the ranks disagree: {reason}")]
    Disagreement {
        /// Which ranks differ and how.
        reason: String,
    },
    /// A socket call failed.
    #[error("{op} with {peer} failed: {source}")]
    Io {
        /// The peer.
        peer: Peer,
        /// The call.
        op: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
}
