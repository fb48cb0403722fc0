"""Plugins: the modules named in ``DPVIZ_PLUGINS`` (datasets, backbones) and ``DPVIZ_STRATEGIES``.

dpviz imports them while it is imported itself, so the command line, the dashboard and Python see one
catalogue. A plugin is someone else's code running inside every command, so whatever goes wrong in its
import — an ImportError, any other exception, ``sys.exit`` or ``os._exit``, a loop — becomes one
`ConfigError` naming the plugin, kept in `PLUGIN_ERRORS`: the command line prints it as one line (exit 2),
the dashboard in its sidebar. A Ctrl-C during the import still interrupts.

``os._exit`` ends the process at once, past every ``except`` and ``finally``, so a plugin calling it at
import would end a command with its own status (0: success) before the command did anything. While a
plugin imports, ``os._exit`` (and ``posix._exit``, the same function) is replaced by one that raises
`Exited` in the importing thread, which costs nothing; other threads still exit. What a plugin does
through the C library directly (ctypes' ``_exit``, ``exec``) no Python code can intercept in-process:
that is code the user chose to run, not a mistake dpviz can turn into a line.

Each plugin's import has `timeout()` seconds (``DPVIZ_PLUGIN_TIMEOUT``, default `DEFAULT_TIMEOUT_S`).
The import runs in the thread that imports dpviz, not in a worker thread: a worker importing a plugin
that imports dpviz would wait for dpviz's own import, in progress in the first thread, until the limit
(a deadlock). Past the limit the import is interrupted in place: by SIGALRM in the main thread (which
also breaks a sleep or a blocking read), elsewhere by an asynchronous exception, which takes effect at
the plugin's next Python instruction (a plugin blocked in one long C call is stopped when it returns).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import math
import os
import signal
import sys
import threading

from dpviz.errors import ConfigError, DpvizError

TIMEOUT_VARIABLE = "DPVIZ_PLUGIN_TIMEOUT"
DEFAULT_TIMEOUT_S = 30.0
"""Seconds a plugin's import may take: room for a plugin that imports torch on a cold, busy machine."""

PLUGIN_ERRORS: list[ConfigError] = []
"""Plugins named in the environment that failed to import while dpviz itself was being imported: raised
by `check_plugins` where an error can be shown (the command line's one line), not as a traceback."""


class TimedOut(BaseException):
    """Raised inside a plugin's import past its time limit (not an Exception: a plugin's own
    ``except Exception`` does not swallow it)."""


class Exited(BaseException):
    """Raised in place of ``os._exit(code)`` inside a plugin's import (not an Exception, as `TimedOut`)."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


def load_plugins(spec: str | None = None, *, variable: str = "DPVIZ_PLUGINS", deferred: bool = False) -> None:
    """Import the modules named in ``spec`` (default: the environment ``variable``, comma-separated), each
    adding its own datasets, backbones or strategies — how the command line and the dashboard find yours.

    Args:
        spec: comma-separated module names.
        variable: the environment variable read without ``spec``, and named by the errors.
        deferred: keep a failure in `PLUGIN_ERRORS` instead of raising it (at import time).
    """
    names = [m.strip() for m in (spec if spec is not None else os.environ.get(variable, "")).split(",")]
    names = [m for m in names if m]
    if not names:
        return
    try:
        limit = timeout()
    except ConfigError as e:
        limit = DEFAULT_TIMEOUT_S  # the error is shown; the plugins still load under the default
        _fail(e, deferred)
    for mod in names:
        error = _import(mod, variable, limit)
        if error is not None:
            _fail(error, deferred)


def check_plugins() -> None:
    """Raise the first plugin that failed to import when dpviz was imported (see `PLUGIN_ERRORS`)."""
    if PLUGIN_ERRORS:
        raise PLUGIN_ERRORS[0]


def timeout() -> float:
    """Seconds each plugin's import may take: ``$DPVIZ_PLUGIN_TIMEOUT``, or `DEFAULT_TIMEOUT_S`."""
    raw = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise ConfigError(TIMEOUT_VARIABLE, "a number of seconds > 0 (each plugin's import time limit)", raw)
    return value


def _fail(error: ConfigError, deferred: bool) -> None:
    if not deferred:
        raise error
    if str(error) not in map(str, PLUGIN_ERRORS):  # both variables' loads report a bad limit once
        PLUGIN_ERRORS.append(error)


def _import(mod: str, variable: str, limit: float) -> ConfigError | None:
    """Import ``mod`` within ``limit`` seconds; None, or the error naming it."""
    try:
        with time_limit(limit), exits_refused():
            importlib.import_module(mod)
    except KeyboardInterrupt:
        raise  # the user's Ctrl-C stops the command, as it would anywhere else
    except Exited as e:
        return ConfigError(variable, f"modules that import without exiting ({mod} called os._exit({e.code!r}))", mod)
    except TimedOut:
        why = f"modules that import within {limit:g} s ({mod} did not; {TIMEOUT_VARIABLE} sets the limit)"
        return ConfigError(variable, why, mod)
    except ImportError as e:
        return ConfigError(variable, f"importable module names ({_line(e)})", mod)
    except SystemExit as e:  # a plugin must not end the command it was loaded for
        return ConfigError(variable, f"modules that import without exiting ({mod} called sys.exit({e.code!r}))",
                           mod)
    except BaseException as e:  # noqa: BLE001 - whatever someone else's code raises is one line naming it
        why = _line(e) if isinstance(e, DpvizError) else f"{type(e).__name__}: {_line(e)}"
        return ConfigError(variable, f"modules that import without error ({mod}: {why})", mod)
    return None


def _line(e: BaseException) -> str:
    return " ".join(str(e).split())[:200]


@contextlib.contextmanager
def exits_refused():
    """In this thread, ``os._exit`` raises `Exited` for the block (it ends the process elsewhere, as ever)."""
    thread, modules = threading.get_ident(), [os, *(sys.modules[m] for m in ("posix", "nt") if m in sys.modules)]
    held = [(m, m._exit) for m in modules if hasattr(m, "_exit")]

    def refused(code):
        if threading.get_ident() != thread:
            held[0][1](code)  # another thread's exit is none of the plugin's
        raise Exited(code)

    for m, _ in held:
        m._exit = refused
    try:
        yield
    finally:
        for m, real in held:
            m._exit = real


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise `TimedOut` in this thread once the block has run ``seconds``."""
    main = threading.current_thread() is threading.main_thread()
    if main and hasattr(signal, "setitimer") and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0):
        limiter = _by_alarm(seconds)
    else:  # another thread (the dashboard's scripts), or an alarm someone else set: not ours to take
        limiter = _by_async_exception(seconds)
    with limiter:
        yield


@contextlib.contextmanager
def _by_alarm(seconds: float):
    def expire(signum, frame):
        raise TimedOut

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)


@contextlib.contextmanager
def _by_async_exception(seconds: float):
    thread, lock, over = threading.get_ident(), threading.Lock(), []

    def expire():
        with lock:
            if not over:
                _raise_in(thread, TimedOut)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            over.append(True)
            _raise_in(thread, None)  # one set as the block ended, not raised yet, is dropped


def _raise_in(thread: int, exc: type[BaseException] | None) -> None:
    """Raise ``exc`` in ``thread`` at its next Python instruction (None: drop one pending)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), None if exc is None else ctypes.py_object(exc))
