"""A run's accounting, done in a second process while the command imports torch.

A command-line run spends ≈ 1.7 s importing torch and ≈ 1.5 s on accounting (scipy for Opacus's PRV
accountant, σ's calibration, the ε-spent curve) before its first step. Neither needs the other, and the
machine has more than one core: `start` hands the config to ``python -m dpviz.training.ahead CONFIG_JSON`` before
torch is imported, and `prepare.prepare` takes σ and the curve from it with `Ahead.take`, which gives
them only for the schedule they were computed for (the same n and block count that the run loaded).
The child runs the same functions as the parent would, so σ and the curve are the same numbers; any
failure of the child just means the parent computes them itself.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from dataclasses import dataclass

from dpviz.catalog import static_shape
from dpviz.config import RunConfig, total_steps
from dpviz.errors import ConfigError


@dataclass
class Ahead:
    """A running accounting process for one config."""

    proc: subprocess.Popen

    def take(self, n: int, num_blocks: int) -> tuple[float, dict[int, float]] | None:
        """(σ, ε curve) if the child computed them for a training set of ``n`` and ``num_blocks``."""
        try:
            out, _ = self.proc.communicate(timeout=120)
            got = json.loads(out)
        except (subprocess.TimeoutExpired, ValueError, OSError):
            self.close()
            return None
        if self.proc.returncode != 0 or (got["n"], got["blocks"]) != (n, num_blocks):
            return None
        return got["sigma"], {int(t): e for t, e in got["curve"].items()}

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# The child's address space: accounting a schedule within `MAX_STEPS` needs < 1 GiB; a bound keeps a
# pathological schedule from taking the machine's memory (the child then dies and the parent accounts).
MEMORY_LIMIT = 3 << 30


def start(cfg: RunConfig) -> Ahead | None:
    """Start accounting ``cfg`` in a child process, where its schedule is known without loading anything.

    None where the schedule is unknown before loading, or refused (the parent then says why)."""
    if not cfg.private or (static := static_shape(cfg)) is None:
        return None
    try:
        total_steps(cfg, static[0].n)
    except ConfigError:
        return None
    try:
        proc = subprocess.Popen([sys.executable, "-m", "dpviz.training.ahead", cfg.to_json()],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, preexec_fn=_bounded)
    except OSError:
        return None
    return Ahead(proc)


def _bounded() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def compute(cfg: RunConfig) -> dict:
    """What the child prints: the n and block count it assumed, σ and the ε-spent curve."""
    from dpviz.training.calibration import calibrated_phases
    from dpviz.privacy import accounting

    cfg = cfg.fixed_rates()
    shape, blocks = static_shape(cfg)
    _, phases, _ = calibrated_phases(cfg, shape.n, blocks)
    curve = accounting.epsilon_curve(phases=phases, delta=cfg.delta, accountant=accounting.bound_by(cfg.accountant))
    return {"n": shape.n, "blocks": blocks, "sigma": phases[0].noise_multiplier, "curve": curve}


if __name__ == "__main__":
    print(json.dumps(compute(RunConfig.from_dict(json.loads(sys.argv[1])))))
