//! Device memory with shared ownership: a buffer lives until its user and every graph and
//! executable that references it let go, so no graph can run on freed memory.

use std::marker::PhantomData;
use std::sync::Arc;

use graphsmith_model::{Access, AccessMode};

use cudarc::driver::sys;

use crate::context::Context;
use crate::driver::{self, Failure};
use crate::error::{Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};

/// Plain values that may live in device memory and be passed to kernels by value.
///
/// # Safety
/// Implementors must be `Copy`, have no padding and no pointers to host memory, and be valid for
/// every bit pattern (device memory is read back as raw bytes).
pub unsafe trait Element: Copy + Send + Sync + 'static {}

macro_rules! elements {
    ($($t:ty),*) => { $(
        // SAFETY: primitive numbers: no padding, valid for every bit pattern.
        unsafe impl Element for $t {}
    )* };
}
elements!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

/// One device allocation. Shared (`Arc`) between a [`DeviceBuffer`] and every graph, capture and
/// executable that references it; freed when the last of them drops.
pub(crate) struct Allocation {
    pub ptr: sys::CUdeviceptr,
    pub bytes: usize,
    pub label: String,
    pub ctx: Context,
}

impl Drop for Allocation {
    fn drop(&mut self) {
        let ptr = std::mem::replace(&mut self.ptr, 0);
        if ptr == 0 {
            return;
        }
        // No executable can still use ptr: every executable holds an Arc to this allocation and
        // waits for its own work in its Drop before releasing it. While a capture runs the free
        // is deferred until it ends (cuMemFree may synchronise the device).
        let label = &self.label;
        self.ctx.destroy(
            || ObjectRef::new(ObjectKind::Buffer, label),
            crate::context::Destroy::Free(ptr),
        );
    }
}

/// A typed device buffer of `len` elements, with a label.
///
/// Borrowing decides what a kernel launch records: `&buffer` is a read, `&mut buffer` a write.
/// `DeviceBuffer` is not `Clone`: one owner mutates it; graphs keep the memory alive by sharing
/// the allocation, not the buffer.
pub struct DeviceBuffer<T: Element> {
    pub(crate) alloc: Arc<Allocation>,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Element> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceBuffer '{}' ({} x {}, 0x{:x})",
            self.alloc.label,
            self.len,
            std::any::type_name::<T>(),
            self.alloc.ptr
        )
    }
}

/// Checks that a copy of all of `src` into `dst` has matching lengths; the error names
/// `object()` (the node or copy), the call and the caller's line.
pub(crate) fn check_copy_lengths<T: Element>(
    dst: &DeviceBuffer<T>,
    src: &DeviceBuffer<T>,
    object: impl FnOnce() -> ObjectRef,
    op: &'static str,
    at: SourceLine,
) -> Result<()> {
    if dst.len() == src.len() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::InvalidInput {
            reason: format!(
                "copy of {} elements from '{}' into {} elements of '{}'",
                src.len(),
                src.label(),
                dst.len(),
                dst.label()
            ),
        },
        object(),
        op,
        at,
    ))
}

impl<T: Element> DeviceBuffer<T> {
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
    /// The device address (for interop and reports; graphsmith keeps ownership).
    pub fn device_ptr(&self) -> u64 {
        self.alloc.ptr
    }
    pub(crate) fn object(&self) -> ObjectRef {
        ObjectRef::new(ObjectKind::Buffer, &self.alloc.label)
    }

    /// A buffer of `len` elements over a shared allocation of at least that many bytes.
    pub(crate) fn over(alloc: Arc<Allocation>, len: usize) -> Self {
        debug_assert!(len * std::mem::size_of::<T>() <= alloc.bytes);
        Self {
            alloc,
            len,
            _t: PhantomData,
        }
    }
}

/// The bytes of `len` elements of `T`, or an error naming `object` when they overflow `usize`.
pub(crate) fn checked_bytes<T: Element>(
    len: usize,
    object: &ObjectRef,
    op: &'static str,
    at: SourceLine,
) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidInput {
                reason: format!(
                    "{len} elements of {} overflow usize",
                    std::any::type_name::<T>()
                ),
            },
            object.clone(),
            op,
            at,
        )
    })
}

impl Context {
    /// Allocates `len` elements of device memory (`cuMemAlloc`). The contents are not
    /// initialised; fill them with [`crate::Stream::upload`] or a kernel.
    #[track_caller]
    pub fn alloc<T: Element>(&self, label: &str, len: usize) -> Result<DeviceBuffer<T>> {
        let at = SourceLine::caller();
        let me = ObjectRef::new(ObjectKind::Buffer, label);
        let bytes = checked_bytes::<T>(len, &me, "Context::alloc", at)?;
        let fail = |f: Failure| f.on(me.clone(), "Context::alloc", at);
        self.bind().map_err(fail)?;
        let mut ptr = 0;
        let op = crate::context::Op::other("Context::alloc", label, at);
        self.issue_unstreamed(op, fail, || {
            // cuMemAlloc refuses 0 bytes; a zero-length buffer still gets a distinct address.
            // SAFETY: the context is current (bind above).
            ptr = unsafe { driver::mem_alloc(bytes.max(1)) }?;
            Ok(())
        })?;
        Ok(DeviceBuffer {
            alloc: Arc::new(Allocation {
                ptr,
                bytes,
                label: label.to_string(),
                ctx: self.clone(),
            }),
            len,
            _t: PhantomData,
        })
    }
}

/// A read-only range of a buffer, for passing part of it to a kernel (`&buffer` passes all).
pub struct View<'a, T: Element> {
    pub(crate) buffer: &'a DeviceBuffer<T>,
    pub(crate) start: usize,
    pub(crate) len: usize,
}

/// A writable range of a buffer, for passing part of it to a kernel (`&mut buffer` passes all).
pub struct ViewMut<'a, T: Element> {
    pub(crate) buffer: &'a mut DeviceBuffer<T>,
    pub(crate) start: usize,
    pub(crate) len: usize,
}

fn bounds(range: &std::ops::Range<usize>, len: usize, label: &str) -> (usize, usize) {
    assert!(
        range.start <= range.end && range.end <= len,
        "range {range:?} is out of bounds of buffer '{label}' of {len} elements"
    );
    (range.start, range.end - range.start)
}

impl<T: Element> DeviceBuffer<T> {
    /// Elements `range` of this buffer, read-only. Panics when the range is out of bounds (a
    /// programming error, like slice indexing).
    pub fn slice(&self, range: std::ops::Range<usize>) -> View<'_, T> {
        let (start, len) = bounds(&range, self.len, self.label());
        View {
            buffer: self,
            start,
            len,
        }
    }
    /// Elements `range` of this buffer, writable. Panics when the range is out of bounds.
    pub fn slice_mut(&mut self, range: std::ops::Range<usize>) -> ViewMut<'_, T> {
        let (start, len) = bounds(&range, self.len, self.label());
        ViewMut {
            buffer: self,
            start,
            len,
        }
    }
}

/// The 32 bits a memset writes for `value` (1-, 2- or 4-byte elements).
pub(crate) fn memset_bits<T: Element>(value: T) -> std::result::Result<u32, String> {
    let size = std::mem::size_of::<T>();
    let mut bytes = [0u8; 4];
    if !matches!(size, 1 | 2 | 4) {
        return Err(format!(
            "memset takes 1-, 2- or 4-byte elements; {} is {size} bytes",
            std::any::type_name::<T>()
        ));
    }
    // SAFETY: T is an Element (plain bytes, no padding) of `size` <= 4 bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(&value as *const T as *const u8, bytes.as_mut_ptr(), size)
    };
    Ok(u32::from_le_bytes(bytes))
}

/// The whole of `buffer`, accessed with `mode`.
pub(crate) fn access<T: Element>(buffer: &DeviceBuffer<T>, mode: AccessMode) -> Access {
    Access {
        buffer: buffer.alloc.ptr,
        label: buffer.label().to_string(),
        offset: 0,
        len: buffer.bytes() as u64,
        mode,
    }
}
