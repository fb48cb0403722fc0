"""What a run releases, and which of it its ε covers: the threat model every surface states.

A private run's (ε, δ) is a guarantee about the **training records** only, against an adversary who holds
everything the product exports of the run (its configuration, summary, weights, checkpoints, figures and
files) and any other record of the data set: whatever such an adversary computes from the released weights
changes by at most (ε, δ) when one training record is added or removed (`neighbours`). It holds only for
what is computed from the noisy updates. Whatever dpviz computes exactly on private records is outside it:

- per-step statistics of each sampled private batch (`PRIVATE_BATCH_METRICS`);
- the analyses of the private evaluation subset (features, kNN, separability, residuals, UMAP maps, curvature);
- a private search's exact holdout count (only its noisy version is accounted);
- a seeded run's random draws, which anyone holding its configuration regenerates
  (`dpviz.privacy.randomness`).

The test split is not a private set: statistics of it (test accuracy and loss) are functions of the released
weights and public to the guarantee. These are functions of plain dicts (a summary, a config), so the store,
the command line, the figures and the dashboard state the same thing.
"""

from __future__ import annotations

from dpviz.privacy import bandmf, randomness

PRIVATE_BATCH_METRICS = ("loss", "train_accuracy", "clip_fraction", "grad_norm", "batch_size")
"""Per-step metrics computed exactly on each sampled private batch: not covered by the DP guarantee."""
NOT_COVERED = "not covered by the DP guarantee"
NOT_COVERED_SHORT = "not covered by ε"
COVERED = ("final weights", "checkpoint weights", "test accuracy and loss (the test split is not private)",
           "the ε curve and the accountant's schedule")
RELEASES_NOT_COVERED = ("per-step loss, training accuracy, clip fraction, gradient norm and drawn batch size "
                        "(exact statistics of private batches)",
                        "analyses of the private evaluation subset (features, kNN, separability, residuals, "
                        "embedding maps, curvature)",
                        "audit results (an empirical lower bound, not part of the guarantee)",
                        "the privacy check's per-example contributions (a few private examples' clipped gradient "
                        "norms, over C) and drawn batch sizes")
CAPTURED = ("the captured steps' figures (graphs, replays, capture time and memory: functions of the drawn batch "
            "sizes)")
ADVERSARY = ("anyone who holds everything dpviz exports of the run (configuration, summary, weights, "
             "checkpoints, figures, files) and every other record")

SEEDED_AGAINST = ("only those who do not hold the run's configuration (its seed regenerates the sampling and the "
                  "noise, and it is in every export): keep a seeded run's exports as private as its data")


def check_line(summary: dict) -> str:
    """The privacy check's one line (`dpviz.privacy.check`), or why there is none."""
    chk = summary.get("privacy_check")
    if chk:
        return chk["line"]
    return "privacy check: not run for this run (`python -m dpviz verify RUN_ID` checks a seeded run again)"


def is_private_batch_metric(name: str) -> bool:
    return name in PRIVATE_BATCH_METRICS


def metric_label(name: str, text: str | None = None) -> str:
    """``text`` (default: the metric's name) with the label a statistic of private batches carries."""
    text = text or name
    return f"{text} ({NOT_COVERED_SHORT})" if is_private_batch_metric(name) else text


def statement(summary: dict) -> dict:
    """The run's threat model as data: what ε covers, what it does not, against whom, under which neighbour
    relation, where its random draws came from, and the outcome of its privacy check. ``summary``: a run's
    summary, or a stored run's {"config": …} only."""
    cfg = summary.get("config") or {}
    private = summary.get("private", cfg.get("epsilon") not in ("inf", None))
    rnd = summary.get("randomness") or cfg.get("randomness", "seeded")
    bands = cfg.get("bands", 1) or 1
    rel = summary.get("neighbours") or bandmf.neighbours(bands=bands, parts=cfg.get("parts", "equal" if bands > 1
                                                                                      else "independent"))
    if not private:
        return {"private": False, "covered": [], "not_covered": ["everything: the run trains without DP"],
                "randomness": rnd, "randomness_line": randomness.line(rnd)}
    not_covered = list(RELEASES_NOT_COVERED)
    if "holdout_correct" in summary:
        not_covered.append("the exact holdout count (a private search accounts only its noisy version)")
    if any("graphs" in c for c in summary.get("capture") or ()):  # a CUDA run's captured phases
        not_covered.append(CAPTURED)
    if rnd == "seeded":
        not_covered.append("the sampling and the noise, which anyone holding this configuration regenerates")
    covered = list(COVERED)
    if cfg.get("clip_fraction_noise"):
        covered.append(f"the privatised clip fraction (clip_fraction_dp: the clipped count plus noise of std "
                       f"{cfg['clip_fraction_noise']:g}, paid for by more gradient noise)")
    return {"private": True, "epsilon": cfg.get("epsilon"), "delta": cfg.get("delta"),
            "protects": "the training records", "against": ADVERSARY if rnd == "secure" else SEEDED_AGAINST,
            "neighbours": rel, "neighbours_meaning": bandmf.NEIGHBOURS[rel],
            "covered": covered, "not_covered": not_covered, "private_batch_metrics": list(PRIVATE_BATCH_METRICS),
            "randomness": rnd, "randomness_line": randomness.line(rnd)}


def check_text(summary: dict) -> str:
    """The privacy check's line with its verdict ("privacy check passed: …"), or why there is none."""
    chk = summary.get("privacy_check")
    return f"privacy check {chk['verdict']}: {check_line(summary)}" if chk else check_line(summary)
