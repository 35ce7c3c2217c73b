"""graphsmith.check on live torch.cuda.CUDAGraph objects. Needs PyTorch (2.8 or newer, for
keep_graph) with a CUDA GPU; elsewhere every test is reported as skipped, with the reason.
PyTorch's own kernels pass tensor pointers inside struct parameters; check() finds them and
bounds them by the caching allocator's blocks (torch.cuda.memory_snapshot()).

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
        y = model(x)
    report = graphsmith.check(g)
    print(report)
    assert report.nodes > 0
    assert report.clean, str(report)
    assert report.possible_hazards == [], str(report)
    # The replay computes what the model computes eagerly.
    expected = model(x)
    y.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.allclose(y, expected, rtol=1e-4, atol=1e-5)


def _warm_up(fn):
    """Runs `fn` once on a side stream, outside any capture (kernel modules load lazily)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def _segment_of(tensor):
    """The address of the caching-allocator segment holding `tensor` (fails when none does)."""
    ptr = tensor.data_ptr()
    for seg in torch.cuda.memory_snapshot():
        if seg["address"] <= ptr < seg["address"] + seg["total_size"]:
            return seg["address"]
    raise AssertionError(f"no segment of torch.cuda.memory_snapshot() holds {ptr:#x}")


def _two_tensors_in_one_segment(n):
    """Two float tensors of `n` elements allocated one after the other, in one segment (the
    caching allocator carves small tensors out of one 2 MiB segment); tries a few pairs."""
    kept = []
    for _ in range(16):
        x = torch.empty(n, device="cuda")
        y = torch.empty(n, device="cuda")
        if _segment_of(x) == _segment_of(y):
            return x, y
        kept.append((x, y))  # keep them, so that the next pair is carved elsewhere
    raise AssertionError("the caching allocator never put two small tensors in one segment")


def test_two_side_streams_writing_two_tensors_of_one_segment_are_clean():
    n = 4096
    a = torch.arange(n, dtype=torch.float32, device="cuda")
    x, y = _two_tensors_in_one_segment(n)
    assert x.data_ptr() != y.data_ptr()
    _warm_up(lambda: (torch.mul(a, 2.0, out=x), torch.add(a, 1.0, out=y)))
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(g):
        main = torch.cuda.current_stream()
        s1.wait_stream(main)
        s2.wait_stream(main)
        with torch.cuda.stream(s1):
            torch.mul(a, 2.0, out=x)
        with torch.cuda.stream(s2):
            torch.add(a, 1.0, out=y)
        main.wait_stream(s1)
        main.wait_stream(s2)
    report = graphsmith.check(g)
    print(report)
    assert report.nodes >= 2, str(report)
    assert report.clean, str(report)
    assert report.hazards == [] and report.possible_hazards == [], str(report)
    # Without the blocks, the two tensors are one segment: the same graph races on it.
    whole = graphsmith.check(g, blocks=[])
    assert not whole.clean, str(whole)
    # Poisoned outputs, then a replay writes both.
    x.fill_(float("nan"))
    y.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(x, a * 2.0) and torch.equal(y, a + 1.0)


def test_missing_wait_stream_between_kernels_is_a_certain_race_naming_both():
    n = 1 << 16
    b = torch.full((n,), 3.0, device="cuda")
    _warm_up(lambda: (b.mul_(2.0), b + 1))
    b.fill_(3.0)
    side = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(g):
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            b.mul_(2.0)  # writes b
        c = b + 1  # reads b on the main stream, no join before: the planted race
        main.wait_stream(side)
    report = graphsmith.check(g)
    print(report)
    races = [h for h in report.hazards if "read-after-write" in h]
    assert races, str(report)
    # Both sides are PyTorch's elementwise kernels, named by their demangled short name.
    assert any(h.count("elementwise_kernel") >= 2 for h in races), str(report)
    # The buffer is b's allocator block, not its whole segment.
    assert any(f"block {b.data_ptr():#x}" in h for h in races), str(report)
    # The graph still replays (the race may or may not bite): c is 3*2+1 or 3+1.
    c.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert bool(((c == 7.0) | (c == 4.0)).all()), c[:8]


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
