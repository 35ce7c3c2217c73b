//! What the running GPU and driver are and which graph features they support, found by trying
//! each feature on a tiny graph rather than by reading a version table.

use cudarc::driver::sys;
use serde::Serialize;

use crate::context::Context;
use crate::driver::{self, Failure};
use crate::error::{Result, SourceLine};

mod features;

/// One feature and whether it worked here.
#[derive(Clone, Debug, Serialize)]
pub struct Feature {
    pub name: &'static str,
    pub supported: bool,
    /// How it was tested, or the CUDA code that refused it.
    pub detail: String,
}

/// The device, the driver and the graph features they support.
#[derive(Clone, Debug, Serialize)]
pub struct Probe {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub multiprocessors: i32,
    pub total_memory_bytes: usize,
    pub free_memory_bytes: usize,
    /// `cuDriverGetVersion`, e.g. 13000 for CUDA 13.0.
    pub driver_version: i32,
    /// `cudaRuntimeGetVersion` of the libcudart found on the library path, if any.
    pub runtime_version: Option<i32>,
    /// The CUDA API version graphsmith's bindings were generated for.
    pub bindings_version: i32,
    pub features: Vec<Feature>,
}

/// Formats a CUDA version number: 13000 -> "13.0".
pub fn version_text(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

fn runtime_version() -> Option<i32> {
    use cudarc::runtime::sys as rt;
    // SAFETY: only tries to open the library.
    if !unsafe { rt::is_culib_present() } {
        return None;
    }
    let mut v = 0;
    // SAFETY: the library is present; v is a valid out pointer.
    let rc = unsafe { rt::cudaRuntimeGetVersion(&mut v) };
    (rc == rt::cudaError::cudaSuccess).then_some(v)
}

/// Probes device `ordinal`.
#[track_caller]
pub fn probe(ordinal: usize) -> Result<Probe> {
    let at = SourceLine::caller();
    let ctx = Context::new(ordinal)?;
    let fail = |f: Failure| f.on(ctx.object(), "probe", at);
    let device = ctx.device();
    // SAFETY: device is the context's device (from cuDeviceGet).
    let name = unsafe { driver::device_name(device) }.map_err(fail)?;
    // SAFETY: device is the context's device (from cuDeviceGet).
    let attr =
        |a: sys::CUdevice_attribute| unsafe { driver::device_attribute(device, a) }.map_err(fail);
    use sys::CUdevice_attribute as A;
    let cc = (
        attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    );
    let multiprocessors = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    // SAFETY: the driver is initialised (a context exists).
    let driver_version = unsafe { driver::driver_version() }.map_err(fail)?;
    let (free, total) = ctx.memory_info()?;
    let features = features::all(&ctx)?;
    Ok(Probe {
        ordinal,
        name,
        compute_capability: cc,
        multiprocessors,
        total_memory_bytes: total,
        free_memory_bytes: free,
        driver_version,
        runtime_version: runtime_version(),
        bindings_version: 13000,
        features,
    })
}

impl Feature {
    pub(crate) fn from_trial(
        name: &'static str,
        how: &str,
        trial: std::result::Result<(), Failure>,
    ) -> Self {
        match trial {
            Ok(()) => Feature {
                name,
                supported: true,
                detail: how.to_string(),
            },
            Err(f) => Feature {
                name,
                supported: false,
                detail: format!("{} returned {}", f.call, f.code),
            },
        }
    }
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "GPU {}: {}", self.ordinal, self.name)?;
        writeln!(
            f,
            "  compute capability  {}.{}",
            self.compute_capability.0, self.compute_capability.1
        )?;
        writeln!(f, "  multiprocessors     {}", self.multiprocessors)?;
        writeln!(
            f,
            "  memory              {:.1} GiB free of {:.1} GiB",
            self.free_memory_bytes as f64 / (1u64 << 30) as f64,
            self.total_memory_bytes as f64 / (1u64 << 30) as f64
        )?;
        writeln!(
            f,
            "  driver (CUDA API)   {}",
            version_text(self.driver_version)
        )?;
        match self.runtime_version {
            Some(v) => writeln!(f, "  runtime (cudart)    {}", version_text(v))?,
            None => writeln!(
                f,
                "  runtime (cudart)    not found on the library path (graphsmith does not need it)"
            )?,
        }
        writeln!(
            f,
            "  bindings            CUDA {}",
            version_text(self.bindings_version)
        )?;
        writeln!(f, "  graph features (each tried on a tiny graph):")?;
        for feat in &self.features {
            let mark = if feat.supported { "yes" } else { "no " };
            writeln!(f, "    {mark}  {:<22} {}", feat.name, feat.detail)?;
        }
        Ok(())
    }
}
