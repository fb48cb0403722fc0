"""Correlated noise: banded matrix factorization (BandMF, DP-FTRL) beside DP-SGD's independent noise.

**The mechanism.** DP-SGD releases the noisy gradients x_t + z_t, each z_t ~ N(0, σ²C² I) drawn afresh. A
matrix mechanism factors the prefix-sum workload A (lower-triangular ones: the SGD iterates are running sums of
the updates) as A = B·M and releases B(MX + Z): equivalently the noisy gradients X + M⁻¹Z, whose noise at step
t is row t of M⁻¹Z. With M lower-triangular, b-banded and Toeplitz (coefficients m_0, …, m_{b−1}), the noise
w_t = (z_t − Σ_{k=1}^{b−1} m_k w_{t−k}) / m_0 needs only the last b − 1 noise vectors (`BandedNoise`), each the
size of the trainable parameters; much of it cancels in the running sums of updates.

**The coefficients** are the banded square root (BSR) of Kalinin & Lampert, "Banded Square Root Matrix
Factorization for Differentially Private Model Training" (NeurIPS 2024): the square root of A is Toeplitz with
r_k = binom(2k, k) / 4^k, and BSR keeps its first b coefficients, a closed form for SGD (no optimization for T).
`coefficients` scales them to unit ℓ2 norm, so every column of M has norm at most 1 and one participation of
an example moves MX by at most the clipping norm C: the sensitivity of DP-SGD. b = 1 is M = I: DP-SGD itself,
bit for bit.

**For SGD with momentum** (mechanism ``bandmf-momentum``), the iterates are θ_t = θ_0 − η Σ_s a_{t−s} g_s
with a_k = Σ_{j≤k} β^j: the workload is Toeplitz with generating function 1/((1−x)(1−βx)). Its square root
is (1−x)^{−1/2}(1−βx)^{−1/2}, whose coefficients are the convolution of r_k with β^k·r_k (Kalinin & Lampert
2024, BSR for SGD with momentum); BSR keeps the first b of them, scaled to unit norm as above, with β the
momentum of dpviz's SGD (`SGD_MOMENTUM`). Only the coefficients differ: the sampling, the sensitivity and so
the accounting are BandMF's. The mechanism's name is its own, so that a stored ``bandmf`` run keeps meaning
the SGD coefficients it was trained with.

**Sampling and accounting** (the theorem and its conditions). Choquette-Choo, Ganesh, McKenna, McMahan, Rush,
Thakurta & Xu, "(Amplified) Banded Matrix Factorization: A unified approach to private training" (NeurIPS
2023), amplification by cyclic Poisson sampling: split the n training records into b fixed parts of n/b (a
seeded permutation, `parts`); step t samples each record of part t mod b independently with probability
p = b·q (so the expected batch stays q·n). A record then takes part only in steps b apart, where the b-banded
columns of M do not overlap, so its participations are independent Gaussian mechanisms on disjoint
coordinates, each amplified by Poisson sampling within its part: T steps of BandMF with noise multiplier σ and
unit-norm columns are exactly as private as ⌈T/b⌉ steps of DP-SGD with sampling rate b·q and noise σ
(`dpsgd_equivalent`). Conditions: b·q ≤ 1; the parts fixed for the whole run; M's columns of norm ≤ 1; the
noise memory reset where the trainable parameters change (each phase is one BandMF mechanism, the phases
composed as DP-SGD's phases are). Any accountant of the seam (`dpviz.privacy.accountants`: PLD, RDP, PRV)
then accounts the equivalent DP-SGD schedule exactly.
"""

from __future__ import annotations

import math

MECHANISMS = ("dp-sgd", "bandmf", "bandmf-momentum")
"""`RunConfig.mechanism`: independent Gaussian noise at every step, or banded correlated noise whose
coefficients are fitted to SGD (``bandmf``) or to SGD with momentum (``bandmf-momentum``)."""
BANDED = ("bandmf", "bandmf-momentum")
"""The mechanisms that correlate the noise over ``bands`` steps (every other one takes bands = 1)."""
SGD_MOMENTUM = 0.9
"""β of dpviz's SGD (`dpviz.training.prepare.optimizer`), which ``bandmf-momentum``'s coefficients fit."""
MAX_BANDS = 64
PARTS = ("independent", "equal")
"""`RunConfig.parts`: how BandMF assigns records to its b parts. ``independent`` (the default): each record's
part is drawn uniformly and independently, so adding or removing one record moves no other (valid under the
add-or-remove neighbours the accountants compose, as jax_privacy's ``PartitionType.INDEPENDENT``). ``equal``:
an equal split of a random permutation, as runs stored before ``parts`` existed were trained; adding a record
moves most others, so its ε holds for zero-out (or replace-one) neighbours only."""
NEIGHBOURS = {"add-or-remove": "add or remove one record", "zero-out": "zero out one record (replace it by a "
              "record that contributes nothing); an equal split of BandMF's parts is not valid for adding or "
              "removing one"}


def momentum(mechanism: str) -> float:
    """β that ``mechanism``'s coefficients are fitted to: SGD's momentum for bandmf-momentum, else 0."""
    return SGD_MOMENTUM if mechanism == "bandmf-momentum" else 0.0


def _sqrt_series(n: int, momentum: float) -> list[float]:
    """The first ``n`` coefficients of (1−x)^{−1/2}·(1−βx)^{−1/2}: the workload's square root."""
    r = [math.comb(2 * k, k) / 4**k for k in range(n)]
    if not momentum:
        return r
    return [sum(r[j] * r[k - j] * momentum ** (k - j) for j in range(k + 1)) for k in range(n)]


def coefficients(bands: int, momentum: float = 0.0) -> tuple[float, ...]:
    """m_0, …, m_{b−1}: BSR's first ``bands`` coefficients of the workload's square root (the prefix sums',
    or with ``momentum`` β those of SGD with momentum), unit ℓ2 norm."""
    if bands < 1:
        raise ValueError(f"bands: at least 1; got {bands}")
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"momentum: in [0, 1); got {momentum}")
    r = _sqrt_series(bands, momentum)
    norm = math.sqrt(sum(c * c for c in r))
    return tuple(c / norm for c in r)


def inverse_coefficients(bands: int, steps: int, momentum: float = 0.0) -> list[float]:
    """a_0, …, a_{T−1}: the first ``steps`` coefficients of M⁻¹ (Toeplitz, not banded), the series inverse of
    m(x): w_t = Σ_k a_k z_{t−k}."""
    m = coefficients(bands, momentum)
    a: list[float] = []
    for n in range(steps):
        a.append(((1.0 if n == 0 else 0.0) - sum(m[k] * a[n - k] for k in range(1, min(n, bands - 1) + 1))) / m[0])
    return a


def noise_factor(bands: int, steps: int | None = None, momentum: float = 0.0) -> float:
    """κ: the variance of the noise in the running sum of ``steps`` updates, per step, relative to DP-SGD's at
    the same σ (DP-SGD's is T·σ²C²; BandMF's is κ·T·σ²C²). This is what multiplies the curvature analysis's
    decelerator σ²C²·tr(H)/(B²c²) over a horizon of T steps (`dpviz.privacy.curvature`).

    The noise of the sum is 1ᵀM⁻¹Z, whose column j has the partial sum S_{T−1−j} of M⁻¹'s coefficients, so
    κ(T) = Σ_{n<T} S_n² / T. ``steps`` None: the long run, S_n → 1/m(1), so κ = 1/(Σ_k m_k)² (≤ 1, equal only
    at b = 1). A single step's own noise is larger instead: its variance is Σ_k a_k² ≥ 1 times DP-SGD's.

    With ``momentum`` β (the coefficients fitted to it, and the optimizer using it) the update at step t is
    η·Σ_{j≤t} β^j·ĝ_{t−j}, so the last iterate's noise is row T−1 of A_β·M⁻¹Z against DP-SGD's A_β·Z:
    κ(T) = Σ_n v_n² / Σ_n u_n², with u the coefficients of 1/((1−x)(1−βx)) and v those of u(x)/m(x). β = 0
    gives the formula above; the long run is 1/m(1)² again.
    """
    m = coefficients(bands, momentum)
    if steps is None:
        return 1.0 / sum(m) ** 2
    if steps < 1:
        raise ValueError(f"steps: at least 1; got {steps}")
    # u(x) = 1/((1−x)(1−βx)) and v(x) = u(x)·a(x) as two first-order recursions each: O(T), not a convolution
    total_v = total_u = partial_a = v = u = 0.0
    for a in inverse_coefficients(bands, steps, momentum):
        partial_a += a
        v, u = momentum * v + partial_a, momentum * u + 1.0
        total_v, total_u = total_v + v * v, total_u + u * u
    return total_v / total_u


def dpsgd_equivalent(*, sigma: float, sample_rate: float, steps: int, bands: int) -> tuple[float, float, int]:
    """(σ, q, T) of the DP-SGD schedule exactly as private as ``steps`` BandMF steps with cyclic Poisson
    sampling over ``bands`` parts: (σ, b·q, ⌈T/b⌉). b = 1 returns its input."""
    if bands == 1:
        return sigma, sample_rate, steps
    return sigma, min(1.0, bands * sample_rate), -(-steps // bands)


def neighbours(*, bands: int, parts: str) -> str:
    """The neighbour relation a run's ε holds for (`NEIGHBOURS`): add-or-remove, except BandMF's equal split."""
    return "zero-out" if bands > 1 and parts == "equal" else "add-or-remove"


def parts(n: int, bands: int, seed: int, split: str = "equal"):
    """(n,) the part of each record, 0 … b−1, fixed by ``seed`` for the whole run (cyclic Poisson sampling):
    ``split`` independent draws each record's part uniformly (`PARTS`), equal splits a permutation evenly."""
    import torch

    if split == "independent":
        return torch.randint(bands, (n,), generator=torch.Generator().manual_seed(seed))
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    out = torch.empty(n, dtype=torch.long)
    out[order] = torch.arange(n) % bands
    return out


class BandedNoise:
    """The noise memory of one BandMF phase: turns each step's fresh Gaussian draws z_t into w_t (row t of
    M⁻¹Z), keeping the last b − 1 of them. ``bands`` = 1 gives back z_t itself (DP-SGD); ``momentum`` β > 0
    takes the coefficients fitted to SGD with momentum β."""

    def __init__(self, bands: int, momentum: float = 0.0):
        self.bands = bands
        self.m = coefficients(bands, momentum)
        self.memory: list[list] = []  # the last b − 1 noise vectors, newest first, each a list of tensors

    def __call__(self, z: list) -> list:
        """w_t for this step's draws ``z`` (one tensor per trainable parameter)."""
        if self.bands == 1:
            return z
        import torch

        w = [t.clone() for t in z]
        for mk, past in zip(self.m[1:], self.memory):
            torch._foreach_add_(w, past, alpha=-mk)
        torch._foreach_div_(w, self.m[0])
        self.memory = [w, *self.memory][: self.bands - 1]
        return w

    def state_dict(self) -> dict:
        return {"bands": self.bands, "memory": [[t.detach().cpu() for t in v] for v in self.memory]}

    def load_state_dict(self, state: dict, device) -> None:
        if state["bands"] != self.bands:
            raise ValueError(f"bands: the snapshot's noise memory has {state['bands']} bands, the run {self.bands}")
        self.memory = [[t.to(device) for t in v] for v in state["memory"]]
