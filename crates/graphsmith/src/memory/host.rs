//! Page-locked (pinned) host memory with shared ownership, the host side of copies that run
//! asynchronously, on a copy engine, beside kernels: a graph's copy node or a stream's copy keeps
//! the allocation alive like a device buffer's, so no graph copies from freed host memory.

use std::marker::PhantomData;
use std::sync::Arc;

use graphsmith_model::{Access, AccessMode};

use crate::context::Context;
use crate::driver::{self, Failure};
use crate::error::{Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};
use crate::memory::{checked_bytes, DeviceBuffer, Element};

/// One page-locked host allocation (`cuMemHostAlloc`). Shared (`Arc`) between a [`HostBuffer`]
/// and every graph, capture and executable that copies from or into it; freed when the last of
/// them drops.
pub(crate) struct HostAllocation {
    pub ptr: *mut u8,
    pub label: String,
    pub ctx: Context,
}

// SAFETY: the pointer is page-locked memory owned by this allocation alone; the struct never
// reads or writes through it (HostBuffer does, under Rust's borrow rules), and the driver allows
// freeing it from any thread.
unsafe impl Send for HostAllocation {}
// SAFETY: as above; no method takes `&self` and touches the memory.
unsafe impl Sync for HostAllocation {}

impl Drop for HostAllocation {
    fn drop(&mut self) {
        let ptr = std::mem::replace(&mut self.ptr, std::ptr::null_mut());
        if ptr.is_null() {
            return;
        }
        // No executable can still use ptr: each holds an Arc to this allocation and waits for
        // its own work before releasing it; the free synchronises the context first, for copies
        // issued eagerly on streams. While a capture runs the free waits until it ends.
        let label = &self.label;
        self.ctx.destroy(
            || ObjectRef::new(ObjectKind::Buffer, label),
            crate::context::Destroy::FreeHost(ptr),
        );
    }
}

/// A typed buffer of `len` elements of page-locked host memory, with a label: the host side of
/// [`crate::Graph::memcpy_from_host`], [`crate::Graph::memcpy_to_host`],
/// [`crate::Stream::copy_from_host`] and [`crate::Stream::copy_to_host`].
///
/// Its contents are read and written by copy ([`HostBuffer::write`], [`HostBuffer::to_vec`]),
/// never through a Rust reference: a copy on the device may change them at any time until its
/// stream is synchronised, so read them after that. Like [`DeviceBuffer`], it is not `Clone`;
/// graphs keep the memory alive by sharing the allocation.
pub struct HostBuffer<T: Element> {
    pub(crate) alloc: Arc<HostAllocation>,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Element> std::fmt::Debug for HostBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "HostBuffer '{}' ({} x {}, pinned at {:p})",
            self.alloc.label,
            self.len,
            std::any::type_name::<T>(),
            self.alloc.ptr
        )
    }
}

impl<T: Element> HostBuffer<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the buffer holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }
    /// The label given at allocation.
    pub fn label(&self) -> &str {
        &self.alloc.label
    }
    /// The host address (for interop and reports; graphsmith keeps ownership).
    pub fn host_ptr(&self) -> *const T {
        self.alloc.ptr.cast_const().cast()
    }
    pub(crate) fn object(&self) -> ObjectRef {
        ObjectRef::new(ObjectKind::Buffer, &self.alloc.label)
    }

    /// Copies `values` into elements `offset..offset + values.len()`. Copies still running on
    /// the device into or out of this buffer must have finished (synchronise their stream).
    #[track_caller]
    pub fn write(&mut self, offset: usize, values: &[T]) -> Result<()> {
        let at = SourceLine::caller();
        self.check_range(offset, values.len(), "HostBuffer::write", at)?;
        // SAFETY: offset + values.len() <= len (checked), so the range lies in the allocation,
        // which `&mut self` lets no other Rust code touch; `values` is a distinct Rust slice.
        unsafe {
            std::ptr::copy_nonoverlapping(
                values.as_ptr(),
                self.alloc.ptr.cast::<T>().add(offset),
                values.len(),
            )
        };
        Ok(())
    }

    /// Elements `offset..offset + len`, copied out. Copies still running on the device into
    /// this buffer must have finished (synchronise their stream).
    #[track_caller]
    pub fn read(&self, offset: usize, len: usize) -> Result<Vec<T>> {
        let at = SourceLine::caller();
        self.check_range(offset, len, "HostBuffer::read", at)?;
        let mut out = Vec::with_capacity(len);
        // SAFETY: the range lies in the allocation (checked); `out` has room for `len`
        // elements, all written before set_len; T is valid for every bit pattern (Element).
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.alloc.ptr.cast::<T>().add(offset).cast_const(),
                out.as_mut_ptr(),
                len,
            );
            out.set_len(len);
        }
        Ok(out)
    }

    /// All elements, copied out (see [`HostBuffer::read`]).
    #[track_caller]
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.read(0, self.len)
    }

    fn check_range(
        &self,
        offset: usize,
        len: usize,
        op: &'static str,
        at: SourceLine,
    ) -> Result<()> {
        match range_error(self.label(), self.len, offset, len) {
            None => Ok(()),
            Some(reason) => Err(Error::new(
                ErrorKind::InvalidInput { reason },
                self.object(),
                op,
                at,
            )),
        }
    }
}

/// Why elements `offset..offset + len` do not lie in a host buffer of `size` elements.
fn range_error(label: &str, size: usize, offset: usize, len: usize) -> Option<String> {
    match offset.checked_add(len) {
        Some(end) if end <= size => None,
        _ => Some(format!(
            "elements {offset}..{} are out of bounds of host buffer '{label}' of {size} elements",
            offset as u128 + len as u128
        )),
    }
}

impl Context {
    /// Allocates `len` elements of page-locked host memory (`cuMemHostAlloc`, portable). The
    /// contents are not initialised; fill them with [`HostBuffer::write`] or a copy from the
    /// device. Page-locked memory is taken from the system's RAM and cannot be swapped: allocate
    /// what copies need, not more.
    #[track_caller]
    pub fn alloc_host<T: Element>(&self, label: &str, len: usize) -> Result<HostBuffer<T>> {
        let at = SourceLine::caller();
        let op = "Context::alloc_host";
        let me = ObjectRef::new(ObjectKind::Buffer, label);
        let bytes = checked_bytes::<T>(len, &me, op, at)?;
        let fail = |f: Failure| f.on(me.clone(), op, at);
        self.bind().map_err(fail)?;
        let mut ptr = std::ptr::null_mut();
        let journal = crate::context::Op::other(op, label, at);
        self.issue_unstreamed(journal, fail, || {
            // A zero-length buffer still gets a distinct address.
            // SAFETY: the context is current (bind above).
            ptr = unsafe { driver::mem_host_alloc(bytes.max(1)) }?;
            Ok(())
        })?;
        Ok(HostBuffer {
            alloc: Arc::new(HostAllocation {
                ptr,
                label: label.to_string(),
                ctx: self.clone(),
            }),
            len,
            _t: PhantomData,
        })
    }
}

/// Checks that a copy between all of a host buffer and all of a device buffer has matching
/// lengths; the error names `object()` (the node or copy), both buffers, the call and the line.
pub(crate) fn check_host_copy_lengths<T: Element>(
    host: &HostBuffer<T>,
    device: &DeviceBuffer<T>,
    to_device: bool,
    object: impl FnOnce() -> ObjectRef,
    op: &'static str,
    at: SourceLine,
) -> Result<()> {
    match host_copy_length_error(
        (host.label(), host.len()),
        (device.label(), device.len()),
        to_device,
    ) {
        None => Ok(()),
        Some(reason) => Err(Error::new(
            ErrorKind::InvalidInput { reason },
            object(),
            op,
            at,
        )),
    }
}

/// Why a copy between host buffer `host` and device buffer `device` (label, elements) does not
/// fit: their lengths differ.
fn host_copy_length_error(
    host: (&str, usize),
    device: (&str, usize),
    to_device: bool,
) -> Option<String> {
    if host.1 == device.1 {
        return None;
    }
    Some(if to_device {
        format!(
            "copy of {} elements from host buffer '{}' into {} elements of '{}'",
            host.1, host.0, device.1, device.0
        )
    } else {
        format!(
            "copy of {} elements from '{}' into {} elements of host buffer '{}'",
            device.1, device.0, host.1, host.0
        )
    })
}

/// The whole of host buffer `buffer`, accessed with `mode` (its host address is its identity in
/// the model: with unified addressing no device allocation shares it).
pub(crate) fn host_access<T: Element>(buffer: &HostBuffer<T>, mode: AccessMode) -> Access {
    Access {
        buffer: buffer.alloc.ptr as u64,
        label: buffer.label().to_string(),
        offset: 0,
        len: buffer.bytes() as u64,
        mode,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_errors_name_the_buffer_and_the_elements() {
        assert_eq!(range_error("w", 8, 0, 8), None);
        assert_eq!(range_error("w", 8, 8, 0), None);
        assert_eq!(
            range_error("layer-0", 8, 4, 5).as_deref(),
            Some("elements 4..9 are out of bounds of host buffer 'layer-0' of 8 elements")
        );
        assert_eq!(
            range_error("w", 8, usize::MAX, 2).as_deref(),
            Some(
                "elements 18446744073709551615..18446744073709551617 are out of bounds of host \
                 buffer 'w' of 8 elements"
            )
        );
    }

    #[test]
    fn copy_length_errors_name_both_buffers_in_copy_order() {
        assert_eq!(host_copy_length_error(("h", 4), ("d", 4), true), None);
        assert_eq!(
            host_copy_length_error(("weights", 6), ("slot-0", 4), true).as_deref(),
            Some("copy of 6 elements from host buffer 'weights' into 4 elements of 'slot-0'")
        );
        assert_eq!(
            host_copy_length_error(("out-host", 3), ("out", 5), false).as_deref(),
            Some("copy of 5 elements from 'out' into 3 elements of host buffer 'out-host'")
        );
    }

    #[test]
    fn host_buffers_can_be_shared_with_other_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<HostBuffer<f32>>();
        send_sync::<HostAllocation>();
    }
}
