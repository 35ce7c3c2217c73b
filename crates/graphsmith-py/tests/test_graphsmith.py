"""Tests of the installed graphsmith package (pytest; needs no GPU).

Run them against an installed wheel (scripts/build-wheel.sh --test does) or after
`maturin develop`; the graph files are the model crate's fixtures in this checkout.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import graphsmith

FIXTURES = (
    Path(__file__).resolve().parents[2] / "graphsmith-model" / "tests" / "fixtures" / "driver-dot"
)


def test_to_svg_renders_with_graphviz_or_names_it(tmp_path, monkeypatch):
    report = graphsmith.doctor(FIXTURES / "attention-racy.json")
    if shutil.which("dot"):
        svg = report.to_svg()
        assert "<svg" in svg and "attention" in svg
    # Without Graphviz on PATH the error names it and the way around it.
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="Graphviz.*to_dot"):
        report.to_svg()


def test_racy_json_names_both_hazards():
    report = graphsmith.doctor(FIXTURES / "attention-racy.json")
    assert report.format == "json"
    assert (report.nodes, report.edges) == (4, 1)
    assert not report.clean
    assert len(report.hazards) == 2
    assert "read-after-write on 'q'" in report.hazards[0]
    assert "'q-proj' (n0) writes, 'attention' (n3) reads" in report.hazards[0]
    assert "read-after-write on 'k'" in report.hazards[1]
    assert "hazards: 2" in str(report)
    assert "2 hazard(s)" in repr(report)
    data = json.loads(report.to_json())
    assert data["format"] == "json"
    assert data["summary"]["nodes"] == 4
    assert len(data["hazards"]) == 2
    assert data["hazard_counts"] == {"certain": 2, "possible": 0}
    assert (data["strict"], data["exit_code"]) == (False, 1)
    dot = report.to_dot()
    assert dot.startswith("digraph") and "q-proj" in dot


def test_fixed_json_is_clean():
    report = graphsmith.doctor(str(FIXTURES / "attention-fixed.json"))
    assert report.clean
    assert report.hazards == []
    assert "hazards: none" in str(report)


def test_pytorch_dump_race_is_found_and_fix_is_clean():
    # A copy beside a kernel in a dump: possible hazards only (a dump holds no kernel
    # arguments), so the graph is clean but not strict_clean.
    racy = graphsmith.doctor(FIXTURES / "torch" / "torch-copy-dtod-racy.dot")
    fixed = graphsmith.doctor(FIXTURES / "torch" / "torch-copy-dtod-fixed.dot")
    assert racy.format == fixed.format == "driver_dot"
    assert racy.hazards == [] and racy.possible == len(racy.possible_hazards) == 2
    assert racy.clean and not racy.strict_clean
    assert (racy.exit_code(), racy.exit_code(strict=True)) == (0, 1)
    assert fixed.clean and fixed.strict_clean and fixed.possible == 0


def test_not_a_dump_is_a_value_error_naming_the_line(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("\n\nhello\n")
    with pytest.raises(ValueError, match=r"notes\.txt: line 3: neither graphsmith JSON"):
        graphsmith.doctor(bad)


def test_broken_json_and_dot_are_value_errors(tmp_path):
    broken_json = tmp_path / "g.json"
    broken_json.write_text('{"label": ')
    with pytest.raises(ValueError, match=r"g\.json"):
        graphsmith.doctor(broken_json)
    broken_dot = tmp_path / "g.dot"
    broken_dot.write_text("digraph { a -> ")
    with pytest.raises(ValueError, match=r"g\.dot"):
        graphsmith.doctor(broken_dot)


def test_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(OSError, match="cannot read"):
        graphsmith.doctor(tmp_path / "absent.json")


def test_explain_by_code_and_name():
    by_code = graphsmith.explain(900)
    assert by_code == graphsmith.explain("900")
    assert "900" in by_code
    assert by_code == graphsmith.explain("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED")
    assert by_code == graphsmith.explain("cudaErrorStreamCaptureUnsupported")


@pytest.mark.parametrize("query", ["", "42", "CUDA_ERROR_NOPE", 1.5])
def test_explain_unknown_is_a_value_error(query):
    with pytest.raises(ValueError):
        graphsmith.explain(query)


def _run(*args):
    return subprocess.run(
        ["graphsmith", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_binary_and_injection_library_are_installed():
    assert graphsmith.binary().is_file()
    assert os.access(graphsmith.binary(), os.X_OK)
    assert graphsmith.injection_library().is_file()
    assert graphsmith.injection_library().parent == graphsmith.binary().parent


def test_command_help_doctor_explain():
    help_text = _run("--help")
    assert help_text.returncode == 0, help_text.stderr
    for command in ["trace", "doctor", "explain"]:
        assert command in help_text.stdout
    racy = _run("doctor", str(FIXTURES / "attention-racy.json"))
    assert racy.returncode == 1, racy.stderr
    assert "hazards: 2" in racy.stdout
    fixed = _run("doctor", "--json", str(FIXTURES / "attention-fixed.json"))
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout)["hazards"] == []
    explained = _run("explain", "900")
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout.strip() == graphsmith.explain(900).strip()


def test_python_dash_m_runs_the_command():
    out = subprocess.run(
        [sys.executable, "-m", "graphsmith", "explain", "900"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "900" in out.stdout


def test_trace_finds_its_injection_library():
    # No GPU is needed: the traced command is Python itself, which makes no CUDA call. The
    # tracer must be found (no "not found ... runs untraced" note) and the command's exit
    # code passed on.
    out = _run("trace", "--", sys.executable, "-c", "import sys; sys.exit(3)")
    assert out.returncode == 3, out.stderr
    assert "libgraphsmith_trace.so not found" not in out.stderr


def test_check_refuses_what_is_not_a_cuda_graph():
    with pytest.raises(TypeError, match=r"torch\.cuda\.CUDAGraph"):
        graphsmith.check(object())


def test_check_on_a_graph_not_kept_is_a_value_error():
    class NotKept:
        """What PyTorch's CUDAGraph does without keep_graph=True."""

        def raw_cuda_graph(self):
            raise RuntimeError("the graph was not kept")

    with pytest.raises(ValueError, match=r"keep_graph=True.*the graph was not kept"):
        graphsmith.check(NotKept(), device=0)


def test_check_of_a_null_handle_is_a_value_error():
    class Null:
        def raw_cuda_graph(self):
            return 0

    with pytest.raises(ValueError, match="keep_graph=True"):
        graphsmith.check(Null(), device=0)
    with pytest.raises(ValueError, match="null"):
        graphsmith._native.check_raw_graph(0, 0)


def test_check_of_something_that_is_not_a_handle_is_a_type_error():
    class Odd:
        def raw_cuda_graph(self):
            return "graph"

    with pytest.raises(TypeError, match="not a cudaGraph_t handle"):
        graphsmith.check(Odd(), device=0)


def _empty_node(i, label, mode):
    access = {"buffer": 4096, "label": "x", "offset": 0, "len": 256, "mode": mode}
    return {"id": i, "label": label, "kind": "empty", "accesses": [access]}


def test_possible_hazards_are_reported_apart_from_certain_ones(tmp_path):
    # w writes x, r reads it (certain); u touches it in an unknown direction (possible).
    graph = {
        "label": "g",
        "nodes": [
            _empty_node(0, "w", "write"),
            _empty_node(1, "r", "read"),
            {
                "id": 2,
                "label": "u",
                "kind": "empty",
                "accesses": [{"buffer": 8192, "label": "y", "offset": 0, "len": 8, "mode": "unknown"}],
            },
            {
                "id": 3,
                "label": "v",
                "kind": "empty",
                "accesses": [{"buffer": 8192, "label": "y", "offset": 0, "len": 8, "mode": "read"}],
            },
        ],
        "edges": [],
    }
    path = tmp_path / "g.json"
    path.write_text(json.dumps(graph))
    report = graphsmith.doctor(path)
    assert not report.clean and not report.strict_clean
    assert len(report.hazards) == 1 and "read-after-write on 'x'" in report.hazards[0]
    assert len(report.possible_hazards) == report.possible == 1
    assert report.possible_hazards[0].startswith("possible write on 'y'")
    text = str(report)
    assert (
        "\nhazards: 1 certain, 1 possible (possible ones do not fail; --strict fails on them)\n"
        "  1. read-after-write on 'x'"
    ) in text
    assert "\n  2. possible write on 'y'" in text
    assert "\n     only possible: whether 'u' writes these bytes is unknown" in text
    assert "1 hazard(s), 1 possible" in repr(report)


def _segment(address, blocks, pool=(0, 0), device=0):
    return {"device": device, "address": address, "segment_pool_id": pool, "blocks": blocks}


def test_regions_from_snapshot_keep_each_block_of_a_segment_apart():
    seg = 0x7F00_0000_0000
    snapshot = [
        _segment(
            seg,
            [
                {"size": 512, "state": "active_allocated"},
                {"size": 512, "state": "active_pending_free"},
                {"size": 1024, "state": "inactive"},
                {"size": 0, "state": "active_allocated"},
            ],
        ),
        _segment(
            seg + (1 << 30),
            [{"address": seg + (1 << 30) + 4096, "size": 2048, "state": "active_allocated"}],
            pool=(1, 2),
        ),
        _segment(seg + (2 << 30), [{"size": 64, "state": "active_allocated"}], device=1),
    ]
    regions = graphsmith.regions_from_snapshot(snapshot, device=0)
    assert regions == [
        (seg, 512, "block 0x7f0000000000+512 (segment 0x7f0000000000)"),
        (seg + 512, 512, "block 0x7f0000000200+512 (segment 0x7f0000000000)"),
        (seg + 1024, 1024, "free block 0x7f0000000400+1024 (segment 0x7f0000000000)"),
        (
            seg + (1 << 30) + 4096,
            2048,
            "block 0x7f0040001000+2048 (segment 0x7f0040000000, pool 1,2)",
        ),
    ]
    active = graphsmith.regions_from_snapshot(snapshot, device=0, include_free=False)
    assert [r[0] for r in active] == [seg, seg + 512, seg + (1 << 30) + 4096]
    every_device = graphsmith.regions_from_snapshot(snapshot)
    assert every_device[-1] == (seg + (2 << 30), 64, "block 0x7f0080000000+64 (segment 0x7f0080000000)")
    assert graphsmith.regions_from_snapshot([]) == []


def test_check_takes_blocks_as_tuples_and_refuses_anything_else():
    from graphsmith._check import _regions

    assert _regions([(4096, 256), (8192, 16, "b")]) == [
        (4096, 256, "block 0x1000+256"),
        (8192, 16, "b"),
    ]
    with pytest.raises(TypeError, match="check\\(blocks=...\\)"):
        _regions([4096])
    with pytest.raises(ValueError, match="negative"):
        _regions([(-1, 4)])


# The one doctor: what the Python package returns is what `graphsmith doctor` prints.


def _doctor_cli(*args):
    return _run("doctor", *[str(a) for a in args])


@pytest.mark.parametrize(
    "name",
    [
        "attention-racy.json",
        "attention-fixed.json",
        "chain.dot",
        "kinds-verbose.dot",
        "runtime-api/memcpy3d-racy.dot",
        "torch/torch-index-put-racy.dot",
    ],
)
def test_text_json_and_exit_codes_are_the_commands(name):
    path = FIXTURES / name
    report = graphsmith.doctor(path)
    for strict in (False, True):
        flags = ["--strict"] if strict else []
        text = _doctor_cli(path, *flags)
        assert text.stdout == report.text(strict=strict), text.stderr
        assert text.returncode == report.exit_code(strict=strict)
        data = _doctor_cli(path, "--json", *flags)
        assert data.stdout == report.to_json(strict=strict) + "\n", data.stderr
    assert str(report) == report.text()


def test_possible_hazards_only_summary_line_in_both_modes():
    report = graphsmith.doctor(FIXTURES / "runtime-api" / "memcpy3d-racy.dot")
    assert report.clean and not report.strict_clean
    assert report.hazards == [] and report.possible == 2
    assert (
        "\nhazards: 0 certain, 2 possible (possible ones do not fail; --strict fails on them)\n"
        in str(report)
    )
    assert "\nhazards: 0 certain, 2 possible (--strict: possible ones fail too)\n" in report.text(
        strict=True
    )
    data = json.loads(report.to_json(strict=True))
    assert data["hazard_counts"] == {"certain": 0, "possible": 2}
    assert (data["strict"], data["exit_code"]) == (True, 1)


def test_an_unjudged_pair_is_a_note():
    report = graphsmith.doctor(FIXTURES / "torch" / "torch-index-put-racy.dot")
    assert report.clean and report.strict_clean
    assert report.unjudged_pairs == 1
    assert (
        "1 unordered pair(s) of nodes that both run kernels (kernel nodes, or child graphs and "
        "conditionals holding kernels) cannot be judged from a dump: not counted as hazards"
    ) in report.notes
    assert (
        "\nhazards: none found; 1 unordered pair(s) with kernels not judged (see the notes)\n"
        in str(report)
    )


def _conditional_graph():
    """A WHILE node whose body races (produce writes x, consume reads it) and holds a kernel
    whose memory the JSON does not list."""
    kernel = {
        "id": 2,
        "label": "sample",
        "kind": "kernel",
        "name": "sample",
        "grid": {"x": 1, "y": 1, "z": 1},
        "block": {"x": 32, "y": 1, "z": 1},
        "shared_mem_bytes": 0,
        "args": [],
    }
    body = {
        "label": "decode",
        "nodes": [_empty_node(0, "produce", "write"), _empty_node(1, "consume", "read"), kernel],
        "edges": [],
    }
    loop = {
        "id": 0,
        "label": "loop",
        "kind": "conditional",
        "conditional": "while",
        "bodies": 1,
        "body_graphs": [body],
    }
    return {"label": "step", "nodes": [loop], "edges": []}


def test_a_hazard_inside_a_conditional_body_is_found(tmp_path):
    path = tmp_path / "step.json"
    path.write_text(json.dumps(_conditional_graph()))
    report = graphsmith.doctor(path)
    assert not report.clean
    assert len(report.hazards) == 1
    assert report.hazards[0].startswith("read-after-write on 'x'")
    assert report.hazards[0].endswith("in graph 'step' > node 'loop' (n0) > body 0 graph 'decode'")
    text = str(report)
    assert (
        "\nhazards: 1\n"
        "  1. read-after-write on 'x' (0x1000) bytes [0, 256)\n"
        "     'produce' (n0) writes, 'consume' (n1) reads; no path orders them\n"
        "     in graph 'step' > node 'loop' (n0) > body 0 graph 'decode'\n"
        "     fix: add edge produce -> consume (n0 -> n1)\n"
    ) in text
    # The kernel inside the body is counted in the notes (every nested graph is walked).
    assert report.notes == [
        "1 kernel node(s) have no known memory accesses (the JSON lists none): their hazards "
        "cannot be checked; graphsmith JSON from the runtime or a live read-back has them"
    ]
    assert text == _doctor_cli(path).stdout
