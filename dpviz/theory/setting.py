"""The theory lab's setting (Ke et al. 2024, §3): a two-layer network on data separable by a direction z.

Data (Ke et al. 2024's separable-data assumption, its Figure 3): z = e₁; an input is
x = y·(γ + ½|ξ|)·z + (I − zzᵀ)g with y ∈ {−1, +1}, ξ ~ N(0, 1), g ~ N(0, I_d / d): every example lies
at distance ≥ γ (the margin) from the hyperplane zᵀx = 0, and its other coordinates are isotropic noise.

Network: f(x) = Σ_j v_j·φ(w_jᵀx), φ = ReLU (or the identity: the linear network). The first layer is
"pretrained": w_j = a·s_j·z + √(1 − a²)·u_j with random signs s_j and unit u_j ⊥ z, so a ∈ [0, 1] is its
alignment with z (a = 0: random features). The head is random, v ~ N(0, I) (Ke et al. 2024's setting), or
"aligned": the least-squares head on the pretrained features, as if linearly probed already.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from dpviz.errors import ConfigError

N_TEST = 512
RIDGE = 1e-3  # λ of the least-squares heads and probes (relative to n), for a well-posed solve


@dataclass(frozen=True, kw_only=True)
class Setting:
    """Every knob of the theory lab (validated on construction).

    Attributes:
        width: m, hidden units.
        dim: d, input dimension.
        n: training examples.
        margin: γ, the data's margin along z.
        alignment: a, the pretrained first layer's alignment with z.
        activation: "relu" (Ke et al. 2024's network) or "linear" (the linear network).
        loss: "logistic" (what DP-SGD's two-class cross-entropy is) or "squared" (closed forms for LP).
        head: "random" (N(0, I)) or "aligned" (the least-squares head on the pretrained features).
        epsilon, delta: the budget of the whole run; ε = ∞ trains without noise.
        clip_norm: C, the per-example gradient clip.
        time: T, the diffusion's training time (both phases).
        lp_share: p, the share of T spent on LP before FFT (LP-FFT).
        dt: h, the Euler–Maruyama step.
        seeds: independent runs averaged (data, initialisation and noise differ).
        seed: the first seed.
    """

    width: int = 32
    dim: int = 16
    n: int = 128
    margin: float = 0.3
    alignment: float = 0.6
    activation: str = "relu"
    loss: str = "logistic"
    head: str = "random"
    epsilon: float = 1.0
    delta: float = 1e-5
    clip_norm: float = 1.0
    time: float = 20.0
    lp_share: float = 0.3
    dt: float = 0.05
    seeds: int = 8
    seed: int = 0

    def __post_init__(self):
        for name, lo, hi in (("width", 2, 512), ("dim", 2, 256), ("n", 8, 4096), ("seeds", 1, 512)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ConfigError(name, f"an integer in [{lo}, {hi}]", v)
        for name, lo, hi in (("margin", 0, 10), ("alignment", 0, 1), ("lp_share", 0, 1)):
            if not _num(getattr(self, name)) or not lo <= getattr(self, name) <= hi:
                raise ConfigError(name, f"a number in [{lo}, {hi}]", getattr(self, name))
        for name in ("clip_norm", "time", "dt"):
            if not _num(getattr(self, name)) or not 0 < getattr(self, name) < math.inf:
                raise ConfigError(name, "a finite number > 0", getattr(self, name))
        if self.time / self.dt > 20000:
            raise ConfigError("dt", f"at least time / 20000 = {self.time / 20000:g}", self.dt)
        if not _num(self.epsilon) or not self.epsilon > 0:
            raise ConfigError("epsilon", "a number > 0 (inf: no noise)", self.epsilon)
        if not _num(self.delta) or not 0 < self.delta < 1:
            raise ConfigError("delta", "a number in (0, 1)", self.delta)
        for name, allowed in (("activation", ("relu", "linear")), ("loss", ("logistic", "squared")),
                              ("head", ("random", "aligned"))):
            if getattr(self, name) not in allowed:
                raise ConfigError(name, f"one of {', '.join(allowed)}", getattr(self, name))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2 ** 31:
            raise ConfigError("seed", "an integer in [0, 2^31)", self.seed)

    @property
    def steps(self) -> int:
        return max(1, round(self.time / self.dt))

    def replace(self, **kw) -> "Setting":
        return replace(self, **kw)

    def to_dict(self) -> dict:
        return asdict(self)


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


def data(s: Setting, count: int, batch: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``batch`` independent data sets of ``count`` examples: x (batch, count, d), y (batch, count) in ±1."""
    y = rng.choice([-1.0, 1.0], size=(batch, count))
    x = rng.standard_normal((batch, count, s.dim)) / math.sqrt(s.dim)
    x[..., 0] = y * (s.margin + 0.5 * np.abs(rng.standard_normal((batch, count))))  # the z = e₁ coordinate
    return x, y


def first_layer(s: Setting, batch: int, rng: np.random.Generator) -> np.ndarray:
    """Pretrained first layers W (batch, m, d) with rows of unit norm and alignment ``s.alignment`` with z."""
    u = rng.standard_normal((batch, s.width, s.dim))
    u[..., 0] = 0
    u /= np.linalg.norm(u, axis=2, keepdims=True)
    w = math.sqrt(1 - s.alignment ** 2) * u
    w[..., 0] = s.alignment * rng.choice([-1.0, 1.0], size=(batch, s.width))
    return w


def act(s: Setting, pre: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """φ(pre) and φ'(pre) (both shaped like ``pre``)."""
    if s.activation == "linear":
        return pre, np.ones_like(pre)
    mask = (pre > 0).astype(pre.dtype)
    return pre * mask, mask


def least_squares_head(h: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The ridge-regularised least-squares head (batch, m) on features h (batch, n, m) for targets y."""
    n, m = h.shape[1], h.shape[2]
    gram = h.transpose(0, 2, 1) @ h + RIDGE * n * np.eye(m, dtype=h.dtype)
    return np.linalg.solve(gram, (h.transpose(0, 2, 1) @ y[..., None]))[..., 0]
