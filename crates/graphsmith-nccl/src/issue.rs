//! The collectives on a stream: each one is a [`Stream::library_call`] labelled
//! `nccl all_reduce(sum, f32 x 4096)` that declares its send buffer read and its receive
//! buffer written (read and written when in place), so inside a capture the node gets the
//! label, the caller's line and those accesses, the hazard checker covers it, and the graph
//! keeps both buffers alive. Eagerly they simply run.

use std::cell::Cell;
use std::ffi::{c_int, c_void};

use graphsmith::{read, read_write, sys, write, DeviceBuffer, LibraryAccess, Stream};

use crate::collective::{label, Collective, NcclElement, ReduceOp};
use crate::comm::Communicator;
use crate::error::{NcclError, Result};
use crate::ffi::SUCCESS;

/// What a collective hands NCCL.
struct Call<'a> {
    what: Collective,
    send: u64,
    recv: u64,
    reads: &'a [LibraryAccess],
    writes: &'a [LibraryAccess],
}

fn check_len(
    what: &Collective,
    buffer: &str,
    len: usize,
    expected: usize,
    why: String,
) -> Result<()> {
    if len == expected {
        return Ok(());
    }
    Err(NcclError::Length {
        label: label(what),
        buffer: buffer.to_string(),
        len,
        expected,
        why,
    })
}

impl Communicator {
    #[track_caller]
    fn issue(&self, stream: &Stream, call: Call<'_>) -> Result<()> {
        let inner = &self.inner;
        let nccl = inner.nccl;
        let text = label(&call.what);
        let code = Cell::new(SUCCESS);
        let (dtype, count) = (call.what.dtype.raw(), call.what.count);
        let send = call.send as usize as *const c_void;
        let recv = call.recv as usize as *mut c_void;
        let result = stream.library_call(&text, call.reads, call.writes, |raw| {
            let _guard = inner.calls.lock();
            let s = raw as *mut c_void;
            // SAFETY: `send` and `recv` are device buffers this call borrows, of the lengths
            // checked against `count` and the world size; the communicator is alive (we hold
            // its Arc) and used by this thread only (`calls`); the stream is the library
            // call's own.
            let r: c_int = unsafe {
                match call.what.kind {
                    crate::collective::Kind::AllReduce(op) => {
                        (nccl.all_reduce)(send, recv, count, dtype, op.raw(), inner.raw, s)
                    }
                    crate::collective::Kind::AllGather => {
                        (nccl.all_gather)(send, recv, count, dtype, inner.raw, s)
                    }
                    crate::collective::Kind::ReduceScatter(op) => {
                        (nccl.reduce_scatter)(send, recv, count, dtype, op.raw(), inner.raw, s)
                    }
                }
            };
            code.set(r);
            if r == SUCCESS {
                sys::CUresult::CUDA_SUCCESS
            } else {
                sys::CUresult::CUDA_ERROR_UNKNOWN
            }
        });
        match result {
            Ok(()) => {
                if let Ok(mut issued) = inner.issued.lock() {
                    if let Some(list) = issued.as_mut() {
                        list.push(call.what);
                    }
                }
                Ok(())
            }
            Err(source) if code.get() != SUCCESS => Err(NcclError::Collective {
                label: text,
                on: self.describe(),
                result: nccl.describe(code.get()),
                source: Box::new(source),
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// Every rank's `recv` becomes the reduction (`op`) of every rank's `send`; both hold the
    /// same number of elements.
    #[track_caller]
    pub fn all_reduce<T: NcclElement>(
        &self,
        stream: &Stream,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let what = Collective::all_reduce::<T>(op, send.len());
        check_len(
            &what,
            recv.label(),
            recv.len(),
            send.len(),
            "the send buffer's length".into(),
        )?;
        let (s, r) = (send.device_ptr(), recv.device_ptr());
        self.issue(
            stream,
            Call {
                what,
                send: s,
                recv: r,
                reads: &[read(send)],
                writes: &[write(recv)],
            },
        )
    }

    /// [`Communicator::all_reduce`] in place: `buf` is read and written.
    #[track_caller]
    pub fn all_reduce_in_place<T: NcclElement>(
        &self,
        stream: &Stream,
        buf: &mut DeviceBuffer<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let what = Collective::all_reduce::<T>(op, buf.len());
        let p = buf.device_ptr();
        self.issue(
            stream,
            Call {
                what,
                send: p,
                recv: p,
                reads: &[],
                writes: &[read_write(buf)],
            },
        )
    }

    /// Every rank's `recv` becomes every rank's `send`, in rank order (`recv` holds
    /// `send.len() x world` elements).
    #[track_caller]
    pub fn all_gather<T: NcclElement>(
        &self,
        stream: &Stream,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
    ) -> Result<()> {
        let what = Collective::all_gather::<T>(send.len());
        let world = self.world() as usize;
        let want = send.len().saturating_mul(world);
        check_len(
            &what,
            recv.label(),
            recv.len(),
            want,
            format!("the send length x world size {world}"),
        )?;
        let (s, r) = (send.device_ptr(), recv.device_ptr());
        self.issue(
            stream,
            Call {
                what,
                send: s,
                recv: r,
                reads: &[read(send)],
                writes: &[write(recv)],
            },
        )
    }

    /// Rank r's `recv` becomes block r of the reduction (`op`) of every rank's `send` (`send`
    /// holds `recv.len() x world` elements).
    #[track_caller]
    pub fn reduce_scatter<T: NcclElement>(
        &self,
        stream: &Stream,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let what = Collective::reduce_scatter::<T>(op, recv.len());
        let world = self.world() as usize;
        let want = recv.len().saturating_mul(world);
        check_len(
            &what,
            send.label(),
            send.len(),
            want,
            format!("the receive length x world size {world}"),
        )?;
        let (s, r) = (send.device_ptr(), recv.device_ptr());
        self.issue(
            stream,
            Call {
                what,
                send: s,
                recv: r,
                reads: &[read(send)],
                writes: &[write(recv)],
            },
        )
    }
}
