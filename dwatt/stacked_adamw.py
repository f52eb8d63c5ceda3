"""AdamW over stacked copies of a head, each with its own peak rate, schedule and clipping: the `Trainer`'s
optimisation as a few elementwise operations over all the copies at once."""

from __future__ import annotations

from collections.abc import Sequence

import torch

ADAMW = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)  # the Trainer's adamw_torch defaults


class StackedAdamW:
    """
    AdamW for stacked copies (`StackedHeads.parameters`), each copy with its own peak learning rate and linear decay
    to 0 at the end of its own budget, its gradient norm clipped on its own: the `Trainer`'s optimisation
    (`torch.optim.AdamW` with `get_linear_schedule_with_warmup` and no warm-up, `clip_grad_norm_` per copy), as a
    few elementwise operations over all the copies at once instead of one optimiser per copy. Copy k's update is
    torch's, operation for operation (tests/test_stacked_heads.py checks it against `torch.optim.AdamW`).
    """

    def __init__(
        self,
        parameters: dict[str, torch.Tensor],
        learning_rates: Sequence[float],
        total_steps: Sequence[int],
        max_grad_norm: float = 1.0,
        betas: tuple[float, float] = ADAMW["betas"],
        eps: float = ADAMW["eps"],
    ):
        self.parameters, self.max_grad_norm, self.betas, self.eps = parameters, max_grad_norm, betas, eps
        self.peaks, self.total_steps = list(learning_rates), list(total_steps)
        self.exp_avg = {name: torch.zeros_like(t) for name, t in parameters.items()}
        self.exp_avg_sq = {name: torch.zeros_like(t) for name, t in parameters.items()}
        self.steps = 0  # every copy still training has taken as many steps as the others

    @torch.no_grad()
    def step(self, active: list[int]) -> None:
        """One step of the `active` copies (each with the gradient it holds), then their gradients zeroed."""
        everyone = active == list(range(len(self.peaks)))
        device = next(iter(self.parameters.values())).device
        index = None if everyone else torch.tensor(active, device=device)
        pick = (lambda t: t) if everyone else (lambda t: t.index_select(0, index))
        grads = {
            name: pick(t.grad) if t.grad is not None else torch.zeros_like(pick(t))
            for name, t in self.parameters.items()
        }
        # clip_grad_norm_ per copy: the norm of the norms of each of its gradients
        norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads.values()], dim=1)
        total = torch.linalg.vector_norm(norms, dim=1)
        scale = torch.clamp(self.max_grad_norm / (total + 1e-6), max=1.0)
        self.steps += 1
        beta1, beta2 = self.betas
        bias_correction1, bias_correction2 = 1 - beta1**self.steps, 1 - beta2**self.steps
        step_sizes = torch.tensor(
            [-self.learning_rate_at(k, self.steps - 1) / bias_correction1 for k in active], dtype=torch.float64
        )
        for name, parameter in self.parameters.items():
            shape = (len(active),) + (1,) * (parameter.dim() - 1)
            grad = grads[name].mul_(scale.view(shape))
            exp_avg, exp_avg_sq = pick(self.exp_avg[name]), pick(self.exp_avg_sq[name])
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (exp_avg_sq.sqrt() / bias_correction2**0.5).add_(self.eps)
            # addcdiv_'s `value * exp_avg / denom`, with each copy's own value
            update = exp_avg.mul(step_sizes.to(device, parameter.dtype).view(shape)).div_(denom)
            if everyone:
                parameter.add_(update)
            else:
                parameter.index_add_(0, index, update)
                self.exp_avg[name].index_copy_(0, index, exp_avg)
                self.exp_avg_sq[name].index_copy_(0, index, exp_avg_sq)
            parameter.grad = None

    def learning_rate_at(self, k: int, step: int) -> float:
        """Copy k's learning rate at `step` (counted from 0): the linear schedule's, without warm-up."""
        total = self.total_steps[k]
        return self.peaks[k] * max(0.0, float(total - step) / float(max(1, total)))


__all__ = ["ADAMW", "StackedAdamW"]
