"""What the theory lab's figures say, in words computed from their numbers (one reading per figure)."""

from __future__ import annotations

import math

import numpy as np


def eps_text(eps: float) -> str:
    """ε as the readings write it (∞ for no noise); theory sits below the figures, so it has its own."""
    return "∞" if not math.isfinite(float(eps)) else f"{float(eps):g}"


RECONSTRUCTED = ("The ε → noise constant is **reconstructed** (derived here): the Rényi bound α·β·C²·T/(4n²) "
                 "of Langevin diffusion with clipped gradients under add/remove neighbours, by Girsanov; check "
                 "it against Ganesh et al. 2023 before quoting an ε from this page. The shapes do not depend on it.")


def caption(s) -> str:
    """One line describing a setting, for exported figures."""
    return (f"theory lab: m={s.width}, d={s.dim}, n={s.n}, γ={s.margin:g}, a={s.alignment:g}, {s.activation}, "
            f"{s.loss} loss, {s.head} head, ε={eps_text(s.epsilon)}, δ={s.delta:g}, C={s.clip_norm:g}, "
            f"T={s.time:g}, p={s.lp_share:g}, {s.seeds} seeds (Langevin diffusion, Euler–Maruyama h={s.dt:g})")


def early_drops(c) -> dict:
    """Each FFT phase's largest fall in alignment within T/10 of its start (FFT at 0, LP-FFT at p·T)."""
    t, s = np.array(c.times), c.setting
    window, start = s["time"] / 10, s["lp_share"] * s["time"]
    out = {}
    for name, t0 in (("fft", 0.0), ("lp-fft", start)):
        a = np.array(c.mean[name]["alignment"])
        at0 = a[np.argmin(np.abs(t - t0))]
        out[name] = float(at0 - a[(t >= t0) & (t <= t0 + window)].min())
    return out


def readings(c) -> dict:
    """A reading per metric of `curves`' result."""
    m, drops = c.mean, early_drops(c)
    final = {k: v["loss"][-1] for k, v in m.items()}
    best = min(final, key=final.get)
    closed = (f" The dotted line is LP's exact expected loss (an Ornstein–Uhlenbeck process); the simulation "
              f"ends at {m['lp']['loss'][-1]:.4f} against {c.closed_form[-1]:.4f}.") if c.closed_form else ""
    return {
        "loss": f"Final loss: LP {final['lp']:.3f}, FFT {final['fft']:.3f}, LP-FFT {final['lp-fft']:.3f} — "
                f"{best} lowest at this ε.{closed}",
        "alignment": (f"In the first T/10 of full fine-tuning the first layer's alignment falls by "
                      f"{drops['fft']:.3f} from a random head (FFT) and by {drops['lp-fft']:.3f} after LP has "
                      f"aligned the head (LP-FFT): "
                      + ("the random head distorts the pretrained features early (Theorem 3.3) and an LP phase "
                         "first mitigates it (Theorem 3.4)." if drops["fft"] > drops["lp-fft"] else
                         "no extra early distortion from the random head here (more noise or an aligned head "
                         "hides it).")),
        "probe_accuracy": f"A least-squares probe on the hidden features ends at "
                          f"{m['fft']['probe_accuracy'][-1]:.3f} "
                          f"(FFT), {m['lp-fft']['probe_accuracy'][-1]:.3f} (LP-FFT) and "
                          f"{m['lp']['probe_accuracy'][-1]:.3f} (LP, features untouched): what the features still "
                          "separate, whatever the head.",
        "head_alignment": f"The head's cosine with the best head on the current features: LP ends at "
                          f"{m['lp']['head_alignment'][-1]:.2f}, FFT at {m['fft']['head_alignment'][-1]:.2f}; "
                          "noise keeps it below 1 (the head diffuses in directions the loss barely curves).",
    }


def utility_reading(u) -> str:
    best = ", ".join(f"ε = {eps_text(e)}: p = {u.best_share[str(float(e))]:g}" for e in u.epsilons)
    return (f"Best LP share per ε — {best}. A larger share for LP pays when the budget is small (Ke et al. 2024, "
            "Figure 2 right); one simulation per (ε, p) point, so neighbouring points differ by seed noise.")


def overlay_reading(o: dict) -> str:
    return (f"dpviz's DP-SGD ({o['strategy']}, η = {o['lr']:g}, B = {o['batch']}, σ = {o['noise_multiplier']:.3g} "
            f"from the PRV accountant, ε spent {o['epsilon_spent']:.3f}) against the diffusion with the same drift and "
            f"noise variance (s = σC√η/B = {o['noise']:.3g}): mean gap {o['gap']:.4f} in loss, "
            f"{o['gap_relative']:.1%} of the initial loss — the minibatch sampling noise and the finite steps that "
            "the diffusion leaves out (Theorem 2.2 bounds the approximation).")
