"""A capture that breaks: `.item()` inside `torch.cuda.graph` copies to the host and
synchronizes, which a capture forbids. Run it under the tracer to see the line that did it:

    graphsmith trace -- python examples/python/item_in_graph.py
"""

import torch


def step(x):
    y = x * 2
    if y.sum().item() > 0:  # the offending call: a device-to-host copy inside the capture
        y = y + 1
    return y


def main():
    x = torch.ones(1024, device="cuda")
    step(x)  # warm-up outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            step(x)
    except RuntimeError as e:
        print(f"capture failed: {str(e).splitlines()[0]}")


if __name__ == "__main__":
    main()
