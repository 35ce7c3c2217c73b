//! Layer 4, modules and kernels: images checked before the driver reads them, modules loaded as
//! libraries, kernels with their parameter layout, launch configuration and arguments.

mod image;
mod kernel;

pub(crate) use image::*;
pub use kernel::*;
