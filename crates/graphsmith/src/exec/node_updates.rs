//! Per-node updates an executable holds on top of its template's model. A per-node update
//! changes the executable's node at once (one driver call) and records here what it set,
//! holding the buffers it references; the model with every update applied is made only when
//! asked for ([`crate::Exec::model`]), and the driver template is brought in step only by
//! [`crate::Exec::template`]. So an update never copies the model, even when the executable
//! shares it with the graph it was made from.

use std::sync::Arc;

use graphsmith_model::{
    self as model, Access, AccessMode, KernelArg as ModelArg, MemRef, MemcpyParams, MemorySpace,
    MemsetParams, NodeKind,
};

use cudarc::driver::sys;

use crate::context::Keep;
use crate::driver::kernel_params;
use crate::driver::memcpy_1d;
use crate::driver::{self, Failure};
use crate::exec::Exec;
use crate::graph::CopyError;
use crate::memory::Allocation;
use crate::module::{ArgData, LaunchConfig};

/// What a per-node update set on one node. Kernel arguments stay inline: an update allocates
/// nothing, and the executable keeps its updates in one array by node index (updating nodes in
/// order walks memory in order).
#[allow(clippy::large_enum_variant)]
pub(crate) enum NodeUpdate {
    Kernel {
        cfg: LaunchConfig,
        args: ArgData,
    },
    Memset {
        params: MemsetParams,
        dst: Arc<Allocation>,
    },
    Memcpy {
        params: MemcpyParams,
        src: Arc<Allocation>,
        dst: Arc<Allocation>,
    },
}

impl NodeUpdate {
    /// A 1-D device-to-device copy of `bytes` from `src` into `dst`.
    pub(crate) fn memcpy(src: &Arc<Allocation>, dst: &Arc<Allocation>, bytes: u64) -> Self {
        let device = |a: &Arc<Allocation>| MemRef {
            space: MemorySpace::Device,
            address: a.ptr,
        };
        NodeUpdate::Memcpy {
            params: MemcpyParams {
                src: device(src),
                dst: device(dst),
                bytes,
            },
            src: src.clone(),
            dst: dst.clone(),
        }
    }

    fn allocations(&self) -> impl Iterator<Item = &Arc<Allocation>> + '_ {
        let (args, a, b) = match self {
            NodeUpdate::Kernel { args, .. } => (Some(args), None, None),
            NodeUpdate::Memset { dst, .. } => (None, Some(dst), None),
            NodeUpdate::Memcpy { src, dst, .. } => (None, Some(src), Some(dst)),
        };
        args.into_iter()
            .flat_map(|a| a.buffers.iter().map(|b| &b.alloc))
            .chain(a)
            .chain(b)
    }

    /// Whether this update holds every buffer `other` holds (then letting go of `other` frees
    /// nothing a launch could still use: the usual case of new values for the same buffers).
    pub(crate) fn holds_all_of(&self, other: &NodeUpdate) -> bool {
        other
            .allocations()
            .all(|a| self.allocations().any(|b| Arc::ptr_eq(a, b)))
    }

    /// The buffers it holds, as keep-alives.
    pub(crate) fn into_keep(self) -> Vec<Keep> {
        self.allocations().map(|a| a.clone() as Keep).collect()
    }

    /// Writes the update into a model node; `layout` is the kernel's (offset, size) per
    /// parameter.
    fn apply(&self, node: &mut model::Node, layout: Option<&[(usize, usize)]>) {
        let access = |a: &Arc<Allocation>, len: u64, mode| Access {
            buffer: a.ptr,
            label: a.label.clone(),
            offset: 0,
            len,
            mode,
        };
        match (self, &mut node.kind) {
            (NodeUpdate::Kernel { cfg, args }, NodeKind::Kernel(k)) => {
                k.grid = cfg.grid;
                k.block = cfg.block;
                k.shared_mem_bytes = cfg.shared_mem_bytes;
                let offsets = layout
                    .unwrap_or(&[])
                    .iter()
                    .map(|&(offset, _)| offset as u32);
                k.args = args
                    .values()
                    .zip(offsets.chain(std::iter::repeat(0)))
                    .map(|(bytes, offset)| ModelArg {
                        offset,
                        bytes: bytes.to_vec(),
                    })
                    .collect();
                node.accesses = args.take_accesses();
                node.accesses_before_wait = args.take_accesses_before_wait();
            }
            (NodeUpdate::Memset { params, dst }, kind) => {
                let bytes = params.width * params.element_size as u64;
                *kind = NodeKind::Memset(*params);
                node.accesses = vec![access(dst, bytes, AccessMode::Write)];
            }
            (NodeUpdate::Memcpy { params, src, dst }, kind) => {
                *kind = NodeKind::Memcpy(*params);
                node.accesses = vec![
                    access(src, params.bytes, AccessMode::Read),
                    access(dst, params.bytes, AccessMode::Write),
                ];
            }
            // A kernel update always lands on a kernel node (checked when it was made).
            (NodeUpdate::Kernel { .. }, _) => {}
        }
    }
}

/// `base` with the updates applied, node by node.
pub(crate) fn apply_all(
    base: &model::Graph,
    updates: &[Option<NodeUpdate>],
    layout_of: impl Fn(usize) -> Option<Arc<Vec<(usize, usize)>>>,
) -> model::Graph {
    let mut out = base.clone();
    for (index, update) in updates.iter().enumerate() {
        if let (Some(update), Some(node)) = (update, out.nodes.get_mut(index)) {
            update.apply(node, layout_of(index).as_deref().map(|l| l.as_slice()));
        }
    }
    out
}

/// Pushes the parameters of every node changed since the last call by per-node updates into
/// the executable's current driver template: from the node's per-node update when it has one,
/// else from the model. A current template that another graph shares is copied first (the
/// instantiation template's driver graph is never changed while shared: its node handles
/// address the executable's nodes). A shared template with conditional nodes cannot be copied:
/// that is an error naming the node ([`CopyError::Refused`]), and nothing is written.
pub(crate) fn flush_template(exec: &mut Exec) -> Result<(), CopyError> {
    if !exec.any_stale {
        return Ok(());
    }
    exec.template.ctx.bind()?;
    match &mut exec.current {
        Some(current) => current.unshare()?,
        None if exec.template.raw_guard().is_some() => exec.current = Some(exec.template.copy()?),
        None => {}
    }
    let current = exec.current.as_ref().unwrap_or(&exec.template);
    for (index, stale) in exec.stale.iter_mut().enumerate() {
        if !*stale {
            continue;
        }
        let handle = current.handles()[index];
        let update = exec.overrides.get_mut(index).and_then(|u| u.as_mut());
        match (update, &current.model().nodes[index].kind) {
            (Some(NodeUpdate::Kernel { cfg, args }), _) => {
                if let Some(function) = &current.kernels()[index] {
                    let mut pointers = args.pointers();
                    let params = kernel_params(
                        function.func,
                        function.kern,
                        cfg.grid,
                        cfg.block,
                        cfg.shared_mem_bytes,
                        pointers.as_mut_ptr(),
                    );
                    // SAFETY: the handle is a live kernel node of the current template; the
                    // pointers point into `args`, which the driver copies during the call; their
                    // count and sizes were checked against the kernel when they were set.
                    unsafe { driver::set_kernel_node(handle, &params) }?;
                }
            }
            (Some(NodeUpdate::Memset { params, .. }), _) => set_memset(handle, params)?,
            (Some(NodeUpdate::Memcpy { params, .. }), _) => {
                let p = memcpy_1d(
                    params.src.address,
                    params.dst.address,
                    params.bytes as usize,
                );
                // SAFETY: the handle is a live copy node of the current template; both
                // addresses are allocations the update holds.
                unsafe { driver::set_memcpy_node(handle, &p) }?;
            }
            (None, NodeKind::Kernel(k)) => {
                if let Some(function) = &current.kernels()[index] {
                    let mut pointers: Vec<*mut std::ffi::c_void> = k
                        .args
                        .iter()
                        .map(|a| a.bytes.as_ptr() as *mut std::ffi::c_void)
                        .collect();
                    let cfg = LaunchConfig {
                        grid: k.grid,
                        block: k.block,
                        shared_mem_bytes: k.shared_mem_bytes,
                    };
                    let params = kernel_params(
                        function.func,
                        function.kern,
                        cfg.grid,
                        cfg.block,
                        cfg.shared_mem_bytes,
                        pointers.as_mut_ptr(),
                    );
                    // SAFETY: the handle is a live kernel node of the current template; the
                    // pointers point at the model's argument bytes, which the driver copies
                    // during the call; a kernel is known only with its complete arguments.
                    unsafe { driver::set_kernel_node(handle, &params) }?;
                }
            }
            (None, NodeKind::Memset(m)) => set_memset(handle, m)?,
            _ => {}
        }
        *stale = false;
    }
    exec.any_stale = false;
    Ok(())
}

/// Writes a memset node's parameters into a template node.
fn set_memset(handle: sys::CUgraphNode, m: &MemsetParams) -> Result<(), Failure> {
    let p = sys::CUDA_MEMSET_NODE_PARAMS {
        dst: m.dst,
        pitch: m.pitch as usize,
        value: m.value,
        elementSize: m.element_size,
        width: m.width as usize,
        height: m.height as usize,
    };
    // SAFETY: the handle is a live memset node of the current template; the values were read
    // back from, or set on, a node of the same shape.
    unsafe { driver::set_memset_node(handle, &p) }
}

/// Moves the per-node updates into the current template once its driver nodes have them
/// ([`flush_template`]): its model becomes the updated model and it keeps their buffers (each
/// once). Afterwards the executable holds no separate per-node updates.
pub(crate) fn fold_into_template(exec: &mut Exec) {
    if exec.overrides.is_empty() {
        return;
    }
    let model = match exec.model_cache.take() {
        Some(model) => model,
        None => {
            let current = exec.current.as_ref().unwrap_or(&exec.template);
            let kernels = current.kernels();
            apply_all(current.model(), &exec.overrides, |i| {
                kernels.get(i)?.as_ref().map(|k| k.layout.clone())
            })
        }
    };
    let updates = std::mem::take(&mut exec.overrides);
    let current = exec.current.as_mut().unwrap_or(&mut exec.template);
    current.parts_mut().model = Arc::new(model);
    let keep = Arc::make_mut(&mut current.keep);
    let mut held: std::collections::HashSet<*const ()> =
        keep.iter().map(|k| Arc::as_ptr(k) as *const ()).collect();
    for update in updates.into_iter().flatten() {
        for alloc in update.into_keep() {
            if held.insert(Arc::as_ptr(&alloc) as *const ()) {
                keep.push(alloc);
            }
        }
    }
}
