"""A throwaway PostgreSQL server from Debian's packages, for the distributed-storage test."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time


def bindir() -> str | None:
    """Folder of Debian's PostgreSQL server binaries (initdb, pg_ctl), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


def _as_owner(cmd: list[str]) -> list[str]:
    # initdb refuses to run as root: run the server as Debian's 'postgres' user then.
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


class Server:
    """initdb + pg_ctl start on a Unix socket only (no TCP port to collide with); ``url`` for Optuna."""

    def __init__(self):
        self.bin = bindir()
        self.root = tempfile.mkdtemp(prefix="dpviz-pg-")
        os.chmod(self.root, 0o777)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
        self.data, self.sock = os.path.join(self.root, "data"), self.root
        user = "postgres" if os.geteuid() == 0 else os.environ.get("USER", "postgres")
        self.url = f"postgresql+psycopg2://{user}@/postgres?host={self.sock}"

    def start(self) -> "Server":
        subprocess.run(_as_owner([f"{self.bin}/initdb", "-D", self.data, "-A", "trust", "-U",
                                  "postgres" if os.geteuid() == 0 else os.environ.get("USER", "postgres")]),
                       check=True, capture_output=True)
        opts = f"-c listen_addresses='' -k {self.sock} -c max_connections=50 -c fsync=off"
        subprocess.run(_as_owner([f"{self.bin}/pg_ctl", "-D", self.data, "-o", opts, "-l",
                                  os.path.join(self.root, "log"), "-w", "start"]), check=True, capture_output=True)
        deadline = time.time() + 30
        while not glob.glob(os.path.join(self.sock, ".s.PGSQL.*")) and time.time() < deadline:
            time.sleep(0.1)
        return self

    def stop(self) -> None:
        subprocess.run(_as_owner([f"{self.bin}/pg_ctl", "-D", self.data, "-m", "immediate", "stop"]),
                       capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)
