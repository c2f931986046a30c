"""Adam for the tile policy, step for step as `torch.optim.Adam` computes it on CPU tensors.

torch's optimizers import torch._dynamo when the first one is made (2-4 s per run on these
machines, more than the policy's whole training); this is the same update without that import.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class Adam:
    """Kingma & Ba's Adam without weight decay or amsgrad, torch's single-tensor arithmetic."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.params = list(params)
        self.lr, self.betas, self.eps = lr, betas, eps
        self.steps = [0] * len(self.params)  # per parameter: one without a gradient is skipped
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self) -> None:
        for param in self.params:
            param.grad = None

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = self.betas
        for i, (param, exp_avg, exp_avg_sq) in enumerate(
                zip(self.params, self.exp_avg, self.exp_avg_sq, strict=True)):
            if param.grad is None:
                continue
            self.steps[i] += 1
            bias_correction1 = 1 - beta1 ** self.steps[i]
            bias_correction2_sqrt = (1 - beta2 ** self.steps[i]) ** 0.5
            grad = param.grad
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(self.eps)
            param.addcdiv_(exp_avg, denom, value=-self.lr / bias_correction1)
