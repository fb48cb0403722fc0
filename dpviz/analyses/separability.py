"""Fuzziness per layer and the law of data separation (He & Su 2023; the anonymous ViT study).

For features x_ki of class k (n_k points, class mean x̄_k, global mean x̄):
SS_b = (1/n) Σ_k n_k (x̄_k − x̄)(x̄_k − x̄)ᵀ,  SS_w = (1/n) Σ_k Σ_i (x_ki − x̄_k)(x_ki − x̄_k)ᵀ,
D = Tr(SS_w · SS_b⁺). The anonymous ViT study prints the product as Tr(SS_b · SS_w⁺); He & Su's code
uses the order here, the quantity that decays with depth: D_l ≈ ρ^l · D_0.

SS_b = M Mᵀ with M = [√(n_k/n)(x̄_k − x̄)]_k (d × K) has rank ≤ K − 1, so with the
thin SVD M = U S Vᵀ, SS_b⁺ = U S⁻² Uᵀ and D = Σ_j u_jᵀ SS_w u_j / s_j² — O(n·d·K),
no d × d pseudo-inverse.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from dpviz.analyses import layers, register


def fuzziness(x: np.ndarray, y: np.ndarray) -> float:
    """D = Tr(SS_w · SS_b⁺) for features x (n, d) and labels y (n,)."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    classes, inv, counts = np.unique(y, return_inverse=True, return_counts=True)
    means = np.zeros((len(classes), x.shape[1]))
    np.add.at(means, inv, x)
    means /= counts[:, None]  # (K, d)
    mu = x.mean(0)
    M = ((means - mu) * np.sqrt(counts / n)[:, None]).T  # (d, K)
    U, s, _ = np.linalg.svd(M, full_matrices=False)
    keep = s > s.max(initial=0.0) * max(M.shape) * np.finfo(float).eps * 10
    if not keep.any():
        return float("inf")
    W = (x - means[inv]) @ U[:, keep]  # within-class deviations along SS_b's range, (n, r)
    return float(((W ** 2).sum(0) / n / s[keep] ** 2).sum())


@dataclass(frozen=True)
class LawFit:
    """log D_l = log D_0' + l · log ρ by least squares over layers l = 0 … L."""

    rho: float
    intercept: float
    r2: float
    pearson_r: float


def fit_law(values) -> LawFit:
    """Fit the geometric law to per-layer values (index 0 = input)."""
    v = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(v) & (v > 0)
    l, logv = np.arange(len(v))[ok], np.log(v[ok])
    if len(l) < 2:
        return LawFit(float("nan"), float("nan"), float("nan"), float("nan"))
    slope, icpt = np.polyfit(l, logv, 1)
    pred = icpt + slope * l
    ss_res, ss_tot = ((logv - pred) ** 2).sum(), ((logv - logv.mean()) ** 2).sum()
    r2 = 1 - ss_res / ss_tot if ss_tot > 0 else 1.0
    r = np.corrcoef(l, logv)[0, 1] if ss_tot > 0 else float("nan")
    return LawFit(float(np.exp(slope)), float(np.exp(icpt)), float(r2), float(r))


@dataclass(frozen=True)
class Separability:
    """Per-layer fuzziness (index 0 = input) and its geometric fit."""

    fuzziness: tuple
    rho: float
    intercept: float
    r2: float
    pearson_r: float

    def to_dict(self) -> dict:
        d = asdict(self)
        d["fuzziness"] = list(self.fuzziness)
        return d


@register("separability", "per-layer fuzziness D_l = Tr(SS_w·SS_b⁺) and the fit D_l ≈ ρ^l·D_0")
def separability(features: dict) -> Separability:
    y = np.asarray(features["labels"])
    D = tuple(fuzziness(x, y) for x in layers(features))
    f = fit_law(D)
    return Separability(D, f.rho, f.intercept, f.r2, f.pearson_r)
