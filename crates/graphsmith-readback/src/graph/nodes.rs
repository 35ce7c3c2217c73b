//! One node: its type, then the parameters of its kind. C enums the driver writes (node types,
//! memory types) are read as integers, never as Rust enums: a newer driver may write values
//! this build does not know.

use std::mem::MaybeUninit;
use std::ptr::{addr_of, null_mut};

use cudarc::driver::sys;
use graphsmith_analysis::readback::MAX_DEPTH;
use graphsmith_analysis::{Copy3D, CopySide, RawGraph, RawNode, Set2D};
use graphsmith_model::NodeKind;

use super::kernel::KernelFunction;
use super::{Reader, State};
use crate::error::check;
use crate::error::ReadError;

use sys::CUgraphNodeType as T;

/// The name of a node the reader keeps as `NodeKind::Other`: a conditional node (whose
/// parameters the CUDA 13.0 driver API cannot read), a copy, set, allocation or free node whose
/// parameters a lenient read could not get, or any other type by its number (`node type 12`).
pub fn node_type_name(ty: u32) -> String {
    let named = [
        (T::CU_GRAPH_NODE_TYPE_MEMCPY, "memcpy"),
        (T::CU_GRAPH_NODE_TYPE_MEMSET, "memset"),
        (T::CU_GRAPH_NODE_TYPE_MEM_ALLOC, "mem_alloc"),
        (T::CU_GRAPH_NODE_TYPE_MEM_FREE, "mem_free"),
        (T::CU_GRAPH_NODE_TYPE_CONDITIONAL, "conditional"),
    ];
    match named.iter().find(|(t, _)| *t as u32 == ty) {
        Some((_, name)) => (*name).to_string(),
        None => format!("node type {ty}"),
    }
}

fn other(ty: T) -> RawNode {
    RawNode::plain(NodeKind::Other {
        name: node_type_name(ty as u32),
    })
}

impl Reader<'_> {
    /// A node, with its kernel's function and layout when it is a kernel node whose layout was
    /// read.
    ///
    /// # Safety
    /// `node` is a node of a live graph; the context of its kernels is current.
    pub(crate) unsafe fn node(
        &self,
        node: sys::CUgraphNode,
        depth: u32,
        state: &mut State,
    ) -> Result<(RawNode, Option<KernelFunction>), ReadError> {
        const CALL: &str = "cuGraphNodeGetType";
        let get_type = self
            .table
            .node_get_type
            .ok_or(ReadError::Missing { call: CALL })?;
        let mut ty = 0u32;
        // SAFETY: get_type is cuGraphNodeGetType (Reader::new's contract); node is live; ty is
        // a local 32-bit slot (the enum read as its value).
        check(unsafe { get_type(node, &mut ty) }, CALL)?;
        let is = |t: T| ty == t as u32;
        let raw = if is(T::CU_GRAPH_NODE_TYPE_KERNEL) {
            // SAFETY: node is live and a kernel node (its type was just read); its context is
            // current (contract).
            let k = unsafe { self.kernel_node(node, state) }?;
            return Ok((
                RawNode {
                    args_unread: !k.args_read,
                    ..RawNode::plain(NodeKind::Kernel(k.params))
                },
                k.function,
            ));
        } else if is(T::CU_GRAPH_NODE_TYPE_MEMCPY) {
            // SAFETY: node is live and a copy node (its type was just read).
            match self.optional(unsafe { self.copy(node) })? {
                Some(c) => RawNode {
                    operands: c.operands(),
                    ..RawNode::plain(c.kind())
                },
                None => other(T::CU_GRAPH_NODE_TYPE_MEMCPY),
            }
        } else if is(T::CU_GRAPH_NODE_TYPE_MEMSET) {
            // SAFETY: node is live and a set node (its type was just read).
            match self.optional(unsafe { self.set(node) })? {
                Some(s) => RawNode {
                    operands: vec![s.operand()],
                    ..RawNode::plain(s.kind())
                },
                None => other(T::CU_GRAPH_NODE_TYPE_MEMSET),
            }
        } else if is(T::CU_GRAPH_NODE_TYPE_HOST) {
            // SAFETY: node is live and a host node (its type was just read).
            let name = match self.optional(unsafe { self.host_function(node) })? {
                Some(address) => format!("host function at 0x{address:x}"),
                None => String::new(),
            };
            RawNode::plain(NodeKind::Host { name })
        } else if is(T::CU_GRAPH_NODE_TYPE_GRAPH) {
            // SAFETY: node is live and a child graph node (its type was just read).
            let child = self
                .optional(unsafe { self.child_graph(node) })?
                .unwrap_or(null_mut());
            let graph = if depth < MAX_DEPTH && !child.is_null() {
                // SAFETY: the child graph is owned by the node, live while its parent is.
                unsafe { self.read_child(child, depth + 1, state) }?
            } else {
                RawGraph::default()
            };
            RawNode {
                child: Some(graph),
                ..RawNode::plain(NodeKind::Empty)
            }
        } else if is(T::CU_GRAPH_NODE_TYPE_EMPTY) {
            RawNode::plain(NodeKind::Empty)
        } else if is(T::CU_GRAPH_NODE_TYPE_WAIT_EVENT) {
            // SAFETY: node is live and an event-wait node (its type was just read).
            let event = unsafe { self.event(node, false) };
            RawNode::plain(NodeKind::EventWait {
                event: self.event_name(event)?,
            })
        } else if is(T::CU_GRAPH_NODE_TYPE_EVENT_RECORD) {
            // SAFETY: node is live and an event-record node (its type was just read).
            let event = unsafe { self.event(node, true) };
            RawNode::plain(NodeKind::EventRecord {
                event: self.event_name(event)?,
            })
        } else if is(T::CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
            // SAFETY: node is live and an allocation node (its type was just read).
            match self.optional(unsafe { self.alloc(node) })? {
                Some((address, bytes)) => RawNode::plain(NodeKind::MemAlloc { address, bytes }),
                None => other(T::CU_GRAPH_NODE_TYPE_MEM_ALLOC),
            }
        } else if is(T::CU_GRAPH_NODE_TYPE_MEM_FREE) {
            // SAFETY: node is live and a free node (its type was just read).
            match self.optional(unsafe { self.free(node) })? {
                Some(address) => RawNode::plain(NodeKind::MemFree { address }),
                None => other(T::CU_GRAPH_NODE_TYPE_MEM_FREE),
            }
        } else {
            // A conditional node among them: the CUDA 13.0 driver API has no call that reads
            // its parameters (cuGraphNodeGetParams arrived in 13.2), so its flavour stays
            // unknown here.
            RawNode::plain(NodeKind::Other {
                name: node_type_name(ty),
            })
        };
        Ok((raw, None))
    }

    fn event_name(&self, event: Result<sys::CUevent, ReadError>) -> Result<String, ReadError> {
        Ok(match self.optional(event)? {
            Some(e) => format!("event 0x{:x}", e as usize),
            None => String::new(),
        })
    }

    /// A copy node's `CUDA_MEMCPY3D`, field by field (`cuGraphMemcpyNodeGetParams`).
    ///
    /// # Safety
    /// `node` is a live copy node.
    unsafe fn copy(&self, node: sys::CUgraphNode) -> Result<Copy3D, ReadError> {
        const CALL: &str = "cuGraphMemcpyNodeGetParams";
        let get = self
            .table
            .memcpy_node_get_params
            .ok_or(ReadError::Missing { call: CALL })?;
        // CUDA_MEMCPY3D holds C enums (the memory types) without a zero value: the struct is
        // never assumed initialised; each field is read through a raw pointer, the enums as u32.
        let mut p = MaybeUninit::<sys::CUDA_MEMCPY3D>::zeroed();
        // SAFETY: get is cuGraphMemcpyNodeGetParams (Reader::new's contract); node is a live
        // copy node; p is writable and large enough.
        check(unsafe { get(node, p.as_mut_ptr()) }, CALL)?;
        let p = p.as_ptr();
        // SAFETY: p points to a zero-initialised, driver-filled CUDA_MEMCPY3D; every field read
        // is an integer or a pointer (any bit pattern valid); the enums are read as their
        // 32-bit value.
        let c = unsafe {
            Copy3D {
                src: CopySide {
                    memory_type: addr_of!((*p).srcMemoryType).cast::<u32>().read(),
                    device: addr_of!((*p).srcDevice).read(),
                    host: addr_of!((*p).srcHost).read() as u64,
                    x: addr_of!((*p).srcXInBytes).read() as u64,
                    y: addr_of!((*p).srcY).read() as u64,
                    z: addr_of!((*p).srcZ).read() as u64,
                    pitch: addr_of!((*p).srcPitch).read() as u64,
                    height: addr_of!((*p).srcHeight).read() as u64,
                },
                dst: CopySide {
                    memory_type: addr_of!((*p).dstMemoryType).cast::<u32>().read(),
                    device: addr_of!((*p).dstDevice).read(),
                    host: addr_of!((*p).dstHost).read() as u64,
                    x: addr_of!((*p).dstXInBytes).read() as u64,
                    y: addr_of!((*p).dstY).read() as u64,
                    z: addr_of!((*p).dstZ).read() as u64,
                    pitch: addr_of!((*p).dstPitch).read() as u64,
                    height: addr_of!((*p).dstHeight).read() as u64,
                },
                width: addr_of!((*p).WidthInBytes).read() as u64,
                height: addr_of!((*p).Height).read() as u64,
                depth: addr_of!((*p).Depth).read() as u64,
            }
        };
        Ok(c)
    }

    /// A set node's parameters (`cuGraphMemsetNodeGetParams`).
    ///
    /// # Safety
    /// `node` is a live set node.
    unsafe fn set(&self, node: sys::CUgraphNode) -> Result<Set2D, ReadError> {
        const CALL: &str = "cuGraphMemsetNodeGetParams";
        let get = self
            .table
            .memset_node_get_params
            .ok_or(ReadError::Missing { call: CALL })?;
        // SAFETY: CUDA_MEMSET_NODE_PARAMS holds integers only: all zero is valid.
        let mut p: sys::CUDA_MEMSET_NODE_PARAMS = unsafe { std::mem::zeroed() };
        // SAFETY: get is cuGraphMemsetNodeGetParams (Reader::new's contract); node is a live
        // set node; p is a local the driver fills.
        check(unsafe { get(node, &mut p) }, CALL)?;
        Ok(Set2D {
            dst: p.dst,
            pitch: p.pitch as u64,
            value: p.value,
            element_size: p.elementSize,
            width: p.width as u64,
            height: p.height as u64,
        })
    }

    /// The address of a host node's function (`cuGraphHostNodeGetParams`), 0 when none.
    ///
    /// # Safety
    /// `node` is a live host node.
    unsafe fn host_function(&self, node: sys::CUgraphNode) -> Result<usize, ReadError> {
        const CALL: &str = "cuGraphHostNodeGetParams";
        let get = self
            .table
            .host_node_get_params
            .ok_or(ReadError::Missing { call: CALL })?;
        // SAFETY: CUDA_HOST_NODE_PARAMS is an optional function pointer and a data pointer: all
        // zero is valid (None, null).
        let mut p: sys::CUDA_HOST_NODE_PARAMS = unsafe { std::mem::zeroed() };
        // SAFETY: get is cuGraphHostNodeGetParams (Reader::new's contract); node is a live host
        // node; p is a local the driver fills.
        check(unsafe { get(node, &mut p) }, CALL)?;
        Ok(p.fn_.map(|f| f as usize).unwrap_or(0))
    }

    /// A child graph node's graph (`cuGraphChildGraphNodeGetGraph`), owned by the node.
    ///
    /// # Safety
    /// `node` is a live child graph node.
    unsafe fn child_graph(&self, node: sys::CUgraphNode) -> Result<sys::CUgraph, ReadError> {
        const CALL: &str = "cuGraphChildGraphNodeGetGraph";
        let get = self
            .table
            .child_graph_node_get_graph
            .ok_or(ReadError::Missing { call: CALL })?;
        let mut child = null_mut();
        // SAFETY: get is cuGraphChildGraphNodeGetGraph (Reader::new's contract); node is a live
        // child graph node; child is a local.
        check(unsafe { get(node, &mut child) }, CALL)?;
        Ok(child)
    }

    /// The event of an event record (`record`) or wait node (`cuGraphEventRecordNodeGetEvent`,
    /// `cuGraphEventWaitNodeGetEvent`).
    ///
    /// # Safety
    /// `node` is a live event node of that kind.
    unsafe fn event(
        &self,
        node: sys::CUgraphNode,
        record: bool,
    ) -> Result<sys::CUevent, ReadError> {
        let (get, name) = if record {
            (
                self.table.event_record_node_get_event,
                "cuGraphEventRecordNodeGetEvent",
            )
        } else {
            (
                self.table.event_wait_node_get_event,
                "cuGraphEventWaitNodeGetEvent",
            )
        };
        let get = get.ok_or(ReadError::Missing { call: name })?;
        let mut e = null_mut();
        // SAFETY: get is the event node function of this node's kind (Reader::new's contract);
        // node is a live event node of that kind; e is a local.
        check(unsafe { get(node, &mut e) }, name)?;
        Ok(e)
    }

    /// An allocation node's address and size (`cuGraphMemAllocNodeGetParams`).
    ///
    /// # Safety
    /// `node` is a live allocation node.
    unsafe fn alloc(&self, node: sys::CUgraphNode) -> Result<(u64, u64), ReadError> {
        const CALL: &str = "cuGraphMemAllocNodeGetParams";
        let get = self
            .table
            .mem_alloc_node_get_params
            .ok_or(ReadError::Missing { call: CALL })?;
        // The parameters hold pool properties with C enums: never assumed initialised; the two
        // integer fields are read through raw pointers.
        let mut p = MaybeUninit::<sys::CUDA_MEM_ALLOC_NODE_PARAMS>::zeroed();
        // SAFETY: get is cuGraphMemAllocNodeGetParams (Reader::new's contract); node is a live
        // allocation node; p is writable and large enough.
        check(unsafe { get(node, p.as_mut_ptr()) }, CALL)?;
        let p = p.as_ptr();
        // SAFETY: p points to a zero-initialised, driver-filled struct; both fields are
        // integers (any bit pattern valid).
        let (address, bytes) =
            unsafe { (addr_of!((*p).dptr).read(), addr_of!((*p).bytesize).read()) };
        Ok((address, bytes as u64))
    }

    /// The address a free node frees (`cuGraphMemFreeNodeGetParams`).
    ///
    /// # Safety
    /// `node` is a live free node.
    unsafe fn free(&self, node: sys::CUgraphNode) -> Result<u64, ReadError> {
        const CALL: &str = "cuGraphMemFreeNodeGetParams";
        let get = self
            .table
            .mem_free_node_get_params
            .ok_or(ReadError::Missing { call: CALL })?;
        let mut address = 0;
        // SAFETY: get is cuGraphMemFreeNodeGetParams (Reader::new's contract); node is a live
        // free node; address is a local.
        check(unsafe { get(node, &mut address) }, CALL)?;
        Ok(address)
    }
}
