"""``graphsmith.check``: hazards in a live ``torch.cuda.CUDAGraph``."""

from typing import Any, Iterable, List, Optional, Sequence, Tuple

from graphsmith._native import Report, check_raw_graph

_NOT_KEPT = (
    "check() needs the CUDAGraph's graph, which PyTorch keeps only when the graph was captured "
    "with torch.cuda.CUDAGraph(keep_graph=True), after the capture ended and before reset()"
)

#: Block states of ``torch.cuda.memory_snapshot()`` whose block holds a live tensor.
ACTIVE_STATES = ("active_allocated", "active_pending_free")

Region = Tuple[int, int, str]


def _pool(segment: dict) -> str:
    pool = segment.get("segment_pool_id")
    if pool is None:
        return ""
    try:
        ids = tuple(int(x) for x in pool)
    except TypeError:
        ids = (int(pool),)
    if all(x == 0 for x in ids):
        return ""  # the default pool
    return ", pool " + ",".join(str(x) for x in ids)


def regions_from_snapshot(
    snapshot: Iterable[dict], device: Optional[int] = None, include_free: bool = True
) -> List[Region]:
    """The memory map of ``check``: ``(address, size, label)`` of each block of PyTorch's
    caching allocator in ``snapshot`` (what ``torch.cuda.memory_snapshot()`` returns: a list of
    segments, each with ``address``, ``device``, ``segment_pool_id`` and its ``blocks``, each
    with ``size``, ``state`` and, in recent PyTorch, ``address``; a block without an address
    lies right after the previous one).

    Blocks in the states of :data:`ACTIVE_STATES` hold live tensors and are labelled
    ``block 0x...+SIZE (segment 0x...)``. With ``include_free`` (the default) inactive blocks
    are regions too, labelled ``free block``: a graph captured from a private memory pool
    still uses the temporaries it freed during its capture, whose blocks now show as inactive,
    and a pointer into one must not fall back to the whole segment. Segments of other devices
    than ``device`` (when given) are left out, as are blocks of zero size.
    """
    regions: List[Region] = []
    for segment in snapshot:
        if device is not None and segment.get("device", device) != device:
            continue
        base = int(segment["address"])
        pool = _pool(segment)
        cursor = base
        for block in segment.get("blocks", ()):
            size = int(block.get("size", 0))
            address = int(block["address"]) if "address" in block else cursor
            cursor = address + size
            state = block.get("state", "")
            if size <= 0:
                continue
            if state in ACTIVE_STATES:
                kind = "block"
            elif include_free:
                kind = "free block"
            else:
                continue
            label = f"{kind} {address:#x}+{size} (segment {base:#x}{pool})"
            regions.append((address, size, label))
    return regions


def _regions(blocks: Any) -> List[Region]:
    """``blocks`` as given to ``check``: ``(address, size)`` or ``(address, size, label)``."""
    out: List[Region] = []
    for entry in blocks:
        if not isinstance(entry, Sequence) or len(entry) not in (2, 3):
            raise TypeError(
                f"check(blocks=...) takes (address, size) or (address, size, label) tuples, "
                f"not {entry!r}"
            )
        address, size = int(entry[0]), int(entry[1])
        label = str(entry[2]) if len(entry) == 3 else f"block {address:#x}+{size}"
        if address < 0 or size < 0:
            raise ValueError(f"check(blocks=...): a negative address or size in {entry!r}")
        out.append((address, size, label))
    return out


def check(graph, device: Optional[int] = None, blocks: Any = None) -> Report:
    """Reads a ``torch.cuda.CUDAGraph`` back from the driver and checks it for hazards (pairs
    of nodes that no path orders and that touch the same bytes, one of them writing).

    ``graph`` must have been captured with ``torch.cuda.CUDAGraph(keep_graph=True)``; its
    capture must have ended and it must not have been reset. ``device`` is the CUDA device it
    was captured on (default: ``torch.cuda.current_device()``).

    Kernel pointers, in plain and struct parameters alike, are bounded by the caching
    allocator's blocks, so that two tensors of one segment are two buffers: ``blocks`` is the
    memory map, ``(address, size)`` or ``(address, size, label)`` tuples; by default (``None``)
    the blocks of ``torch.cuda.memory_snapshot()`` on ``device``
    (:func:`regions_from_snapshot`). Pass ``blocks=[]`` to bound them by the driver's
    allocations (whole segments) only. Hazards whose only conflicts involve a pointer of
    unknown direction are ``Report.possible_hazards``, apart from ``Report.hazards``:
    ``Report.clean`` is true when there is no certain hazard, ``Report.strict_clean`` when
    there is none at all. The report is the one ``graphsmith doctor`` prints, format ``live``.

    Raises ``TypeError`` for an object that is not a CUDA graph, ``ValueError`` for a graph
    that holds nothing to read (not kept, reset, or still capturing), and ``RuntimeError``
    naming the driver call and CUDA code when the driver cannot read it.
    """
    raw = getattr(graph, "raw_cuda_graph", None)
    if not callable(raw):
        raise TypeError(
            f"check() takes a torch.cuda.CUDAGraph (with raw_cuda_graph(), PyTorch 2.8 or "
            f"newer), not {type(graph).__name__}"
        )
    try:
        import torch

        capturing = torch.cuda.is_current_stream_capturing()
    except (ImportError, RuntimeError):
        torch, capturing = None, False
    if capturing:
        raise ValueError("check() was called while a CUDA graph capture runs; " + _NOT_KEPT)
    try:
        handle = raw()
    except RuntimeError as e:
        raise ValueError(f"{_NOT_KEPT} ({e})") from e
    try:
        # An int in PyTorch's binding; cuda-python's handle objects convert with int() too.
        handle = int(handle)
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"raw_cuda_graph() returned {type(handle).__name__}, not a cudaGraph_t handle"
        ) from e
    if handle == 0:
        raise ValueError(_NOT_KEPT)
    if device is None:
        if torch is None:
            raise ValueError("check() needs device= when torch cannot be imported")
        device = torch.cuda.current_device()
    device = int(device)
    if blocks is None:
        if torch is None:
            raise ValueError("check() needs blocks= when torch cannot be imported")
        regions = regions_from_snapshot(torch.cuda.memory_snapshot(), device=device)
    else:
        regions = _regions(blocks)
    return check_raw_graph(handle, device, regions=regions)
