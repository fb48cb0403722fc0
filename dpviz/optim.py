"""SGD with momentum, Adam and AdamW: the update rules of ``torch.optim`` on CPU, step for step.

Why not ``torch.optim`` itself: its constructor and ``step`` import ``torch._dynamo`` (to mark
themselves not compilable), ≈ 1 s of every run's first step on this machine, for a feature dpviz
never uses. These are the same single-tensor updates in the same order (equal bit for bit on CPU,
tests/test_engine.py checks), over the trainable parameters of one phase. The DP part of a step
(clipping, noise) happens before, in `dpviz.privacy.dpsgd`; an optimizer only post-processes the
privatized gradient, so it does not touch the guarantee.
"""

from __future__ import annotations

import torch


class _Optimizer:
    """A list of parameters, one learning rate, and per-parameter ``state`` (torch's layout)."""

    def __init__(self, params, lr: float):
        self.params = [p for p in params]
        self.lr = float(lr)
        self.state: dict[torch.Tensor, dict] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for p in self.params:
            if p.grad is not None:
                self._update(p, p.grad, self.state.setdefault(p, {}))

    def _update(self, p: torch.Tensor, g: torch.Tensor, st: dict) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict:
        """{"lr", "state": {index of the parameter: its state}} (a resumed run's optimizer, `dpviz.resume`)."""
        index = {id(p): i for i, p in enumerate(self.params)}
        return {"lr": self.lr, "state": {index[id(p)]: {k: v.detach().clone() if torch.is_tensor(v) else v
                                                       for k, v in st.items()} for p, st in self.state.items()}}

    def load_state_dict(self, doc: dict) -> None:
        """The state `state_dict` gave, on this optimizer's parameters (the same list, in the same order)."""
        self.lr = doc["lr"]
        self.state = {self.params[i]: {k: v.to(self.params[i].device) if torch.is_tensor(v) else v
                                       for k, v in st.items()} for i, st in doc["state"].items()}


class SGD(_Optimizer):
    """``torch.optim.SGD(params, lr, momentum)``: buf ← m·buf + g (g on the first step); p ← p − lr·buf."""

    def __init__(self, params, lr: float, momentum: float = 0.9):
        super().__init__(params, lr)
        self.momentum = momentum

    def _update(self, p, g, st):
        buf = st.get("momentum_buffer")
        if buf is None:
            buf = st["momentum_buffer"] = g.detach().clone()
        else:
            buf.mul_(self.momentum).add_(g)
        p.add_(buf, alpha=-self.lr)


class Adam(_Optimizer):
    """``torch.optim.Adam`` / ``AdamW`` (``decoupled=True``) with betas (0.9, 0.999) and eps 1e-8.

    m ← lerp(m, g, 1 − β₁); v ← β₂·v + (1 − β₂)·g²; p ← p − lr/(1 − β₁ᵗ) · m / (√v / √(1 − β₂ᵗ) + eps),
    with AdamW first shrinking p ← p·(1 − lr·wd)."""

    def __init__(self, params, lr: float, weight_decay: float = 0.0, decoupled: bool = False,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        super().__init__(params, lr)
        self.weight_decay, self.decoupled, self.betas, self.eps = weight_decay, decoupled, betas, eps

    def _update(self, p, g, st):
        b1, b2 = self.betas
        if not st:
            st.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
        st["step"] += 1
        if self.weight_decay:
            if self.decoupled:
                p.mul_(1 - self.lr * self.weight_decay)
            else:
                g = g.add(p, alpha=self.weight_decay)
        st["exp_avg"].lerp_(g, 1 - b1)
        st["exp_avg_sq"].mul_(b2).addcmul_(g, g, value=1 - b2)
        t = st["step"]
        denom = (st["exp_avg_sq"].sqrt() / (1 - b2 ** t) ** 0.5).add_(self.eps)
        p.addcdiv_(st["exp_avg"], denom, value=-self.lr / (1 - b1 ** t))


def make(name: str, params, lr: float) -> _Optimizer:
    """The optimizer a run config names: ``sgd`` (momentum 0.9), ``adam``, ``adamw`` (weight decay 0.01,
    torch's default)."""
    if name == "sgd":
        return SGD(params, lr, momentum=0.9)
    if name == "adam":
        return Adam(params, lr)
    return Adam(params, lr, weight_decay=0.01, decoupled=True)
