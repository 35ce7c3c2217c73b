//! `NcclError`: every failure of graphsmith-nccl, naming the call, the rank and the buffer.

use crate::bootstrap::BootstrapError;

/// libnccl could not be found or loaded: every place looked and every file tried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibraryMissing {
    /// The places searched, in order.
    pub looked: Vec<String>,
    /// Each library that was found but failed, or the explicit path that does not exist, with why.
    pub tried: Vec<String>,
}

impl std::fmt::Display for LibraryMissing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lib = &crate::library::NCCL;
        write!(
            f,
            "{} was not found or could not be loaded: set {} to the library (or its \
             directory), or {}. Looked in: {}",
            lib.soname,
            lib.env_var,
            lib.install,
            self.looked.join(", ")
        )?;
        if !self.tried.is_empty() {
            write!(f, ". Tried: {}", self.tried.join("; "))?;
        }
        Ok(())
    }
}

impl std::error::Error for LibraryMissing {}

/// A failure of graphsmith-nccl.
#[derive(Debug, thiserror::Error)]
pub enum NcclError {
    /// libnccl is missing.
    #[error("{0}")]
    Library(LibraryMissing),
    /// The ranks could not find each other, or disagree.
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    /// A graphsmith (CUDA) operation failed.
    #[error(transparent)]
    Cuda(Box<graphsmith::Error>),
    /// An NCCL call failed outside a stream operation.
    #[error("{call} ({on}) failed: {result}")]
    Call {
        /// The NCCL function.
        call: &'static str,
        /// The communicator or rank, e.g. `rank 1 of 2 on device 1`.
        on: String,
        /// NCCL's result code, name and description.
        result: String,
    },
    /// A collective NCCL refused.
    #[error("'{label}' on {on} failed: {result}")]
    Collective {
        /// The collective's label, e.g. `nccl all_reduce(sum, f32 x 4096)`.
        label: String,
        /// The communicator.
        on: String,
        /// NCCL's result code, name and description.
        result: String,
        /// The stream operation that carried it (names the stream and the caller's line).
        source: Box<graphsmith::Error>,
    },
    /// A buffer of the wrong length for a collective.
    #[error("'{label}': buffer '{buffer}' has {len} elements, {expected} expected ({why})")]
    Length {
        /// The collective's label.
        label: String,
        /// The buffer's label.
        buffer: String,
        /// Its length.
        len: usize,
        /// The length the collective needs.
        expected: usize,
        /// Why (e.g. `count x world size 2`).
        why: String,
    },
    /// What a capture issued differs from the plan every rank agreed on.
    #[error(
        "capture '{capture}' on rank {rank} issued {captured} but its plan (checked against the \
         other ranks) declared {declared}; declare exactly the collectives the capture issues"
    )]
    NotAsPlanned {
        /// The capture's label.
        capture: String,
        /// This rank.
        rank: u32,
        /// The plan's collectives.
        declared: String,
        /// What was issued.
        captured: String,
    },
    /// The ranks are about to capture different collectives (they would hang in the graph).
    #[error("capture '{capture}' differs between ranks, so nothing was captured: {reason}")]
    CaptureDiffers {
        /// The capture's label.
        capture: String,
        /// Rank 0's explanation: the first differing collective and the ranks.
        reason: String,
    },
    /// The communicator reported an asynchronous error (a peer failed or a timeout hit).
    #[error("communicator {on} has an asynchronous error: {result}")]
    Async {
        /// The communicator.
        on: String,
        /// NCCL's result.
        result: String,
    },
    /// `Communicator::destroy` while executables still use the communicator.
    #[error(
        "communicator {on} is still used by {users} other handle(s) (executables or graphs \
         captured with it); drop them first"
    )]
    StillInUse {
        /// The communicator.
        on: String,
        /// How many other owners it has.
        users: usize,
    },
}

impl From<graphsmith::Error> for NcclError {
    fn from(e: graphsmith::Error) -> Self {
        NcclError::Cuda(Box::new(e))
    }
}

/// `Result` with [`NcclError`].
pub type Result<T> = std::result::Result<T, NcclError>;
