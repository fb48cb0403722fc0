"""Install and documentation times, as a new user meets them.

On a clean clone of the committed tree (``HEAD``), in one invocation:
1. ``bash run.sh setup`` (a new ``.venv`` with every extra), then the same command again (nothing to do);
2. ``python3.11 -m venv v && v/bin/pip install .`` in a new plain environment, then ``v/bin/dpviz run --json``
   on the default task (the first CLI run: the backbone's pretraining included);
3. ``mkdocs build --strict`` of the documentation site.
Writes ``bench/results/install.json``. The dashboard's first page after setup is `bench_dashboard.py`'s
first row. Run it with nothing else on the machine; pip's cache and this machine's torch wheel make the
install a few minutes.
Usage: python bench/bench_install.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from bench_ci import minutes, timed  # noqa: E402
from results import record  # noqa: E402


def main():
    py = "python3.11"
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "main"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        setup, _ = timed(["bash", "run.sh", "setup"], clone)
        again, _ = timed(["bash", "run.sh", "setup"], clone)
        docs, _ = timed([str(clone / ".venv/bin/python"), "-m", "mkdocs", "build", "--strict", "-q", "-d",
                         str(Path(tmp) / "site")], clone, {"NO_MKDOCS_2_WARNING": "1"})
        venv = Path(tmp) / "v"
        made, _ = timed([py, "-m", "venv", str(venv)], clone)
        pip, _ = timed([str(venv / "bin/pip"), "install", "--disable-pip-version-check", "-q", "."], clone)
        cli, done = timed([str(venv / "bin/dpviz"), "run", "--json"], Path(tmp),
                          {"DPVIZ_CACHE_DIR": str(Path(tmp) / "c")})
        train = json.loads(done.stdout).get("wall_time_s")  # the training loop's own clock
    rows = [["a fresh checkout, set up for the dashboard and the tests", "`bash run.sh setup` (a new `.venv`, every "
             "extra)", minutes(setup)],
            ["the same command again", "`bash run.sh setup` (nothing to do)", f"{again:.2f} s"],
            ["`pip install .` in a new plain virtual environment", f"`{py} -m venv v && v/bin/pip install .`",
             minutes(made + pip)],
            ["the first CLI run after it, default task", "`v/bin/dpviz run --json`",
             f"{cli:.1f} s" + (f", of which training {train:.1f} s" if train else "")],
            ["the documentation site", "`mkdocs build --strict`", f"{docs:.1f} s"]]
    for r in rows:
        print(" | ".join(r))
    record("install", title="Install and documentation", columns=["what", "command", "time"], rows=rows,
           notes=f"a clean clone; torch from this machine's disk, pip's cache warm; load average "
                 f"{os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
