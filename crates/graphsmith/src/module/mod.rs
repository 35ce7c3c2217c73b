//! Layer 4, modules and kernels: images checked before the driver reads them, modules loaded as
//! libraries, kernels with their parameter layout, launch configuration and arguments.

mod args;
mod image;
mod kernel;
mod launch;
mod library;

pub use args::*;
pub(crate) use image::*;
pub use kernel::*;
pub use launch::*;
pub use library::*;
