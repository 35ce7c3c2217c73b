//! The reader and the graph level: nodes in the driver's order, then edges with their data.

use std::collections::HashMap;
use std::ptr::null_mut;

use cudarc::driver::sys;
use graphsmith_analysis::{RawEdge, RawGraph};

mod kernel;
mod nodes;

pub use kernel::{KernelNode, MAX_PARAMS};
pub use nodes::node_type_name;

use crate::error::ReadError;
use crate::table::{DriverTable, SUCCESS};
pub use kernel::{KernelFunction, MAX_PARAM_BYTES};

/// What a failed (or missing) call for a node's parameters does to the read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Every call must succeed: the first failure (or missing function) fails the read. The
    /// runtime reads this way: an error reaches its caller.
    Strict,
    /// A node whose parameters cannot be read is kept with what is known of it (a kernel whose
    /// arguments are unread says so in `args_unread`; a copy or set becomes `Other`; a child
    /// graph is read as empty; a host or event node loses its name; an allocation or free node
    /// becomes `Other`). Only the graph's nodes, their types and its edges fail the read. The
    /// tracer reads this way: it must never fail inside the traced process.
    Lenient,
}

/// How much the reader reads before it gives up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Nodes of the graph, child graphs included.
    pub max_nodes: usize,
    /// Edges of one graph (the arrays the edges are read into grow up to this many entries).
    pub max_edges: usize,
}

impl Limits {
    /// As many nodes as there are, edges up to 2^28 (the arrays alone would take 6 GiB).
    pub const GENEROUS: Limits = Limits {
        max_nodes: usize::MAX,
        max_edges: 1 << 28,
    };
    /// 2^20 nodes, 2^22 edges per graph: what a read inside another process may cost.
    pub const BOUNDED: Limits = Limits {
        max_nodes: 1 << 20,
        max_edges: 1 << 22,
    };
}

/// Reads graphs through a [`DriverTable`].
#[derive(Clone, Copy, Debug)]
pub struct Reader<'t> {
    pub(crate) table: &'t DriverTable,
    pub(crate) policy: Policy,
    limits: Limits,
}

/// A graph as read back.
#[derive(Debug)]
pub struct Read {
    /// The graph, child graphs included, for `graphsmith_analysis::readback::build`.
    pub raw: RawGraph,
    /// The driver handle of each top-level node, in the order of `raw.nodes`.
    pub handles: Vec<sys::CUgraphNode>,
    /// The function and parameter layout of each top-level kernel node whose layout was read
    /// (`None` for other nodes), in the order of `raw.nodes`.
    pub kernels: Vec<Option<KernelFunction>>,
    /// The bytes read of one parameter at most ([`MAX_PARAM_BYTES`]): a larger parameter is
    /// an empty placeholder.
    pub param_bytes_cap: usize,
    /// How many parameters, in all kernels, were left as placeholders for being over the cap.
    pub params_over_cap: usize,
}

/// What a read carries from node to node.
pub(crate) struct State {
    /// Nodes that may still be read.
    pub budget: usize,
    pub params_over_cap: usize,
}

/// One graph's nodes, their handles and kernels, and its edges.
struct Level {
    raw: RawGraph,
    handles: Vec<sys::CUgraphNode>,
    kernels: Vec<Option<KernelFunction>>,
}

impl<'t> Reader<'t> {
    /// A reader over `table`.
    ///
    /// # Safety
    /// Every function in `table` is the driver function its field names, with the signature of
    /// its type (see [`crate::table`]), and stays callable while the reader is used.
    pub unsafe fn new(table: &'t DriverTable, policy: Policy, limits: Limits) -> Reader<'t> {
        Reader {
            table,
            policy,
            limits,
        }
    }

    /// The allocation holding a device address, as (base, size); `None` when the driver knows
    /// none (or the table has no `cuMemGetAddressRange_v2`).
    pub fn allocation_of(&self, address: u64) -> Option<(u64, u64)> {
        let get = self.table.mem_get_address_range?;
        let (mut base, mut size) = (0u64, 0usize);
        // SAFETY: get is cuMemGetAddressRange_v2 (Reader::new's contract), which may be asked
        // about any value (an address in no allocation is an error answer); base and size are
        // locals.
        let r = unsafe { get(&mut base, &mut size, address) };
        (r == SUCCESS).then_some((base, size as u64))
    }

    /// Reads `graph` back: its nodes (child graphs included, down to
    /// `graphsmith_analysis::readback::MAX_DEPTH`) and edges.
    ///
    /// # Safety
    /// `graph` must be a live `CUgraph` that no other thread changes during the call, and the
    /// context of its kernels current on this thread.
    pub unsafe fn read(&self, graph: sys::CUgraph) -> Result<Read, ReadError> {
        let mut state = State {
            budget: self.limits.max_nodes,
            params_over_cap: 0,
        };
        // SAFETY: forwarded contract.
        let level = unsafe { self.read_at(graph, 0, &mut state) }?;
        Ok(Read {
            raw: level.raw,
            handles: level.handles,
            kernels: level.kernels,
            param_bytes_cap: MAX_PARAM_BYTES,
            params_over_cap: state.params_over_cap,
        })
    }

    /// A child graph's nodes and edges.
    ///
    /// # Safety
    /// As [`Reader::read`].
    pub(crate) unsafe fn read_child(
        &self,
        graph: sys::CUgraph,
        depth: u32,
        state: &mut State,
    ) -> Result<RawGraph, ReadError> {
        // SAFETY: forwarded contract.
        Ok(unsafe { self.read_at(graph, depth, state) }?.raw)
    }

    /// # Safety
    /// As [`Reader::read`].
    unsafe fn read_at(
        &self,
        graph: sys::CUgraph,
        depth: u32,
        state: &mut State,
    ) -> Result<Level, ReadError> {
        // SAFETY: forwarded contract.
        let handles = unsafe { self.nodes_of(graph, state) }?;
        let mut nodes = Vec::with_capacity(handles.len());
        let mut kernels = Vec::with_capacity(handles.len());
        for &h in &handles {
            // SAFETY: h is a node of the live graph, whose kernels' context is current.
            let (node, kernel) = unsafe { self.node(h, depth, state) }?;
            nodes.push(node);
            kernels.push(kernel);
        }
        let index: HashMap<usize, usize> = handles
            .iter()
            .enumerate()
            .map(|(i, &h)| (h as usize, i))
            .collect();
        // SAFETY: graph is live (contract).
        let edges = unsafe { self.edges(graph, &index) }?;
        Ok(Level {
            raw: RawGraph { nodes, edges },
            handles,
            kernels,
        })
    }

    /// The handles of a graph's nodes (`cuGraphGetNodes`: the count, then the nodes), taken
    /// from the read's node budget.
    ///
    /// # Safety
    /// `graph` is a live `CUgraph`.
    unsafe fn nodes_of(
        &self,
        graph: sys::CUgraph,
        state: &mut State,
    ) -> Result<Vec<sys::CUgraphNode>, ReadError> {
        const CALL: &str = "cuGraphGetNodes";
        let get = self
            .table
            .graph_get_nodes
            .ok_or(ReadError::Missing { call: CALL })?;
        let mut n = 0usize;
        // SAFETY: get is cuGraphGetNodes (Reader::new's contract); graph is live; a null array
        // asks for the count only.
        let r = unsafe { get(graph, null_mut(), &mut n) };
        if r != SUCCESS {
            return Err(ReadError::Call {
                call: CALL,
                code: r,
            });
        }
        if n > state.budget {
            return Err(ReadError::TooManyNodes {
                max: self.limits.max_nodes,
            });
        }
        let mut handles = vec![null_mut(); n];
        // The driver refuses a non-null array with a count of 0 (CUDA_ERROR_INVALID_VALUE).
        if n > 0 {
            let mut got = n;
            // SAFETY: handles has room for `got` node handles; the driver writes at most that
            // many and updates `got`.
            let r = unsafe { get(graph, handles.as_mut_ptr(), &mut got) };
            if r != SUCCESS {
                return Err(ReadError::Call {
                    call: CALL,
                    code: r,
                });
            }
            handles.truncate(got.min(n));
        }
        state.budget -= handles.len();
        Ok(handles)
    }

    /// The edges of a graph with their data, as indices into `index` (edges to nodes not in it
    /// are left out).
    ///
    /// A count-only query fails with `CUDA_ERROR_LOSSY_QUERY` when an edge carries data (a
    /// programmatic edge, as libraries such as cuBLAS make on Hopper), so the edges are read
    /// into arrays with room to spare, four times larger while the driver fills them all.
    ///
    /// # Safety
    /// `graph` is a live `CUgraph`.
    unsafe fn edges(
        &self,
        graph: sys::CUgraph,
        index: &HashMap<usize, usize>,
    ) -> Result<Vec<RawEdge>, ReadError> {
        const CALL: &str = "cuGraphGetEdges";
        let (v2, v1) = (self.table.graph_get_edges_v2, self.table.graph_get_edges);
        let max = self.limits.max_edges;
        let mut n = 64usize.min(max.max(1));
        let (from, to, data, got) = loop {
            let (mut from, mut to) = (vec![null_mut(); n], vec![null_mut(); n]);
            // SAFETY: CUgraphEdgeData is three bytes and a reserved byte array: all zero is valid.
            let mut data: Vec<sys::CUgraphEdgeData> = vec![unsafe { std::mem::zeroed() }; n];
            let mut got = n;
            let r = match (v2, v1) {
                // SAFETY: f is cuGraphGetEdges_v2 (Reader::new's contract); graph is live; the
                // three arrays have room for `got` entries; the driver writes at most that many
                // and sets `got` to the number it returned.
                (Some(f), _) => unsafe {
                    f(
                        graph,
                        from.as_mut_ptr(),
                        to.as_mut_ptr(),
                        data.as_mut_ptr(),
                        &mut got,
                    )
                },
                // SAFETY: f is the 4-argument cuGraphGetEdges; as above, without edge data
                // (which stays all zero: plain edges).
                (None, Some(f)) => unsafe {
                    f(graph, from.as_mut_ptr(), to.as_mut_ptr(), &mut got)
                },
                // Neither: a strict read fails; a lenient one reads the nodes without edges.
                (None, None) => {
                    return match self.policy {
                        Policy::Strict => Err(ReadError::Missing {
                            call: "cuGraphGetEdges_v2",
                        }),
                        Policy::Lenient => Ok(Vec::new()),
                    }
                }
            };
            if r != SUCCESS {
                return Err(ReadError::Call {
                    call: CALL,
                    code: r,
                });
            }
            if got >= n {
                // Possibly cut short: ask again with more room.
                if n >= max {
                    return Err(ReadError::TooManyEdges { max });
                }
                n = n.saturating_mul(4).min(max);
                continue;
            }
            break (from, to, data, got);
        };
        Ok((0..got.min(n))
            .filter_map(|i| {
                Some(RawEdge {
                    from: *index.get(&(from[i] as usize))?,
                    to: *index.get(&(to[i] as usize))?,
                    from_port: data[i].from_port,
                    to_port: data[i].to_port,
                    ty: data[i].type_,
                })
            })
            .collect())
    }

    /// `Ok(Some(v))` when a node's parameter call worked; on a failure (or a missing function)
    /// the read fails under [`Policy::Strict`] and goes on without it (`Ok(None)`) under
    /// [`Policy::Lenient`].
    pub(crate) fn optional<T>(&self, r: Result<T, ReadError>) -> Result<Option<T>, ReadError> {
        match (r, self.policy) {
            (Ok(v), _) => Ok(Some(v)),
            (Err(e), Policy::Strict) => Err(e),
            (Err(_), Policy::Lenient) => Ok(None),
        }
    }
}
