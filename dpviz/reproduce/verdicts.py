"""The scorecard's verdicts: pure functions from a claim's measurement to (verdict, reading), each
tested on planted values, and the statistics they use."""

from __future__ import annotations

import numpy as np

AGREES, PARTLY, DOES_NOT = "agrees", "partly", "does not"
VERDICTS = (AGREES, PARTLY, DOES_NOT)
NOT_READ = "not readable"
"""In place of a verdict: the claim cannot be read on the task (its row says why)."""


def mean_std(values) -> tuple[float, float]:
    v = np.asarray([x for x in values if x is not None], dtype=float)
    return (float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0) if len(v) else (float("nan"), 0.0)


def fmt(values) -> str:
    """Mean ± std over seeds; from one seed, the mean alone (a spread of one value is no spread)."""
    m, s = mean_std(values)
    n = sum(x is not None for x in values)
    return f"{m:.3f} ± {s:.3f}" if n > 1 else f"{m:.3f}"


def compare(a, b) -> str:
    """AGREES when mean(a) − mean(b) exceeds one pooled std, DOES_NOT when it is below −(that), else PARTLY."""
    (ma, sa), (mb, sb) = mean_std(a), mean_std(b)
    noise = float(np.hypot(sa, sb)) / np.sqrt(2)
    d = ma - mb
    return AGREES if d > noise else DOES_NOT if d < -noise else PARTLY


def fit_rho(values, start: int = 0) -> float:
    """ρ of the geometric fit of values[start:] (the separability analysis's own `fit_law`): the ratio
    D_(l+1) / D_l it gives (< 1: a decay)."""
    from dpviz.analyses.separability import fit_law  # here: the analyses package imports torch, verdicts do not

    return fit_law(values[start:]).rho


def fit_r2(values, start: int = 0) -> float:
    """R² of the straight-line fit of log(values[start:]) against the layer index."""
    y = np.log(np.maximum(np.asarray(values[start:], dtype=float), 1e-12))
    if len(y) < 3:
        return float("nan")
    if np.ptp(y) == 0:
        return 0.0  # no decay at all: depth explains nothing
    x = np.arange(len(y))
    r = np.corrcoef(x, y)[0, 1]
    return float(r * r)


# --- planted-testable verdicts ---------------------------------------------------------
def judge_pair(m: dict) -> tuple[str, str]:
    """Claims of the form "A ≥ B": ``groups`` has the two, A first; further groups are shown, not judged."""
    (na, a), (nb, b), *more = list(m["groups"].items())
    v = compare(a, b)
    text = {AGREES: "higher than", PARTLY: "within one standard deviation of", DOES_NOT: "lower than"}[v]
    shown = "".join(f" ({n}: {fmt(x)})" for n, x in more)
    return v, f"{na} {fmt(a)} is {text} {nb} {fmt(b)}.{shown}"


def judge_dip(m: dict) -> tuple[str, str]:
    """``dips``: group → [early drop of kNN accuracy below step 0, per seed] (positive = a dip)."""
    fft, lpfft = m["dips"]["fft"], m["dips"]["lp-fft"]
    f, l = mean_std(fft)[0], mean_std(lpfft)[0]
    tol = m.get("tolerance", 0.01)
    reading = (f"early kNN accuracy against the pretrained features (mean over seeds): FFT {_moves(f)}, "
               f"LP-FFT {_moves(l)}.")
    if f > tol and l < f - tol:
        return AGREES, reading
    if f > tol or l < f - tol:
        return PARTLY, reading + " Only one half of the claim shows."
    return DOES_NOT, reading + " FFT's features do not dip at this scale."


def _moves(drop: float) -> str:
    """A kNN dip (positive: below the pretrained features) in words: "drops 0.019", "rises 0.009"."""
    if round(drop, 3) == 0:
        return "stays level"
    return f"drops {drop:.3f}" if drop > 0 else f"rises {-drop:.3f}"


def best_p(curve: dict) -> float:
    """The LP share with the highest mean accuracy ({p: [accuracies]}; a share may be a JSON key, "0.2")."""
    return float(max(curve, key=lambda p: (mean_std(curve[p])[0], -float(p))))


def judge_interior(m: dict) -> tuple[str, str]:
    """``curves``: ε → {p: [accuracies]}; interior optimum at each ε."""
    bests = {e: best_p(c) for e, c in m["curves"].items()}
    inner = {e: 0 < p < 1 for e, p in bests.items()}
    reading = "best LP share " + ", ".join(f"p = {p:g} at ε = {e}" for e, p in bests.items()) + "."
    return (AGREES if all(inner.values()) else PARTLY if any(inner.values()) else DOES_NOT), reading


def judge_shift(m: dict) -> tuple[str, str]:
    """The best LP share at the smallest ε is larger than at the largest."""
    eps = sorted(m["curves"], key=float)
    lo, hi = best_p(m["curves"][eps[0]]), best_p(m["curves"][eps[-1]])
    reading = f"best p = {lo:g} at ε = {eps[0]} vs {hi:g} at ε = {eps[-1]}."
    return (AGREES if lo > hi else PARTLY if lo == hi else DOES_NOT), reading


def _rho(m: dict, key: str) -> float:
    """Mean per-seed ρ of the fit from layer 1 on (NaN where a planted measurement has none)."""
    return mean_std(m[key])[0] if m.get(key) else float("nan")


def judge_law(m: dict) -> tuple[str, str]:
    """``r2_from_1`` and ``r2_all``: per-seed R² of the geometric fit from layer 1 on and over all layers;
    ``rho_from_1`` (optional): its ratio ρ. A straight line that rises (ρ ≥ 1) is not the law: the law is
    a decay, so it does not agree whatever its R²."""
    a, b = mean_std(m["r2_from_1"])[0], mean_std(m["r2_all"])[0]
    rho = _rho(m, "rho_from_1")
    reading = (f"R² of log D_l vs depth: {a:.2f} from layer 1 on, {b:.2f} over all layers (goal ≥ 0.9)"
               + (f"; ρ = {rho:.2f}." if rho == rho else "."))
    if rho >= 1:
        return DOES_NOT, reading + " D_l grows with depth: no decay."
    return (AGREES if a >= 0.9 and b >= 0.9 else PARTLY if max(a, b) >= 0.9 else DOES_NOT), reading


def judge_law_breaks(m: dict) -> tuple[str, str]:
    """The law (from layer 1 on) breaks with a constant rate at ε = 1 where the tuned runs keep it better:
    the constant runs' fuzziness grows with depth (ρ ≥ 1, ``rho_constant``, optional) while the tuned
    runs' decays, or their R² is below 0.9 and below the tuned runs'."""
    c, t = mean_std(m["r2_constant"])[0], mean_std(m["r2_tuned"])[0]
    rc, rt = _rho(m, "rho_constant"), _rho(m, "rho_tuned")
    rhos = f" (ρ {rc:.2f} and {rt:.2f})" if rc == rc and rt == rt else ""
    reading = f"R² from layer 1 on at ε = 1: constant rate {c:.2f}, auto rate {t:.2f}{rhos}."
    if rc >= 1 and not rt >= 1:
        return AGREES, reading + " With the constant rate D_l grows with depth: the decay is gone."
    if c < 0.9 and c < t:
        return AGREES, reading
    return (PARTLY if c < 0.9 else DOES_NOT), reading + (" Both fit poorly." if t < 0.9 else "")


def judge_decelerator(m: dict) -> tuple[str, str]:
    """``dominant``: the dominant term of D at the early checkpoints (all seeds)."""
    d = m["dominant"]
    share = sum(x == "decelerator" for x in d) / max(len(d), 1)
    reading = f"the decelerator dominates D at {share:.0%} of the early checkpoints ({len(d)} in all)."
    return (AGREES if share > 0.5 else PARTLY if share > 0 else DOES_NOT), reading


def judge_public_first(m: dict) -> tuple[str, str]:
    """``gains``: ε → (continual accuracies, pure DP-FFT accuracies); helps at small ε."""
    vs = {e: compare(c, f) for e, (c, f) in m["gains"].items()}
    reading = "; ".join(f"ε = {e}: continual {fmt(c)} vs DP-FFT {fmt(f)}" for e, (c, f) in m["gains"].items()) + "."
    if all(v == AGREES for v in vs.values()):
        return AGREES, reading
    return (PARTLY if any(v == AGREES for v in vs.values()) else DOES_NOT), reading
