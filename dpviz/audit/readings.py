"""What an audit, or a sweep of audits, says in words: one reading under each figure."""

from __future__ import annotations

from dpviz.privacy import names

NOTE = ("An audit trains this configuration once more on the private data, with canaries added: that training "
        "run is marked as an audit and never stored among your runs, but it is a second use of the same private "
        "data — publishing an audit's outputs spends its ε again. Its scores are of canaries only (gradient "
        "canaries or inserted images), computed from what the DP run released; its test accuracy, like every "
        "run's, is measured on the private test split. ε_lb is a statistical lower bound, not a guarantee: only "
        "the accountant's ε bounds the privacy loss from above. It is the larger of two bounds, and the stated "
        "confidence covers both together (Bonferroni: each bound is tested at half the significance). The f-DP "
        "bound assumes the mechanism's trade-off curve is Gaussian; the one-run bound assumes only (ε, δ)-DP.")


def _covers_both(r: dict) -> bool:
    """Whether a report (or a sweep's row) holds its confidence for both bounds together (`bounds.family`)."""
    return "confidence_covers" in r or r.get("bound_significance") is not None


def confidence_text(r: dict) -> str:
    """The confidence a report's ε_lb holds at, and what it covers."""
    if _covers_both(r):
        return f"{r['confidence']:.0%} confidence for both bounds together"
    return f"{r['confidence']:.0%} confidence for each bound alone ({1 - 2 * (1 - r['confidence']):.0%} for the pair)"


def caption(r: dict) -> str:
    """What an audit figure's export says under it (``r``: a report or a sweep's row): the confidence's scope and
    the f-DP bound's assumption."""
    c = r["confidence"]
    scope = (f"Confidence {c:.0%} for both bounds together (Bonferroni: each bound at {1 - (1 - c) / 2:.1%})."
             if _covers_both(r) else f"Confidence {c:.0%} for each bound alone ({1 - 2 * (1 - c):.0%} for the "
             "pair).")
    return (f"{scope} The f-DP bound (Mahloujifar et al.) assumes a Gaussian trade-off curve; the one-run bound "
            "(Steinke et al.) assumes only (ε, δ)-DP.")


def reading(r: dict) -> str:
    """One audit: whether ε_lb contradicts the accountant, and how close it comes to what M canaries allow."""
    lb, m = max(r["epsilon_lb"], r["epsilon_lb_fdp"]), r["canaries"]
    conf = confidence_text(r)
    if r["epsilon"] is None:
        return (f"Without noise the canaries show ε_lb = {lb:.2f}, {lb / r['ceiling']:.0%} of the ceiling "
                f"{r['ceiling']:.2f} that {m} canaries allow: the audit can see a leak when there is one.")
    if lb > r["epsilon_spent"] and r["epsilon_lb"] <= r["epsilon_spent"]:  # the f-DP bound alone
        return (f"**The f-DP bound's ε_lb = {r['epsilon_lb_fdp']:.2f} exceeds the accountant's ε spent "
                f"{r['epsilon_spent']:.3g}** at {conf}, the one-run bound's {r['epsilon_lb']:.2f} does not. The f-DP "
                "bound assumes a Gaussian trade-off curve: either the mechanism as implemented leaks more than it is "
                "accounted for (a clipping, sampling or noise bug), or its trade-off curve is not Gaussian. Audit "
                "again with more canaries or another seed before trusting the run's privacy claim.")
    if lb > r["epsilon_spent"]:
        return (f"**ε_lb = {lb:.2f} exceeds the accountant's ε spent {r['epsilon_spent']:.3g}** at {conf}: the "
                "mechanism as implemented leaks more than it is accounted for (a clipping, sampling or noise bug), "
                "or the accountant is wrong. The run's privacy claim does not hold.")
    guessed = (f"{r['correct']} of {r['guesses']} guesses right" if r["guesses"]
               else "no set of guesses was significant")
    text = (f"ε_lb = {lb:.2f} ≤ ε spent {r['epsilon_spent']:.3g} at {conf}: no evidence against the accountant "
            f"({guessed}, AUC {r['auc']:.3f}; one-run bound {r['epsilon_lb']:.2f}, f-DP bound "
            f"{r['epsilon_lb_fdp']:.2f}, the latter assuming a Gaussian trade-off curve).")
    ideal = r.get("ideal")
    if ideal:
        text += " " + _ideal_text(r, lb)
    elif r["threat"] == "black-box":
        text += (" A black-box audit sees only the final model: one run of DP-SGD shows far less than ε to it, "
                 "so a small ε_lb here says little; white-box is the test of the mechanism.")
    return text


def _ideal_text(r: dict, lb: float) -> str:
    """The measured ε_lb against the ideal attack's: its spread over runs of the exact mechanism, where stored."""
    ideal, m = r["ideal"], r["canaries"]
    slack = (f"the gap to ε is the one-run audit's own slack (more canaries close it, up to the ceiling "
             f"{r['ceiling']:.2f}), not slack in the accounting.")
    spread = ideal.get("spread")
    if not spread:
        best = max(ideal["epsilon_lb"], ideal["epsilon_lb_fdp"])
        return (f"One run of an attack scoring with the exact Gaussian mechanism reached {best:.2f} for the same {m} "
                f"canaries (one draw: it varies from run to run); {slack}")
    where = ("within that range" if spread["low"] <= lb <= spread["high"] else "below that range"
             if lb < spread["low"] else "above that range, where about 1 run in 20 lands by chance (audits of this "
             "configuration above it again and again would mean a mechanism that leaks more than the Gaussian it "
             "is accounted as, though not more than ε spent)")
    text = (f"An attack scoring with the exact Gaussian mechanism reaches a median ε_lb of {spread['median']:.2f} "
            f"over {spread['draws']} simulated runs for the same {m} canaries, 90 % of them between "
            f"{spread['low']:.2f} and {spread['high']:.2f}; this run's {lb:.2f} is {where}. Each ε_lb is one run's "
            f"draw: the ideal attack is the strongest on average, not in every run, so a measured ε_lb above its "
            f"median is no leak (only ε_lb above ε spent is).")
    return text + f" Both are far from ε: {slack}" if spread["high"] < 0.5 * r["epsilon_spent"] else text


def _noise(r: dict, mixed: bool) -> str:
    """A row's mechanism as a reading names it (`names.named`), followed by a space, or nothing."""
    noise = names.named(r, mixed)
    return f"{noise} " if noise else ""


def sweep_reading(rows: list[dict]) -> str:
    """A sweep: where (if anywhere) ε_lb crossed ε, and how white-box and black-box compare; under which noise
    mechanism (DP-SGD named only beside audits of another)."""
    if not rows:
        return "No audit of this sweep is stored yet."
    mixed = names.mixed(rows)
    over = [r for r in rows if r["epsilon"] is not None and r["epsilon_lb"] > r["epsilon_spent"]]
    if over:
        where = ", ".join(f"{r['strategy']} ε={r['epsilon']:g} {_noise(r, mixed)}{r['threat']}" for r in over)
        return f"**ε_lb exceeds the accountant's ε at: {where}** — the mechanism leaks more than accounted there."
    under = "" if mixed else names.named(rows[0])
    text = (f"Every finite-ε audit{' under ' + under if under else ''} stays below the diagonal ε_lb = ε: no strategy "
            "leaks more than it is accounted for.")
    wb = [r["epsilon_lb"] / r["epsilon"] for r in rows if r["threat"] == "white-box" and r["epsilon"]]
    bb = [r["epsilon_lb"] / r["epsilon"] for r in rows if r["threat"] == "black-box" and r["epsilon"]]
    if wb:
        text += f" White-box ε_lb reaches up to {max(wb):.0%} of ε"
        text += f", black-box up to {max(bb):.0%}." if bb else "."
    inf = [r for r in rows if r["epsilon"] is None and r["threat"] == "white-box"]
    if inf:
        lo, hi = min(r["epsilon_lb"] for r in inf), max(r["epsilon_lb"] for r in inf)
        span = f"{lo:.2f}" if round(lo, 2) == round(hi, 2) else f"{lo:.2f}–{hi:.2f}"
        text += f" Without noise (ε = ∞) white-box ε_lb is {span} of a ceiling of {inf[0]['ceiling']:.2f}."
    return text
