//! Launch geometry: grid, block and dynamic shared memory, checked against the device limits.

use graphsmith_model::Dim3;

use crate::context::Limits;

/// Grid, block and dynamic shared memory of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: Dim3,
    pub block: Dim3,
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// One thread per element, 256 threads per block.
    pub fn for_elements(n: u32) -> Self {
        Self {
            grid: Dim3::linear(n.div_ceil(256).max(1)),
            block: Dim3::linear(256),
            shared_mem_bytes: 0,
        }
    }

    /// Checks the geometry against the device limits.
    pub(crate) fn validate(&self, limits: &Limits) -> std::result::Result<(), String> {
        let (g, b) = (self.grid, self.block);
        let axes = ["x", "y", "z"];
        for (i, (gv, bv)) in [(g.x, b.x), (g.y, b.y), (g.z, b.z)].into_iter().enumerate() {
            if gv == 0 || bv == 0 {
                return Err(format!(
                    "grid {g} and block {b} must be at least 1 on every axis"
                ));
            }
            if bv > limits.max_block[i] {
                return Err(format!(
                    "block {b}: {} = {bv} exceeds the device's limit of {}",
                    axes[i], limits.max_block[i]
                ));
            }
            if gv > limits.max_grid[i] {
                return Err(format!(
                    "grid {g}: {} = {gv} exceeds the device's limit of {}",
                    axes[i], limits.max_grid[i]
                ));
            }
        }
        if b.volume() > limits.max_threads_per_block as u64 {
            return Err(format!(
                "block {b} has {} threads; this device allows at most {} per block",
                b.volume(),
                limits.max_threads_per_block
            ));
        }
        Ok(())
    }
}
