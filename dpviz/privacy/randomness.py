"""Where a run's private random draws come from: its ``seed``, or the operating system's entropy.

Three streams decide what a private run releases beyond its data: the Poisson **sampling** of each step's
batch, the Gaussian **noise** added to each step's clipped sum, and BandMF's assignment of records to its
**parts**. Whoever can regenerate them can subtract the noise from released weights and knows which records
each step used, which voids both the Gaussian mechanism and amplification by sampling.

- ``seeded`` (`RunConfig.randomness`'s default): the streams are seeded from ``seed`` (sampling ``seed``,
  noise ``seed + 1``, parts ``seed + 3``), so a run is bit-reproducible, and its ε holds only against someone
  who does not hold its configuration. The configuration is in every export, summary and the store.
- ``secure``: each stream is seeded with 63 bits from ``os.urandom``, drawn when the run starts and kept only
  in the generators' state in memory and, while a run is stopped, in its resume snapshot
  (``runs/<id>/resume.pt``, written readable by the store's owner only, mode 0600, and deleted when the run
  finishes; a cancelled, failed or interrupted run keeps it until it goes on or is deleted). Nothing dpviz
  exports holds them. The generators themselves are torch's (MT19937 on the CPU, Philox on CUDA): fast and
  not cryptographically secure, so the guarantee rests on the secrecy of the 63-bit seeds and on no noise draw
  being released on its own (Opacus's ``secure_mode`` adds a CSPRNG; dpviz does not).

The head's initial weights stay seeded in both modes: they are a public choice, not a private draw.
"""

from __future__ import annotations

import os

RANDOMNESS = ("seeded", "secure")
SEEDED_LINE = "seeded: reproducible, and not private against anyone who holds this configuration"
SECURE_LINE = ("secure: sampling, parts and noise from the operating system's entropy, in nothing dpviz exports")
STREAMS = {"sampling": 0, "noise": 1, "parts": 3}  # each stream's offset from a seeded run's seed


def line(randomness: str) -> str:
    """The one plain line a summary, ``show`` and every export carry about where the draws came from."""
    return SEEDED_LINE if randomness == "seeded" else SECURE_LINE


def entropy_seed() -> int:
    """63 bits from the operating system's entropy (a torch generator's seed is at most 2⁶⁴ − 1)."""
    return int.from_bytes(os.urandom(8), "little") >> 1


def seeds(*, randomness: str, seed: int, world=None) -> dict[str, int]:
    """The seed of each private stream (`STREAMS`). ``secure``: fresh entropy, rank 0's on every rank of a
    distributed run (the ranks draw the same batch and the same noise: `dpviz.training.distributed`)."""
    if randomness == "seeded":
        return {name: seed + offset for name, offset in STREAMS.items()}
    fresh = {name: entropy_seed() for name in STREAMS}
    return world.share(fresh) if world is not None else fresh
