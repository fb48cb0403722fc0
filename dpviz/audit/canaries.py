"""Canaries inside one training run: white-box gradient canaries and black-box input canaries.

Each of the m canaries is included with probability ½ (bits from the auditor's own seed, never seen by
training). Included canaries are records of the private training set like any other: they count in n
(so q = B/n and T are those of the enlarged set) and each step takes them by the run's own sampler,
`dpviz.training.loop.Loop._sample` (Poisson at rate q, or BandMF's cyclic parts at rate b·q); excluded ones
are never touched. A sampler that ignored BandMF's parts would sample the canaries the same wrong way, and
the auditor, scoring under the claimed mechanism, would see them where the claim says they cannot be.

* `GradientCanaries` (white-box, after Nasr et al. 2023): a sampled canary adds a per-sample gradient
  G·u_c of norm G = `CANARY_NORM`·C along its own random unit direction u_c, *before* clipping, through
  the mechanism's own clip factors (`privacy.clipping.clip_factors`): a mechanism that skips clipping lets it through
  G/C times too large. The auditor sees every released (noisy) gradient sum Z_t and scores canary c by
  the log-likelihood ratio of its projections x_t = ⟨Z_t, u_c⟩ under the claimed mechanism:
  Σ_t log(1 − q + q·exp((a·x_t − a²/2)/(σC)²)), with a the clipped contribution (C for Abadi clipping).
  Under BandMF (`dpviz.privacy.bandmf`, b bands) canary c belongs to one part, assigned as the run assigns
  its records (`RunConfig.parts`: independent or equal, from the auditor's seed), is sampled by the run's
  sampler at that part's steps with probability b·q, and the auditor undoes the correlation:
  y_t = Σ_j m_j·x_{t−j} carries independent N(0, (σC)²) noise, and a participation at step s adds a·m_{t−s} to y_s … y_{s+b−1}, a block no
  other participation of c overlaps. The score sums over c's blocks log(1 − bq + bq·exp((a·⟨m, y⟩ − a²‖m‖²/2)/(σC)²)),
  the exact likelihood ratio of the equivalent DP-SGD schedule the accountant composes.
* `InputCanaries` (black-box): images with a random wrong label (drawn from the private training images,
  or out-of-distribution ±1 patterns), appended to the training split: ordinary records that the run's
  sampler draws (and assigns to BandMF's parts) like every other; only the final model is seen, scored by −loss.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from dpviz.privacy import bandmf
from dpviz.privacy import clipping as clip  # module, not the `clipping` arguments below
from dpviz.training import loop as run_loop  # the run's sampler, `Loop._sample`, read at every step

CANARY_NORM = 10.0  # a gradient canary's norm before clipping, in units of C
# Without DP (ε = ∞) nothing clips or hides a canary; its norm then only has to stand out of the real
# gradients' projections on its direction (≈ 4 per step and persistent on the default task).
NOISELESS_NORM = 1000.0
MAX_COORDS = 4096  # directions live on at most this many random coordinates of the trainable parameters


def inclusion_bits(m: int, seed: int) -> np.ndarray:
    """(m,) bool: which canaries are in the training set, each with probability ½ (the auditor's secret)."""
    return np.random.default_rng([seed, 1]).random(m) < 0.5


class _Sampler:
    """What `Loop._sample` reads of a run, for the canaries: their own stream of draws (the auditor's), their
    parts and the phase's band count; the sampling itself is the run's code, looked up at every step."""

    cancel = None  # the run's own sampling of its records stops a cancelled run
    dev = torch.device("cpu")

    def __init__(self, gen: torch.Generator):
        self.gen_sample, self.bands, self.parts = gen, 1, None

    def __getattr__(self, name):  # `Loop._sample` reads more of the run than this: say what to add here
        raise AttributeError(f"Loop._sample reads Loop.{name}, which the audit's canary sampler "
                             f"(dpviz.audit.canaries._Sampler) does not provide")


class GradientCanaries:
    """White-box canaries added to every private step's clipped sum and scored from the released sums."""

    virtual = True  # steps add and score them (`dpsgd.private_step`); they are no images of the data

    def __init__(self, included: np.ndarray, *, seed: int, split: str = "equal"):
        """``split``: how BandMF's parts are assigned (`RunConfig.parts`), as the run assigns its records."""
        self.included = torch.from_numpy(included)
        self.m, self.seed, self.split = len(included), seed, split
        self.virtual_records = int(included.sum())  # records of n beyond the data: the included canaries
        self.gen = torch.Generator().manual_seed(seed)
        self._sampler = _Sampler(self.gen)
        self.scores = torch.zeros(self.m, dtype=torch.float64)
        self._space = None  # (params' ids, coordinates S, directions U (m, |S|)) of the current phase
        self.sample_rate = 0.0  # q of the run, set once the schedule is known (`dpviz.audit.run`)
        self.enter_phase(1)

    def enter_phase(self, bands: int, momentum: float = 0.0) -> None:
        """A new phase: a new mechanism, DP-SGD (``bands`` 1) or BandMF (its coefficients fitted to
        ``momentum`` β), whose noise memory starts empty."""
        if getattr(self, "bands", 1) > 1:
            self._close_blocks()
        self.bands, self._k = bands, 0  # the phase's step
        self._coef = torch.tensor(bandmf.coefficients(bands, momentum), dtype=torch.float64)  # m_0 … m_{b−1}
        # (m,) canary c's part: it may take part at the steps ≡ its part (mod b); fixed for the run (the seed)
        self._part = (bandmf.parts(self.m, bands, self.seed * 7 + 3, self.split) if bands > 1
                      else torch.zeros(self.m, dtype=torch.long))
        self._sampler.bands, self._sampler.parts = bands, self._part
        self._past: list[torch.Tensor] = []  # the last b − 1 projections x_t (m,), newest first
        self._dot = torch.zeros(self.m, dtype=torch.float64)  # (m,) ⟨m, y⟩ over c's open block
        self._len = torch.zeros(self.m, dtype=torch.long)  # (m,) steps into c's open block (0: none open)

    def _directions(self, params) -> tuple[torch.Tensor, torch.Tensor]:
        """Coordinates S and unit directions U (m, |S|) for this parameter set (new per phase)."""
        key = tuple(id(p) for p in params)
        if self._space is None or self._space[0] != key:
            D = sum(p.numel() for p in params)
            g = torch.Generator().manual_seed(self.seed * 7919 + len(key) * 104729 + D)
            S = torch.randperm(D, generator=g)[:min(D, MAX_COORDS)].sort().values
            U = torch.randn(self.m, len(S), generator=g, dtype=torch.float64)
            self._space = (key, S, U / U.norm(dim=1, keepdim=True))
        return self._space[1], self._space[2]

    def _contribution(self, clip_norm: float | None, clipping: str, k: int = 1) -> torch.Tensor:
        """(k,) what a sampled canary adds along its direction: G·c(G) after clipping (C for Abadi)."""
        if not clip_norm:
            return torch.full((k,), NOISELESS_NORM, dtype=torch.float64)
        G = torch.full((k,), CANARY_NORM * clip_norm, dtype=torch.float64)
        return G * clip.clip_factors(G, clip_norm, clipping)

    def sampled(self) -> torch.Tensor:
        """(m,) bool: the included canaries this step takes, drawn by the run's sampler (`Loop._sample`: Poisson
        at rate q, or under BandMF the canaries of this step's part at rate b·q) from the auditor's stream."""
        k = self._k if self.bands > 1 else None
        idx = run_loop.Loop._sample(self._sampler, self.m, self.sample_rate, k)
        taken = torch.zeros(self.m, dtype=torch.bool)
        taken[idx.cpu()] = True
        return taken & self.included

    def add(self, params, *, clip_norm: float | None, clipping: str = "abadi", scale: float = 1.0) -> None:
        """Add the clipped gradients of this step's sampled canaries (times ``scale``) to ``p.grad``.

        ``clip_norm`` None: a non-private step (ε = ∞), whose canaries enter unclipped.
        """
        S, U = self._directions(params)
        sampled = self.sampled()  # (m,)
        a = self._contribution(clip_norm, clipping, int(sampled.sum()))
        delta = torch.zeros(sum(p.numel() for p in params), dtype=torch.float64)
        delta[S] = (a @ U[sampled]) * scale  # Σ_c a_c u_c on the coordinates S
        for p, chunk in zip(params, delta.split([p.numel() for p in params])):
            p.grad = p.grad + chunk.view_as(p).to(p.grad)

    def observe(self, params, *, scale: float, noise_std: float, clip_norm: float | None,
                clipping: str = "abadi") -> None:
        """Score every canary on this step's released gradients (``scale`` turns them back into the sum)."""
        S, U = self._directions(params)
        flat = torch.cat([p.grad.detach().reshape(-1).cpu().double() for p in params])
        x = U @ flat[S] * scale  # (m,): ⟨Z_t, u_c⟩
        if noise_std == 0:  # no noise: the projection itself
            self.scores += x
            return
        self._a, self._s2 = float(self._contribution(clip_norm, clipping)[0]), noise_std ** 2
        if self.bands == 1:
            self.scores += self._llr(x, torch.ones_like(x))
            return
        self._banded(x)

    def _llr(self, dot: torch.Tensor, norm2: torch.Tensor) -> torch.Tensor:
        """(m,) log-likelihood ratio of one participation opportunity: released ⟨m, y⟩ = ``dot`` over a block
        of squared coefficient norm ``norm2`` (1 for DP-SGD's single step), sampled with probability b·q."""
        a, p = self._a, self.bands * self.sample_rate
        return torch.logaddexp(torch.tensor(math.log1p(-p), dtype=torch.float64),
                               math.log(p) + (a * dot - a * a * norm2 / 2) / self._s2)

    def _banded(self, x: torch.Tensor) -> None:
        """One BandMF step: decorrelate x_t into y_t, close the blocks of the canaries whose part starts a
        new one here, and add m_j·y_t to every open block (j its step into the block)."""
        y = self._coef[0] * x
        for mk, past in zip(self._coef[1:], self._past):
            y += mk * past
        self._past = [x, *self._past][: self.bands - 1]
        starting = self._part == self._k % self.bands
        self._close_blocks(starting)
        self._len[starting] = 0
        open_ = starting | (self._len > 0)
        self._dot[open_] += self._coef[self._len[open_]] * y[open_]
        self._len[open_] += 1
        self._k += 1

    def _close_blocks(self, which: torch.Tensor | None = None) -> None:
        """Add the score of the open blocks among ``which`` (all of them by default); a block cut short by
        the phase's end counts its first coefficients only."""
        done = self._len > 0 if which is None else which & (self._len > 0)
        if done.any():
            norm2 = (self._coef ** 2).cumsum(0)[self._len[done] - 1]
            self.scores[done] += self._llr(self._dot[done], norm2)
        self._dot[done], self._len[done] = 0.0, 0

    def final_scores(self, model=None, device=None) -> np.ndarray:
        if self.bands > 1:
            self._close_blocks()
        return self.scores.numpy().copy()


class InputCanaries:
    """Black-box canaries: images with a wrong label, appended to the training set when included."""

    virtual = False
    virtual_records = 0  # included canaries are images of the training split (`extend`)

    def __init__(self, included: np.ndarray, *, seed: int, kind: str, bundle):
        g = torch.Generator().manual_seed(seed * 31 + 5)
        m, K = len(included), bundle.num_classes
        if kind == "mislabeled":  # private-distribution images (with replacement) under a wrong label
            idx = torch.randint(len(bundle.y_train), (m,), generator=g)
            self.x = bundle.x_train[idx].clone()
            self.y = (bundle.y_train[idx] + torch.randint(1, K, (m,), generator=g)) % K
        elif bundle.modality == "text":  # out-of-distribution text: the training split's own tokens in
            # random order, at the lengths of random training texts (ids the model's vocabulary has)
            pad = bundle.pad_id
            real = bundle.x_train[bundle.x_train != pad]
            lengths = (bundle.x_train[torch.randint(bundle.n, (m,), generator=g)] != pad).sum(1)
            self.x = torch.full((m, bundle.x_train.shape[1]), pad, dtype=torch.long)
            for i, length in enumerate(lengths.tolist()):
                self.x[i, :length] = real[torch.randint(len(real), (length,), generator=g)]
            self.y = torch.randint(0, K, (m,), generator=g)
        else:  # out-of-distribution: random ±1 patterns, random labels
            self.x = torch.randint(0, 2, (m, *bundle.x_train.shape[1:]), generator=g).float() * 2 - 1
            self.y = torch.randint(0, K, (m,), generator=g)
        self.included = torch.from_numpy(included)

    def extend(self, bundle):
        """The bundle with the included canaries appended to its training split (test split untouched)."""
        from dataclasses import replace

        keep = self.included
        return replace(bundle, x_train=torch.cat([bundle.x_train, self.x[keep]]),
                       y_train=torch.cat([bundle.y_train, self.y[keep]]))

    @torch.no_grad()
    def final_scores(self, model, device: str = "cpu") -> np.ndarray:
        """−loss of the final model on every canary: lower loss, more likely trained on."""
        model.eval()
        out = torch.cat([model(self.x[i:i + 512].to(device)).cpu() for i in range(0, len(self.y), 512)])
        return (-F.cross_entropy(out, self.y, reduction="none")).double().numpy()
