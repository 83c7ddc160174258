"""Measure PyTorch eager's host time per operator: the framework dispatch the host-issue model charges
every kernel (``initiation.op_dispatch``, ``workloads/training/host_issue.py``), and how many operators a
backward pass issues per forward one (``BACKWARD_OPS``).

A stack of small pre-norm Transformer layers (norms, QKV and output projections, the views and
splits between them, scaled-dot-product attention, dropout-adds, a GELU MLP) runs on the CPU at
sizes so small that the work is negligible, so the time per top-level operator the profiler counts
is the host's own: Python module code, the dispatcher and autograd.

Needs PyTorch (not a commodel dependency): ``pip install torch``, then
``python benchmarks/measure_host_ops.py``.
"""

from __future__ import annotations

import sys
import time

HIDDEN, SEQ, LAYERS, REPEATS = 16, 4, 8, 200


def main() -> None:
    try:
        import torch
        import torch.nn.functional as F
        from torch import nn
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        sys.exit("measure_host_ops needs PyTorch: pip install torch")
    torch.set_num_threads(1)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
            self.qkv, self.o = nn.Linear(HIDDEN, 3 * HIDDEN), nn.Linear(HIDDEN, HIDDEN)
            self.f1, self.f2 = nn.Linear(HIDDEN, 4 * HIDDEN), nn.Linear(4 * HIDDEN, HIDDEN)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(self.n1(x)).view(1, SEQ, 3, 2, HIDDEN // 2).unbind(2)
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            a = (
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
                .transpose(1, 2)
                .reshape(1, SEQ, HIDDEN)
            )
            x = x + F.dropout(self.o(a), 0.1, self.training)
            return x + F.dropout(self.f2(F.gelu(self.f1(self.n2(x)))), 0.1, self.training)

    model = nn.Sequential(*[Layer() for _ in range(LAYERS)])
    x = torch.randn(1, SEQ, HIDDEN, requires_grad=True)

    def step() -> None:
        model(x).sum().backward()

    def operators(run) -> int:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run()
        return sum(1 for e in prof.events() if e.cpu_parent is None)

    def seconds(run) -> float:
        for _ in range(20):
            run()
        start = time.perf_counter()
        for _ in range(REPEATS):
            run()
        return (time.perf_counter() - start) / REPEATS

    fwd_ops, all_ops = operators(lambda: model(x)), operators(step)
    fwd_s, all_s = seconds(lambda: model(x)), seconds(step)
    print(f"{LAYERS} layers, hidden {HIDDEN}, sequence {SEQ}, one thread, mean of {REPEATS}")
    print(f"forward:  {fwd_ops} operators, {1e6 * fwd_s / fwd_ops:.1f} us per operator")
    print(f"backward: {all_ops - fwd_ops} operators ({(all_ops - fwd_ops) / fwd_ops:.2f} per forward one), "
          f"{1e6 * (all_s - fwd_s) / (all_ops - fwd_ops):.1f} us per operator")  # fmt: skip


if __name__ == "__main__":
    main()
