//! Kernel arguments that record what they touch: values in one byte buffer, device buffers
//! with their direction, and the pointers handed to the driver under a borrow guard.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::Arc;

use smallvec::SmallVec;

use graphsmith_model::{Access, AccessMode};

use crate::context::{keep_id, Footprint, Keep};
use crate::memory::{Allocation, DeviceBuffer, Element, View, ViewMut};

/// Kernel arguments, in order. Device buffers passed by shared borrow are recorded as reads,
/// by mutable borrow as writes; the borrow lasts as long as the `Args`, so a buffer cannot be
/// written elsewhere while a launch of it is being built.
///
/// ```ignore
/// let args = Args::new().arg(&x).arg(&mut y).arg(2.0f32).arg(n);
/// ```
///
/// All values live in one byte buffer, so building arguments costs a few allocations however
/// many there are; the accesses and keep-alives are only materialised when a graph needs them.
pub struct Args<'a> {
    data: ArgData,
    _borrows: PhantomData<&'a mut ()>,
}

/// One pointer per argument value, as the driver takes them (`void**`), handed out under a
/// borrow of the values: while this guard lives they can be neither moved nor changed, so the
/// pointers stay valid; the borrow ends with the guard, without a manual `drop`.
pub(crate) struct ArgPointers<'a> {
    pointers: SmallVec<[*mut c_void; 8]>,
    _values: PhantomData<&'a mut ArgData>,
}

impl ArgPointers<'_> {
    /// The `void**` array for the driver.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut *mut c_void {
        self.pointers.as_mut_ptr()
    }
    /// The pointers as a slice.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [*mut c_void] {
        &mut self.pointers
    }
    /// The pointers, in argument order.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = *mut c_void> + '_ {
        self.pointers.iter().copied()
    }
}

/// What [`Args`] hold, without the borrows: kept by an executable after a per-node update.
pub(crate) struct ArgData {
    /// Every value, each starting at a multiple of 8 bytes.
    bytes: SmallVec<[u8; 64]>,
    /// (start, length) of each value in `bytes`.
    spans: SmallVec<[(usize, usize); 8]>,
    /// The buffers passed, with the range and direction of each.
    pub(crate) buffers: SmallVec<[BufferArg; 4]>,
}

/// A buffer argument: what it touches, and the allocation a graph must keep alive.
pub(crate) struct BufferArg {
    pub(crate) alloc: Arc<Allocation>,
    offset: u64,
    len: u64,
    mode: AccessMode,
    /// Accessed before the kernel's programmatic wait ([`BeforeWait`]).
    pub(crate) before_wait: bool,
}

impl Default for Args<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> Args<'a> {
    /// No arguments yet.
    pub fn new() -> Self {
        Self {
            data: ArgData {
                bytes: SmallVec::new(),
                spans: SmallVec::new(),
                buffers: SmallVec::new(),
            },
            _borrows: PhantomData,
        }
    }

    /// Appends one argument.
    #[allow(clippy::should_implement_trait)]
    pub fn arg(mut self, value: impl KernelArg<'a>) -> Self {
        value.push_to(&mut self);
        self
    }

    /// Appends one argument in place (what [`args!`](crate::args) uses: no move of `self`).
    pub fn push(&mut self, value: impl KernelArg<'a>) {
        value.push_to(self);
    }

    /// The values and buffers, for keeping after the borrows end.
    pub(crate) fn into_data(self) -> ArgData {
        self.data
    }

    pub(crate) fn push_bytes(&mut self, value: &[u8]) {
        self.data.push_bytes(value);
    }
    /// Number of arguments.
    pub(crate) fn len(&self) -> usize {
        self.data.len()
    }
    /// The bytes of each argument, in order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.data.values()
    }
    /// See [`ArgData::pointers`].
    pub(crate) fn pointers(&mut self) -> ArgPointers<'_> {
        self.data.pointers()
    }
    /// The pointers for the driver, with the buffers beside them (what a launch's
    /// [`LaunchFootprint`] reads, only if a capture needs it).
    pub(crate) fn pointers_and_buffers(&mut self) -> (ArgPointers<'_>, &[BufferArg]) {
        let data = &mut self.data;
        let buffers = &data.buffers[..];
        let base = data.bytes.as_mut_ptr();
        (pointers_into(base, &data.spans), buffers)
    }
    /// The memory the arguments touch after the kernel's programmatic wait (all of it for a
    /// kernel without one), for the model.
    pub(crate) fn take_accesses(&self) -> Vec<Access> {
        self.data.take_accesses()
    }
    /// The memory the arguments touch before the kernel's programmatic wait ([`BeforeWait`]).
    pub(crate) fn take_accesses_before_wait(&self) -> Vec<Access> {
        self.data.take_accesses_before_wait()
    }
    /// The allocations a graph using these arguments must keep alive.
    pub(crate) fn keep(&self) -> Vec<Keep> {
        self.data.keep()
    }

    fn push_buffer<T: Element>(
        &mut self,
        buffer: &DeviceBuffer<T>,
        start: usize,
        len: usize,
        mode: AccessMode,
    ) {
        let size = std::mem::size_of::<T>() as u64;
        let offset = start as u64 * size;
        self.push_bytes(&(buffer.alloc.ptr + offset).to_le_bytes());
        self.data.buffers.push(BufferArg {
            alloc: buffer.alloc.clone(),
            offset,
            len: len as u64 * size,
            mode,
            before_wait: false,
        });
    }

    /// Marks the last buffer pushed as accessed before the kernel's wait; with `then`, the
    /// kernel also accesses it so after its wait.
    fn mark_before_wait(&mut self, then: Option<AccessMode>) {
        let Some(last) = self.data.buffers.last_mut() else {
            return;
        };
        last.before_wait = true;
        if let Some(mode) = then {
            let after = BufferArg {
                alloc: last.alloc.clone(),
                offset: last.offset,
                len: last.len,
                mode,
                before_wait: false,
            };
            self.data.buffers.push(after);
        }
    }
}

impl ArgData {
    /// Appends one value's bytes, 8-byte aligned within the buffer.
    pub(crate) fn push_bytes(&mut self, value: &[u8]) {
        const ZEROS: [u8; 8] = [0; 8];
        let len = self.bytes.len();
        let start = len.next_multiple_of(8);
        self.bytes.extend_from_slice(&ZEROS[..start - len]);
        self.bytes.extend_from_slice(value);
        self.spans.push((start, value.len()));
    }

    /// Number of arguments.
    pub(crate) fn len(&self) -> usize {
        self.spans.len()
    }

    /// The bytes of each argument, in order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.spans
            .iter()
            .map(|&(start, len)| &self.bytes[start..start + len])
    }

    /// Pointers to each argument's bytes, as `cuLaunchKernel` and kernel nodes take them.
    /// The guard borrows `self` mutably, so the values can be neither moved nor changed while
    /// the pointers are in use.
    pub(crate) fn pointers(&mut self) -> ArgPointers<'_> {
        pointers_into(self.bytes.as_mut_ptr(), &self.spans)
    }

    /// The memory the arguments touch after the kernel's wait, for the model.
    pub(crate) fn take_accesses(&self) -> Vec<Access> {
        accesses(&self.buffers, false)
    }

    /// The memory the arguments touch before the kernel's wait, for the model.
    pub(crate) fn take_accesses_before_wait(&self) -> Vec<Access> {
        accesses(&self.buffers, true)
    }

    /// The allocations a graph using these arguments must keep alive.
    pub(crate) fn keep(&self) -> Vec<Keep> {
        self.buffers
            .iter()
            .map(|b| b.alloc.clone() as Keep)
            .collect()
    }
}

/// Pointers to each span's bytes from `base`, the start of the values' buffer, which the caller
/// borrows mutably for as long as the guard lives.
fn pointers_into<'a>(base: *mut u8, spans: &[(usize, usize)]) -> ArgPointers<'a> {
    let pointers = spans
        .iter()
        // SAFETY: every span lies inside the buffer `base` starts (push_bytes), so each offset
        // stays in bounds of the one allocation.
        .map(|&(start, _)| unsafe { base.add(start) } as *mut c_void)
        .collect();
    ArgPointers {
        pointers,
        _values: PhantomData,
    }
}

/// What a launch touches and what its graph must keep: its buffer arguments and the kernel's
/// module, read only when a capture needs them (nothing is built or cloned for an eager launch,
/// nor for a capture without journal that keeps them already).
pub(crate) struct LaunchFootprint<'a, M> {
    pub(crate) buffers: &'a [BufferArg],
    pub(crate) module: &'a Arc<M>,
    /// The kernel lets its dependents start only after its wait ([`Kernel::triggers_after_wait`]).
    pub(crate) triggers_after_wait: bool,
}

impl<'a, M> LaunchFootprint<'a, M> {
    /// The identities of what the launch's graph must keep ([`keep_id`]), in the order
    /// [`Footprint::each_keep`] names them, with nothing cloned: what a captured launch with the
    /// journal off compares with what this thread kept for the capture lately.
    pub(crate) fn keep_ids(&self) -> impl Iterator<Item = usize> + 'a {
        let module = keep_id(self.module);
        self.buffers
            .iter()
            .map(|b| keep_id(&b.alloc))
            .chain(std::iter::once(module))
    }
}

impl<M: std::any::Any + Send + Sync> Footprint for LaunchFootprint<'_, M> {
    fn each_keep(&self, f: &mut dyn FnMut(usize, &dyn Fn() -> Keep)) {
        for b in self.buffers {
            f(keep_id(&b.alloc), &|| b.alloc.clone() as Keep);
        }
        f(keep_id(self.module), &|| self.module.clone() as Keep);
    }

    fn accesses(&self) -> Vec<Access> {
        accesses(self.buffers, false)
    }

    fn accesses_before_wait(&self) -> Vec<Access> {
        accesses(self.buffers, true)
    }

    fn triggers_after_wait(&self) -> bool {
        self.triggers_after_wait
    }

    fn same_accesses(&self, built: &[Access]) -> bool {
        // Launches with accesses before their wait are built each time (never shared).
        !self.buffers.iter().any(|b| b.before_wait)
            && built.len() == self.buffers.len()
            && self.buffers.iter().zip(built).all(|(b, a)| {
                a.buffer == b.alloc.ptr
                    && a.offset == b.offset
                    && a.len == b.len
                    && a.mode == b.mode
                    && a.label == b.alloc.label
            })
    }
}

/// The accesses of `buffers` before (`before_wait`) or after the kernel's wait.
fn accesses(buffers: &[BufferArg], before_wait: bool) -> Vec<Access> {
    buffers
        .iter()
        .filter(|b| b.before_wait == before_wait)
        .map(BufferArg::access)
        .collect()
}

impl BufferArg {
    fn access(&self) -> Access {
        Access {
            buffer: self.alloc.ptr,
            label: self.alloc.label.clone(),
            offset: self.offset,
            len: self.len,
            mode: self.mode,
        }
    }
}

/// Something that can be passed to a kernel.
pub trait KernelArg<'a> {
    /// Appends the argument's bytes (and, for buffers, its access and keep-alive).
    fn push_to(self, args: &mut Args<'a>);
}

impl<'a, T: Element> KernelArg<'a> for &'a DeviceBuffer<T> {
    fn push_to(self, args: &mut Args<'a>) {
        args.push_buffer(self, 0, self.len(), AccessMode::Read);
    }
}

impl<'a, T: Element> KernelArg<'a> for &'a mut DeviceBuffer<T> {
    fn push_to(self, args: &mut Args<'a>) {
        let len = self.len();
        args.push_buffer(self, 0, len, AccessMode::Write);
    }
}

impl<'a, T: Element> KernelArg<'a> for View<'a, T> {
    fn push_to(self, args: &mut Args<'a>) {
        args.push_buffer(self.buffer, self.start, self.len, AccessMode::Read);
    }
}

impl<'a, T: Element> KernelArg<'a> for ViewMut<'a, T> {
    fn push_to(self, args: &mut Args<'a>) {
        args.push_buffer(self.buffer, self.start, self.len, AccessMode::Write);
    }
}

/// A buffer argument that a [programmatic](crate::Kernel::programmatic) kernel reads before its
/// programmatic wait (`griddepcontrol.wait`), so that the hazard checker orders that read only by
/// what has finished when the kernel may start (docs/doctor.md, "A trigger after the wait"):
/// `BeforeWait(&buf)` for a read, [`BeforeWait::then_write`] for a buffer read before the wait
/// and written after it. Passed like the buffer itself; a kernel without programmatic launch
/// starts after all earlier work anyway, and the checker treats it so.
pub struct BeforeWait<A>(pub A);

impl<'a, T: Element> BeforeWait<&'a mut DeviceBuffer<T>> {
    /// A buffer read before the wait and written after it.
    pub fn then_write(buffer: &'a mut DeviceBuffer<T>) -> BeforeWait<ReadThenWrite<'a, T>> {
        BeforeWait(ReadThenWrite(buffer))
    }
}

/// See [`BeforeWait::then_write`].
pub struct ReadThenWrite<'a, T: Element>(&'a mut DeviceBuffer<T>);

impl<'a, T: Element> KernelArg<'a> for BeforeWait<&'a DeviceBuffer<T>> {
    fn push_to(self, args: &mut Args<'a>) {
        args.push_buffer(self.0, 0, self.0.len(), AccessMode::Read);
        args.mark_before_wait(None);
    }
}

impl<'a, T: Element> KernelArg<'a> for BeforeWait<ReadThenWrite<'a, T>> {
    fn push_to(self, args: &mut Args<'a>) {
        let buffer = self.0 .0;
        args.push_buffer(buffer, 0, buffer.len(), AccessMode::Read);
        args.mark_before_wait(Some(AccessMode::Write));
    }
}

macro_rules! scalar_args {
    ($($t:ty),*) => { $(
        impl<'a> KernelArg<'a> for $t {
            fn push_to(self, args: &mut Args<'a>) {
                args.push_bytes(&self.to_le_bytes());
            }
        }
    )* };
}
scalar_args!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

/// Builds [`Args`] from a list: `args![&x, &mut y, 2.0f32, n]`.
#[macro_export]
macro_rules! args {
    ($($a:expr),* $(,)?) => {{
        #[allow(unused_mut)]
        let mut args = $crate::Args::new();
        $(args.push($a);)*
        args
    }};
}

#[cfg(test)]
mod tests {
    /// Packing a typical launch's arguments (up to eight values of up to 64 bytes in all) and
    /// handing the driver its pointers stay on the stack: no heap allocation per launch.
    #[test]
    fn packing_arguments_does_not_allocate() {
        let mut args = crate::args![1.5f32, 7u32, -2i64, 3u64, 4u8, 5u16, 6i32, 7.0f64];
        assert!(!args.data.bytes.spilled() && !args.data.spans.spilled());
        assert!(!args.data.buffers.spilled());
        let (mut pointers, buffers) = args.pointers_and_buffers();
        assert!(buffers.is_empty());
        assert!(!pointers.pointers.spilled());
        assert_eq!(pointers.as_mut_slice().len(), 8);
    }

    /// What a captured launch compares without cloning (`keep_ids`) names exactly what it keeps
    /// (`each_keep`), so a launch found all kept by the one is kept by the capture's record.
    #[test]
    fn keep_ids_name_what_each_keep_keeps() {
        use crate::context::{keep_id, Footprint};
        use std::sync::Arc;
        let module = Arc::new(7u64);
        let footprint = super::LaunchFootprint {
            buffers: &[],
            module: &module,
            triggers_after_wait: false,
        };
        let mut kept = Vec::new();
        footprint.each_keep(&mut |id, make| {
            assert_eq!(id, keep_id(&make()));
            kept.push(id);
        });
        assert_eq!(footprint.keep_ids().collect::<Vec<_>>(), kept);
        assert_eq!(kept, vec![Arc::as_ptr(&module) as usize]);
    }
}
