"""graphsmith.check on live torch.cuda.CUDAGraph objects. Needs PyTorch (2.8 or newer, for
keep_graph) with a CUDA GPU; elsewhere every test is reported as skipped, with the reason.

On a machine with an NVIDIA GPU, in PyTorch's environment:
    pip install --no-deps dist/graphsmith-*.whl
    python -m pytest -v crates/graphsmith-py/tests/test_gpu_torch.py
"""

import pytest

import graphsmith

torch = pytest.importorskip("torch", reason="needs PyTorch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

N = 1 << 16


def _side_stream_graph(join_before_consumer):
    """a -> (side stream) b = a -> (main stream) c = b, with or without the wait that orders
    the consumer after the side stream's copy. Copies are memcpy nodes, whose bytes the
    read-back knows."""
    a = torch.full((N,), 1.0, device="cuda")
    b = torch.full((N,), float("nan"), device="cuda")
    c = torch.full((N,), float("nan"), device="cuda")
    side = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph(keep_graph=True)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        a.mul_(2.0)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            b.copy_(a)
        if join_before_consumer:
            torch.cuda.current_stream().wait_stream(side)
        c.copy_(b)
        torch.cuda.current_stream().wait_stream(side)
    return g, (a, b, c)


def test_missing_wait_stream_is_a_race_on_b():
    g, (_, b, _) = _side_stream_graph(join_before_consumer=False)
    report = graphsmith.check(g)
    assert report.format == "live"
    assert report.nodes >= 3, str(report)
    assert not report.clean, str(report)
    assert any("read-after-write" in h for h in report.hazards), str(report)
    print(report)


def test_wait_stream_makes_it_clean_and_the_graph_still_replays():
    g, (a, b, c) = _side_stream_graph(join_before_consumer=True)
    report = graphsmith.check(g)
    assert report.clean, str(report)
    g.replay()
    torch.cuda.synchronize()
    # a starts at 1.0 and is doubled once by the replay (capture does not run the work).
    expected = torch.full((N,), 2.0, device="cuda")
    assert torch.equal(a, expected) and torch.equal(b, expected) and torch.equal(c, expected)


def test_mlp_on_one_stream_has_no_hazard():
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64)
    ).cuda()
    x = torch.randn(32, 256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(x)  # warm-up outside the capture (cuBLAS workspaces)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(g):
        model(x)
    report = graphsmith.check(g)
    assert report.nodes > 0
    assert report.clean, str(report)
    print(report)


def test_graph_not_kept_is_a_value_error():
    x = torch.zeros(N, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        x.add_(1.0)
    with pytest.raises(ValueError, match="keep_graph=True"):
        graphsmith.check(g)


def test_reset_graph_is_a_value_error():
    g, _ = _side_stream_graph(join_before_consumer=True)
    g.reset()
    with pytest.raises(ValueError, match="keep_graph=True"):
        graphsmith.check(g)


def test_check_while_capturing_is_a_value_error():
    x = torch.zeros(N, device="cuda")
    g = torch.cuda.CUDAGraph(keep_graph=True)
    caught = []
    with torch.cuda.graph(g):
        x.add_(1.0)
        try:
            graphsmith.check(g)
        except ValueError as e:
            caught.append(str(e))
    assert caught and "capture runs" in caught[0]


def test_not_a_graph_is_a_type_error():
    with pytest.raises(TypeError, match="torch.cuda.CUDAGraph"):
        graphsmith.check(object())
