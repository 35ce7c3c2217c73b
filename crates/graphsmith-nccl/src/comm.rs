//! `Communicator`: one rank's NCCL communicator on one device, made from a bootstrapped
//! [`Session`], shared (`Arc`) with every graph and executable captured with it, and destroyed
//! only after the last of them (so no executable ever launches a collective of a destroyed
//! communicator). Its collectives, issued as journaled library calls, are in `issue.rs`; its
//! captures (plan checked across ranks first) in `capture.rs`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use graphsmith::{Context, Stream};

use crate::bootstrap::Session;
use crate::collective::{Collective, ReduceOp};
use crate::error::{NcclError, Result};
use crate::ffi::{Nccl, RawComm, RawUniqueId, IN_PROGRESS, SUCCESS};

pub(crate) struct CommInner {
    pub(crate) raw: RawComm,
    pub(crate) rank: u32,
    pub(crate) world: u32,
    pub(crate) nccl: &'static Nccl,
    pub(crate) ctx: Context,
    /// Held across every NCCL call on `raw`: NCCL does not allow two threads to use one
    /// communicator at once.
    pub(crate) calls: Mutex<()>,
    /// While a capture of this communicator runs: the collectives issued so far.
    pub(crate) issued: Mutex<Option<Vec<Collective>>>,
}

// SAFETY: `raw` is an NCCL communicator, which any thread may use as long as no two use it at
// once; every call on it holds `calls`. Nothing else in `CommInner` is thread-bound.
unsafe impl Send for CommInner {}
// SAFETY: as above: shared access only reaches `raw` through `calls`.
unsafe impl Sync for CommInner {}

impl CommInner {
    pub(crate) fn describe(&self) -> String {
        format!(
            "rank {} of {} on device {}",
            self.rank,
            self.world,
            self.ctx.ordinal()
        )
    }
}

impl CommInner {
    /// Destroys the communicator (once: `raw` is null afterwards) and returns NCCL's result.
    fn destroy_raw(&mut self) -> std::ffi::c_int {
        if self.raw.is_null() {
            return SUCCESS;
        }
        // SAFETY: `raw` came from ncclCommInitRank and is destroyed once (it is nulled next),
        // after every graph and executable that referenced it: they hold this `Arc`, and
        // `&mut self` means none is left.
        let r = unsafe { (self.nccl.comm_destroy)(self.raw) };
        self.raw = std::ptr::null_mut();
        r
    }
}

impl Drop for CommInner {
    fn drop(&mut self) {
        // A failure cannot be reported from `drop`; `Communicator::destroy` returns it.
        let _ = self.destroy_raw();
    }
}

/// One rank's NCCL communicator. Cloning shares it; graphs and executables captured with it
/// hold a clone, so it outlives all of them.
#[derive(Clone)]
pub struct Communicator {
    pub(crate) inner: Arc<CommInner>,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Communicator({})", self.inner.describe())
    }
}

/// A fresh NCCL unique id (rank 0 calls this and hands the bytes out through the bootstrap).
pub fn unique_id() -> Result<crate::bootstrap::UniqueId> {
    let nccl = Nccl::get()?;
    let mut id = RawUniqueId { internal: [0; 128] };
    // SAFETY: ncclGetUniqueId writes one ncclUniqueId through a valid pointer.
    let r = unsafe { (nccl.get_unique_id)(&mut id) };
    if r != SUCCESS {
        return Err(NcclError::Call {
            call: "ncclGetUniqueId",
            on: "rank 0".into(),
            result: nccl.describe(r),
        });
    }
    Ok(crate::bootstrap::UniqueId(id.internal))
}

impl Communicator {
    /// Joins the communicator of `session`'s run on `ctx`'s device (`ncclCommInitRank`; every
    /// rank must call it, it returns when all have).
    pub fn new(ctx: &Context, session: &Session) -> Result<Communicator> {
        let nccl = Nccl::get()?;
        let on = format!(
            "rank {} of {} on device {}",
            session.rank(),
            session.world(),
            ctx.ordinal()
        );
        // NCCL uses the CUDA runtime, which takes the device of the thread's current context:
        // synchronising binds the context's primary context to this thread.
        ctx.synchronize()?;
        let mut raw: RawComm = std::ptr::null_mut();
        let id = RawUniqueId {
            internal: session.unique_id().0,
        };
        let (world, rank) = (session.world() as i32, session.rank() as i32);
        // SAFETY: `raw` is a valid out-pointer; the id is the 128 bytes rank 0's
        // ncclGetUniqueId made; world and rank were checked by the bootstrap.
        let r = unsafe { (nccl.comm_init_rank)(&mut raw, world, id, rank) };
        if r != SUCCESS || raw.is_null() {
            return Err(NcclError::Call {
                call: "ncclCommInitRank",
                on,
                result: nccl.describe(r),
            });
        }
        Ok(Communicator {
            inner: Arc::new(CommInner {
                raw,
                rank: session.rank(),
                world: session.world(),
                nccl,
                ctx: ctx.clone(),
                calls: Mutex::new(()),
                issued: Mutex::new(None),
            }),
        })
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.inner.rank
    }

    /// The number of ranks.
    pub fn world(&self) -> u32 {
        self.inner.world
    }

    /// The context (device) it runs on.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// `rank R of W on device D`.
    pub fn describe(&self) -> String {
        self.inner.describe()
    }

    /// Where libnccl was loaded from, and its version code (e.g. 22707).
    pub fn library(&self) -> (&'static str, Option<i32>) {
        (self.inner.nccl.path.as_str(), self.inner.nccl.version())
    }

    /// Fails when NCCL reports an asynchronous error on this communicator (a peer died, a
    /// network error, a timeout); call after synchronising a stream that ran its collectives.
    pub fn check_async(&self) -> Result<()> {
        let _guard = self.inner.calls.lock();
        let mut code = SUCCESS;
        // SAFETY: a live communicator and a valid out-pointer.
        let r = unsafe { (self.inner.nccl.comm_get_async_error)(self.inner.raw, &mut code) };
        let nccl = self.inner.nccl;
        if r != SUCCESS {
            return Err(NcclError::Call {
                call: "ncclCommGetAsyncError",
                on: self.describe(),
                result: nccl.describe(r),
            });
        }
        if code != SUCCESS && code != IN_PROGRESS {
            return Err(NcclError::Async {
                on: self.describe(),
                result: nccl.describe(code),
            });
        }
        Ok(())
    }

    /// The warm-up NCCL advises before capturing: one small all-reduce run eagerly on `stream`
    /// and waited for, so NCCL's lazy setup (connections, buffers) is done outside any capture.
    pub fn warm_up(&self, stream: &Stream) -> Result<()> {
        let ctx = self.context();
        let mut buf = ctx.alloc::<f32>("nccl warm-up", 1)?;
        stream.upload(&mut buf, &[1.0])?;
        self.all_reduce_in_place(stream, &mut buf, ReduceOp::Sum)?;
        stream.synchronize()?;
        self.check_async()?;
        let got = stream.download(&buf)?;
        let want = self.world() as f32;
        if got.first() != Some(&want) {
            return Err(NcclError::Async {
                on: self.describe(),
                result: format!(
                    "the warm-up all-reduce of 1.0 on each rank gave {got:?}, not {want}"
                ),
            });
        }
        Ok(())
    }

    /// Destroys the communicator now (`ncclCommDestroy`) and returns its result; refused while
    /// graphs or executables captured with it (or other clones) still hold it.
    pub fn destroy(self) -> Result<()> {
        let on = self.describe();
        let inner = Arc::try_unwrap(self.inner).map_err(|still| NcclError::StillInUse {
            on: on.clone(),
            users: Arc::strong_count(&still) - 1,
        })?;
        let mut inner = inner;
        let r = inner.destroy_raw();
        let nccl = inner.nccl;
        drop(inner);
        if r != SUCCESS {
            return Err(NcclError::Call {
                call: "ncclCommDestroy",
                on,
                result: nccl.describe(r),
            });
        }
        Ok(())
    }
}

/// How long ranks wait for each other in the checks before a capture, by default.
pub const DEFAULT_AGREE_TIMEOUT: Duration = Duration::from_secs(60);
