"""graphsmith for Python: CUDA graphs made safe and debuggable.

- ``graphsmith.doctor(path)``: shape and hazards of a graph file (graphsmith JSON, or a
  ``cudaGraphDebugDotPrint`` dump such as ``torch.cuda.CUDAGraph.debug_dump`` writes).
- ``graphsmith.check(g)``: the same for a ``torch.cuda.CUDAGraph`` captured with
  ``keep_graph=True``, read back from the driver, kernel pointers bounded by the caching
  allocator's blocks (``graphsmith.regions_from_snapshot``).
- ``graphsmith.explain(code)``: the failure catalogue's entry for a CUDA error (``900``,
  ``"cudaErrorStreamCaptureUnsupported"``).
- the ``graphsmith`` command (``graphsmith trace -- python train.py`` names the call that broke
  each CUDA graph capture), installed with this package; ``graphsmith.binary()`` is its path.
"""

from graphsmith._check import check, regions_from_snapshot
from graphsmith._cli import binary, injection_library
from graphsmith._native import Report, doctor, explain

__all__ = [
    "Report",
    "binary",
    "check",
    "doctor",
    "explain",
    "injection_library",
    "regions_from_snapshot",
]
