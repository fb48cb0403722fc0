import os
import sys
import threading

from dpviz.cli import main

code = main()
# Once a command has trained, tearing the interpreter down (≈ 1400 modules, torch's among them) takes
# ≈ 0.6 s on this machine with nothing left to do: every store write is committed and renamed in
# place, background analyses run in their own detached process. Skip the teardown when this is the
# only thread left (an unexpected live thread gets the normal exit, which waits for it).
if "torch" in sys.modules and threading.active_count() == 1:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)
sys.exit(code)
