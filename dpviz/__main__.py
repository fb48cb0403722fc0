import atexit
import os
import sys
import threading

from dpviz.cli import main

code = main()
# Once a command has trained, tearing the interpreter down (≈ 1400 modules, torch's among them, and a last
# garbage collection over everything they hold) takes from 0.6 s to over 10 s on 2 busy cores with nothing
# left to do: every store write is committed and renamed in place, background analyses run in their own
# detached process. Skip the teardown when only daemon threads are left (tqdm's monitor, worker pools),
# after what an exit runs first: the threads' exit hooks (a job manager stores runs in flight as
# interrupted) and, where a figure was exported, atexit's (kaleido's browser stopped, its folder removed).
# atexit's other handlers are torch's operator-library finalizers, ≈ 2 s on 2 busy cores for a process that
# is about to vanish. A live non-daemon thread gets the normal exit, which waits for it.
others = [t for t in threading.enumerate() if t is not threading.main_thread()]
if "torch" in sys.modules and all(t.daemon for t in others):
    getattr(threading, "_shutdown", lambda: None)()
    if "dpviz.figures.export" in sys.modules:
        atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)
sys.exit(code)
