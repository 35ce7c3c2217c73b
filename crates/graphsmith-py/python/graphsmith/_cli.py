"""The ``graphsmith`` command of the wheel: runs the binary in ``graphsmith/_bin/``.

The injection library ``graphsmith trace`` loads lies beside the binary, where the binary looks
for it first, so the same files serve every environment the wheel is installed in.
"""

import os
import sys
from pathlib import Path

_BIN = Path(__file__).resolve().parent / "_bin"


def binary() -> Path:
    """The path of the ``graphsmith`` binary this package carries."""
    return _BIN / "graphsmith"


def injection_library() -> Path:
    """The path of ``libgraphsmith_trace.so``, which ``graphsmith trace`` loads into the traced
    process."""
    return _BIN / "libgraphsmith_trace.so"


def main() -> None:
    """Replaces this process with the ``graphsmith`` binary, passing the arguments on."""
    exe = binary()
    if not exe.is_file():
        sys.exit(
            f"graphsmith: the binary is missing from this installation ({exe}); "
            "reinstall the graphsmith wheel"
        )
    if not os.access(exe, os.X_OK):
        sys.exit(f"graphsmith: {exe} is not executable; reinstall the graphsmith wheel")
    # Flush what Python may have buffered before the process image is replaced.
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, [str(exe), *sys.argv[1:]])
