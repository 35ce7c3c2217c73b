"""``graphsmith.check``: hazards in a live ``torch.cuda.CUDAGraph``."""

from typing import Optional

from graphsmith._native import Report, check_raw_graph

_NOT_KEPT = (
    "check() needs the CUDAGraph's graph, which PyTorch keeps only when the graph was captured "
    "with torch.cuda.CUDAGraph(keep_graph=True), after the capture ended and before reset()"
)


def check(graph, device: Optional[int] = None) -> Report:
    """Reads a ``torch.cuda.CUDAGraph`` back from the driver and checks it for hazards (pairs
    of nodes that no path orders and that touch the same bytes, one of them writing).

    ``graph`` must have been captured with ``torch.cuda.CUDAGraph(keep_graph=True)``; its
    capture must have ended and it must not have been reset. ``device`` is the CUDA device it
    was captured on (default: ``torch.cuda.current_device()``).

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
    return check_raw_graph(handle, int(device))
