"""``verify``: a stored run's privacy check (`dpviz.privacy.check`), read back or, for a seeded run stored
without one, obtained by training its configuration again unstored with the check on.

A seeded run is bit-reproducible, so the replay takes the very steps the stored run took (its test accuracy
must come out the same, which is checked); the check's outcome is then kept with the stored run's summary.
A run under secure randomness cannot be replayed: nothing can draw its sampling and noise again, which is
why its check runs while it trains.
"""

from __future__ import annotations

import json
import math

from dpviz.config import RunConfig
from dpviz.errors import ConfigError
from dpviz.privacy import release
from dpviz.store import Store


def verify(run_id: str, *, store: Store, replay: bool = False) -> dict:
    """{"run_id", "source" (stored | replayed | none), "line", "privacy_check" (or None), "note"}."""
    run = store.get_run(run_id)
    summary = run["summary"] or {}
    cfg = run["config"]
    if cfg.get("epsilon") == "inf":
        return {"run_id": run_id, "private": False, "source": "none", "line": "not a private run: nothing to check",
                "privacy_check": None, "passed": None}
    if summary.get("privacy_check"):
        return _answer(run_id, "stored", summary["privacy_check"])
    if not replay:
        why = ("its randomness was secure: nothing can draw its steps again" if cfg.get("randomness") == "secure"
               else f"`python -m dpviz verify {run_id} --replay` trains its seeded configuration again, unstored, "
                    f"with the check (about {summary.get('wall_time_s', 0):.0f} s)")
        return {"run_id": run_id, "private": True, "source": "none", "passed": None, "privacy_check": None,
                "line": f"privacy check: none stored with this run; {why}"}
    return _replay(run_id, run, store)


def _replay(run_id: str, run: dict, store: Store) -> dict:
    from dpviz.training import devices, loop, prepare

    summary = run["summary"]
    if run["status"] != "finished" or summary is None:
        raise ConfigError("run_id", f"a finished run to replay; {run_id} is {run['status']}")
    if run["config"].get("randomness") == "secure":
        raise ConfigError("run_id", f"a seeded run to replay; {run_id} drew its steps from the operating system's "
                          "entropy, which nothing can draw again")
    cfg = RunConfig.from_dict(summary["config"], reset_unread=True)
    cfg = cfg.replace(privacy_check=cfg.privacy_check or RunConfig.privacy_check)
    prep = prepare.prepare(cfg, cache_dir=store.root)
    got = devices.on_device(prep.device, loop.train, prep, store=None, run_id=run_id, check_privacy=True)
    chk = dict(got["privacy_check"])
    same = _same(got.get("test_accuracy"), summary.get("test_accuracy"))
    chk["replayed"] = True
    if not same:  # not the stored run's steps: the check says nothing of them
        chk["verdict"] = "inconclusive"
        chk["line"] = (f"privacy check inconclusive: the replay reached test accuracy {got.get('test_accuracy')} "
                       f"against the stored {summary.get('test_accuracy')} (another machine or library version)")
    else:
        store.update_run(run_id, summary_json=json.dumps({**summary, "privacy_check": chk}))
    return _answer(run_id, "replayed", chk)


def _same(a, b) -> bool:
    return a is not None and b is not None and math.isclose(a, b, abs_tol=1e-9)


def _answer(run_id: str, source: str, chk: dict) -> dict:
    return {"run_id": run_id, "private": True, "source": source, "line": chk["line"], "privacy_check": chk,
            "passed": chk["verdict"] == "passed" if chk["verdict"] != "inconclusive" else None}


def text(result: dict) -> str:
    """The verdict as ``verify`` prints it: the line, then each check's verdict and figures."""
    lines = [f"{result['run_id']}: {result['line']}"]
    chk = result.get("privacy_check") or {}
    for c in chk.get("checks", []):
        lines.append(f"  {'ok  ' if c['passed'] else 'FAIL'} {c['name']}: {c['detail']}")
    if chk:
        lines.append(f"  ({'replayed' if result['source'] == 'replayed' else 'measured while it trained'}; the "
                     f"contributions are of private examples, {release.NOT_COVERED}; the other figures are of the "
                     "sampler and the noise)")
    return "\n".join(lines)
