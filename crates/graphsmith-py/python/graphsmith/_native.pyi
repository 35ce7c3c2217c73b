"""Types of the extension module graphsmith._native (crates/graphsmith-py/src/lib.rs)."""

import os
from typing import List, Optional, Sequence, Tuple, Union

class Report:
    """What ``doctor`` found in one graph file, or ``check`` in a live graph: the same findings,
    text and JSON as ``graphsmith doctor``."""

    @property
    def path(self) -> str: ...
    @property
    def format(self) -> str: ...
    @property
    def summary(self) -> str: ...
    @property
    def nodes(self) -> int: ...
    @property
    def edges(self) -> int: ...
    @property
    def hazards(self) -> List[str]:
        """The certain hazards, one line each."""
    @property
    def possible_hazards(self) -> List[str]:
        """The possible hazards (to be confirmed by a person), one line each."""
    @property
    def possible(self) -> int:
        """Number of possible hazards."""
    @property
    def clean(self) -> bool:
        """No certain hazard: what ``graphsmith doctor`` exits 0 on."""
    @property
    def strict_clean(self) -> bool:
        """No hazard at all, possible ones included: what ``graphsmith doctor --strict`` exits 0 on."""
    @property
    def unjudged_pairs(self) -> int:
        """Unordered pairs that could not be judged (a dump's kernels): not hazards."""
    @property
    def notes(self) -> List[str]: ...
    def exit_code(self, strict: bool = False) -> int: ...
    def text(self, strict: bool = False) -> str: ...
    def to_dot(self) -> str: ...
    def to_svg(self) -> str: ...
    def to_json(self, strict: bool = False) -> str: ...

def doctor(path: Union[str, "os.PathLike[str]"]) -> Report: ...
def explain(query: Union[int, str]) -> str: ...
def check_raw_graph(
    handle: int,
    device: int,
    label: str = ...,
    regions: Optional[Sequence[Tuple[int, int, str]]] = ...,
) -> Report: ...
