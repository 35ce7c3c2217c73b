"""`graphsmith trace` names the Python file and line of the call that broke a capture. Needs
PyTorch with a CUDA GPU; elsewhere every test is reported as skipped, with the reason. With a
GPU, a missing `graphsmith` command is a failure, not a skip.

Each case writes a small script to a temporary folder, runs
`graphsmith trace --json REPORT -- python SCRIPT` and checks, in the JSON report and in the text
report (stderr), that the first failing call's innermost frame of the user's code is the
script's line marked `# FAULT`, and that the capture's begin is the line marked `# BEGIN`.

On a machine with an NVIDIA GPU, in PyTorch's environment:
    pip install --no-deps dist/graphsmith-*.whl
    python -m pytest -v crates/graphsmith-py/tests/test_gpu_trace.py
"""

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

# The body of each script; `step(x)` runs inside `torch.cuda.graph`. The capture fails and
# PyTorch raises, which the script prints and swallows (it exits 0).
CASES = {
    "item": """
        def step(x):
            y = x * 2
            return y.sum().item()  # FAULT
    """,
    "nonzero": """
        def step(x):
            y = x * 2
            return torch.nonzero(y)  # FAULT
    """,
    "synchronize": """
        def step(x):
            y = x * 2
            torch.cuda.synchronize()  # FAULT
            return y
    """,
}

FRAME = """
import torch

{body}

def main():
    x = torch.ones(1 << 16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            x * 2 + 1  # warm-up on a side stream, as torch.cuda.graph asks
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):  # BEGIN
            step(x)
    except Exception as e:  # noqa: BLE001 - the capture is meant to fail
        print("torch raised", type(e).__name__)


main()
"""


@pytest.fixture(scope="module")
def graphsmith_bin():
    path = shutil.which("graphsmith")
    if path is None:
        pytest.fail(
            "a CUDA GPU is here but `graphsmith` is not on PATH: "
            "pip install the graphsmith wheel into this environment"
        )
    return path


def _line_of(source, mark):
    for number, line in enumerate(source.splitlines(), start=1):
        if line.rstrip().endswith("# " + mark):
            return number
    raise AssertionError(f"no line marked {mark}")


def _user_frame(stack):
    """The innermost frame of the user's code in a recorded Python stack, or None."""
    return next((f for f in stack if f.get("origin") == "user"), None)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_report_names_the_scripts_line(case, tmp_path, graphsmith_bin):
    source = FRAME.format(body=textwrap.dedent(CASES[case]).strip())
    script = tmp_path / f"fault_{case}.py"
    script.write_text(source)
    report_path = tmp_path / "report.json"
    run = subprocess.run(
        [graphsmith_bin, "trace", "--json", str(report_path), "--",
         sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    text = run.stderr
    context = f"\n--- stdout:\n{run.stdout}\n--- report (stderr):\n{text}"
    assert report_path.exists(), "no JSON report" + context
    report = json.loads(report_path.read_text())

    captures = [c for p in report["processes"] for c in p["captures"]]
    failed = [c for c in captures if c.get("first")]
    assert failed, "no capture with a failing call" + context
    first = failed[0]["first"]
    assert first["code"] == 900, f"first failing call {first}" + context
    assert first.get("python"), (
        f"no Python frames (python_missing: {first.get('python_missing')})" + context
    )
    fault = _line_of(source, "FAULT")
    user = _user_frame(first["python"])
    assert user is not None, f"no user frame in {first['python']}" + context
    assert (user["file"], user["line"], user["function"]) == (str(script), fault, "step"), (
        f"innermost user frame {user}" + context
    )
    assert f"called at {script}:{fault} in step" in text, "the headline names the line" + context
    assert "<- your code" in text, context

    begin = failed[0]["begin"]
    assert begin.get("python"), (
        f"no Python frames at begin (python_missing: {begin.get('python_missing')})" + context
    )
    user = _user_frame(begin["python"])
    assert user is not None and (user["file"], user["line"]) == (
        str(script),
        _line_of(source, "BEGIN"),
    ), f"begin's innermost user frame {user}" + context
    assert any(f["origin"] == "torch" for f in begin["python"]), (
        "torch.cuda.graph's frames are told apart as torch" + context
    )
    print(f"{case}: {first.get('runtime')} -> {user['file']}:{fault}")
