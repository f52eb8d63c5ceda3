"""AdamW over stacked copies (dwatt.stacked_adamw): each copy steps as torch's AdamW with its schedule and clipping."""

import torch


def test_stacked_adamw_steps_each_copy_as_torch_adamw_with_its_schedule_and_clipping():
    """`StackedAdamW` against one `torch.optim.AdamW` + linear schedule + `clip_grad_norm_` per copy: copies with
    their own rates and budgets, a copy leaving when its budget ends, gradients large enough to be clipped."""
    from transformers import get_linear_schedule_with_warmup

    from dwatt.stacked_adamw import ADAMW, StackedAdamW

    torch.manual_seed(0)
    start = {"weight": torch.randn(5, 7), "bias": torch.randn(5)}
    rates, budgets = [1e-3, 3e-2, 1e-1], [6, 4, 6]
    stacked = {name: t.unsqueeze(0).repeat(3, *[1] * t.dim()).requires_grad_() for name, t in start.items()}
    optimizer = StackedAdamW(stacked, rates, budgets, max_grad_norm=1.0)
    alone = [{name: t.clone().requires_grad_() for name, t in start.items()} for _ in rates]
    optimizers = [torch.optim.AdamW(p.values(), lr=r, **ADAMW) for p, r in zip(alone, rates)]
    schedules = [get_linear_schedule_with_warmup(o, 0, b) for o, b in zip(optimizers, budgets)]
    for step in range(max(budgets)):
        active = [k for k, b in enumerate(budgets) if b > step]
        x = torch.randn(4, 7) * (10 if step % 2 else 0.1)  # every other step clipped
        loss = lambda p, x=x: ((x @ p["weight"].T + p["bias"]) ** 2).mean()
        sum(loss({n: t[k] for n, t in stacked.items()}) for k in active).backward()
        optimizer.step(active)
        for k in active:
            loss(alone[k]).backward()
            torch.nn.utils.clip_grad_norm_(alone[k].values(), 1.0)
            optimizers[k].step()
            schedules[k].step()
            optimizers[k].zero_grad(set_to_none=True)
        for k in range(3):
            for name in start:
                torch.testing.assert_close(stacked[name][k], alone[k][name], rtol=0, atol=0, msg=f"{name} {k} {step}")
    assert all(t.grad is None for t in stacked.values())
