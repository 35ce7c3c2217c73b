//! The memory map of a read-back graph: regions of device memory known by name (PyTorch's
//! caching-allocator blocks, the allocations a tracer saw), finer than the driver's allocations.

/// A region of device memory: `[base, base + size)` with a label for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// The first byte.
    pub base: u64,
    /// Its length in bytes (never 0 in a [`MemoryMap`]).
    pub size: u64,
    /// A human name, e.g. `block 0x7f0000200000+4096 (segment 0x7f0000000000)`; may be empty.
    pub label: String,
}

impl Region {
    /// A region.
    pub fn new(base: u64, size: u64, label: impl Into<String>) -> Region {
        Region {
            base,
            size,
            label: label.into(),
        }
    }

    /// The byte after its last, saturating.
    pub fn end(&self) -> u64 {
        self.base.saturating_add(self.size)
    }

    /// Whether it holds `address`.
    pub fn holds(&self, address: u64) -> bool {
        self.base <= address && address - self.base < self.size
    }
}

/// Regions sorted by base, none empty, none overlapping another.
///
/// An address that falls in a region is an access of that region (the conversion's kernel
/// arguments, copies and sets); an address in none is left to the driver's allocations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryMap {
    regions: Vec<Region>,
    dropped: usize,
}

impl MemoryMap {
    /// The map of `regions`. Empty regions are left out, and so is a region that overlaps one
    /// with a lower base (or the same base and a larger size): counted in
    /// [`MemoryMap::dropped`], never a panic.
    pub fn new(regions: impl IntoIterator<Item = Region>) -> MemoryMap {
        let mut all: Vec<Region> = regions.into_iter().collect();
        let before = all.len();
        all.retain(|r| r.size > 0);
        all.sort_by(|a, b| a.base.cmp(&b.base).then(b.size.cmp(&a.size)));
        let mut kept: Vec<Region> = Vec::with_capacity(all.len());
        for r in all {
            if kept.last().is_some_and(|last| r.base < last.end()) {
                continue;
            }
            kept.push(r);
        }
        MemoryMap {
            dropped: before - kept.len(),
            regions: kept,
        }
    }

    /// The regions, sorted by base.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// Regions left out by [`MemoryMap::new`] (empty, or overlapping another).
    pub fn dropped(&self) -> usize {
        self.dropped
    }

    /// Whether the map holds no region.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// The index of the region holding `address`.
    pub fn find(&self, address: u64) -> Option<usize> {
        let after = self.regions.partition_point(|r| r.base <= address);
        let i = after.checked_sub(1)?;
        self.regions[i].holds(address).then_some(i)
    }

    /// Whether `[base, base + size)` overlaps a region.
    pub fn overlaps(&self, base: u64, size: u64) -> bool {
        let end = base.saturating_add(size);
        let first_after = self.regions.partition_point(|r| r.base < end);
        self.regions[..first_after]
            .last()
            .is_some_and(|r| r.end() > base && size > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_region_holding_an_address_and_drops_bad_regions() {
        let map = MemoryMap::new([
            Region::new(0x2000, 0x100, "b"),
            Region::new(0x1000, 0x100, "a"),
            Region::new(0x1080, 0x100, "overlaps a"),
            Region::new(0x3000, 0, "empty"),
        ]);
        assert_eq!(map.dropped(), 2);
        let labels: Vec<&str> = map.regions().iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["a", "b"]);
        assert_eq!(map.find(0x1000), Some(0));
        assert_eq!(map.find(0x10ff), Some(0));
        assert_eq!(map.find(0x1100), None);
        assert_eq!(map.find(0x2050), Some(1));
        assert_eq!(map.find(0xfff), None);
        assert_eq!(map.find(u64::MAX), None);
        assert!(map.overlaps(0x0, 0x1001));
        assert!(!map.overlaps(0x0, 0x1000));
        assert!(map.overlaps(0x1100 - 1, 0x10));
        assert!(!map.overlaps(0x1100, 0xf00));
        assert!(map.overlaps(0x1100, 0xf01));
        assert!(!map.overlaps(0x1050, 0));
        assert!(MemoryMap::default().is_empty());
    }
}
