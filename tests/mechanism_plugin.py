"""A `DPVIZ_PLUGINS` module for the mechanism harness in another process (a torchrun rank): it installs
`mechanism.Probe` on `dpviz.privacy.dpsgd.private_step` at import and, after every private step, writes what
it has measured to ``$DPVIZ_PROBE_OUT/rank<RANK>.json`` (``python -m dpviz`` ends without exit handlers)."""

import dataclasses
import json
import os
from pathlib import Path

import mechanism
from dpviz.privacy import dpsgd


class WritingProbe(mechanism.Probe):
    def __call__(self, *args, **kwargs):
        out = super().__call__(*args, **kwargs)
        folder = Path(os.environ["DPVIZ_PROBE_OUT"])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"rank{self.rank}.json").write_text(json.dumps(
            {"calls": self.calls, "records": [dataclasses.asdict(r) for r in self.records]}))
        return out


dpsgd.private_step = WritingProbe(check={int(s) for s in os.environ.get("DPVIZ_PROBE_STEPS", "0").split(",")})
