"""Plugins cannot break dpviz, refusals write nothing, and a run that keeps only its final model is analysed.

A plugin is someone else's code imported by every command: whatever its import does (raises, exits by sys.exit or
os._exit, loops, replaces a built-in entry) is one line naming it, and a config naming a plugin's entry hashes
with the plugin's module, so its runs never answer for dpviz's own. The plugin tests run the command line in a child
process, where the plugins are imported fresh; the plugins are tiny modules written into ``tmp_path``.
"""

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from dpviz import catalog, cli
from dpviz.config import RunConfig
from dpviz.errors import ConfigError

LIMIT_S = 2  # DPVIZ_PLUGIN_TIMEOUT in the tests: a hanging plugin costs each test this much


def plugin(tmp_path, name: str, body: str) -> str:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    return name


def dpviz_with(tmp_path, cli_env, plugin_names: str, *argv, timeout=60):
    env = dict(cli_env, DPVIZ_PLUGINS=plugin_names, DPVIZ_PLUGIN_TIMEOUT=str(LIMIT_S),
               PYTHONPATH=f"{cli_env['PYTHONPATH']}:{tmp_path}")
    return subprocess.run([sys.executable, "-m", "dpviz", *argv], env=env, capture_output=True, text=True,
                          timeout=timeout)


def one_line(out, *words):
    err = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(err) == 1 and err[0].startswith("dpviz: error: DPVIZ_PLUGINS"), out.stderr
    assert all(w in err[0] for w in words), err[0]
    return err[0]


def listing(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.subprocess
def test_a_plugin_raising_at_import_is_one_line_naming_it(tmp_path, cli_env):
    name = plugin(tmp_path, "raising_plugin", """
        raise RuntimeError("the plugin's own bug\\nsecond line")
    """)
    out = dpviz_with(tmp_path, cli_env, name, "list")
    assert "RuntimeError" in one_line(out, name, "own bug") and "Traceback" not in out.stderr


@pytest.mark.subprocess
def test_a_plugin_calling_sys_exit_does_not_end_the_command(tmp_path, cli_env, cache_dir):
    name = plugin(tmp_path, "exiting_plugin", "import sys\nsys.exit(0)\n")
    before = listing(cache_dir)
    out = dpviz_with(tmp_path, cli_env, name, "run", "--epochs", "1", "--quiet")
    one_line(out, name, "sys.exit(0)")
    assert listing(cache_dir) == before


@pytest.mark.parametrize("body", ["import os\nos._exit(0)\n", "from os import _exit\n_exit(0)\n"],
                         ids=["os", "from-os"])
@pytest.mark.subprocess
def test_a_plugin_calling_os_exit_does_not_end_the_command(tmp_path, cli_env, cache_dir, body):
    """os._exit passes every except and finally: without the guard the command ends with status 0, having done
    nothing."""
    name = plugin(tmp_path, "os_exiting_plugin", body)
    before = listing(cache_dir)
    out = dpviz_with(tmp_path, cli_env, name, "run", "--epochs", "1", "--quiet")
    one_line(out, name, "os._exit(0)")
    assert listing(cache_dir) == before


def test_os_exit_is_guarded_only_while_a_plugin_imports(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    real = os._exit
    name = plugin(tmp_path, "exit_watching_plugin", "import os\nDURING = os._exit\n")
    try:
        catalog.load_plugins(name)
        assert sys.modules[name].DURING is not real and os._exit is real
    finally:
        sys.modules.pop(name, None)


@pytest.mark.subprocess
def test_ctrl_c_during_a_plugins_import_still_interrupts(tmp_path, cli_env):
    name = plugin(tmp_path, "interrupted_plugin", "raise KeyboardInterrupt\n")
    out = dpviz_with(tmp_path, cli_env, name, "list")
    assert out.returncode not in (0, 2) and "KeyboardInterrupt" in out.stderr


@pytest.mark.parametrize("kind,entry", [("dataset", "digits"), ("backbone", "cnn")])
@pytest.mark.subprocess
def test_a_plugin_may_not_replace_a_built_in_entry(tmp_path, cli_env, kind, entry):
    cls = "Dataset(name='digits', label='mine', source='shipped', loader='x:y')" if kind == "dataset" else \
        "Backbone(name='cnn', label='mine', source='package', builder='x:y')"
    name = plugin(tmp_path, "replacing_plugin", f"""
        from dpviz import catalog
        catalog.add_{kind}(catalog.{cls})
    """)
    one_line(dpviz_with(tmp_path, cli_env, name, "list"), name, f"'{entry}'", f"built-in {kind}")


@pytest.mark.subprocess
def test_a_strategy_plugin_may_not_replace_a_built_in_strategy(tmp_path, cli_env):
    name = plugin(tmp_path, "replacing_strategy", """
        from dpviz import strategies
        from dpviz.strategies.lp import LinearProbe

        @strategies.register
        class Mine(LinearProbe):
            pass
    """)
    env = dict(cli_env, DPVIZ_STRATEGIES=name, PYTHONPATH=f"{cli_env['PYTHONPATH']}:{tmp_path}")
    out = subprocess.run([sys.executable, "-m", "dpviz", "list"], env=env, capture_output=True, text=True, timeout=60)
    err = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(err) == 1 and "DPVIZ_STRATEGIES" in err[0] and "'lp'" in err[0], err


@pytest.mark.parametrize("body", ["while True:\n    pass\n", "import time\ntime.sleep(600)\n"], ids=["loop", "sleep"])
@pytest.mark.subprocess
def test_a_hanging_plugin_is_stopped_at_the_time_limit(tmp_path, cli_env, body):
    name = plugin(tmp_path, "hanging_plugin", body)
    t0 = time.monotonic()
    out = dpviz_with(tmp_path, cli_env, name, "list", timeout=LIMIT_S + 30)
    assert time.monotonic() - t0 < LIMIT_S + 8
    one_line(out, name, f"within {LIMIT_S} s", "DPVIZ_PLUGIN_TIMEOUT")


def test_the_time_limit_holds_in_a_thread_other_than_the_main_one(tmp_path, monkeypatch):
    """The dashboard imports dpviz in a script thread, where no alarm signal can be used."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DPVIZ_PLUGIN_TIMEOUT", "1")
    name = plugin(tmp_path, "looping_in_a_thread", "while True:\n    pass\n")
    caught = []

    def load():
        try:
            catalog.load_plugins(name)
        except ConfigError as e:
            caught.append(str(e))

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive() and caught and name in caught[0] and "within 1 s" in caught[0]


@pytest.mark.subprocess
def test_a_bad_time_limit_is_one_line_naming_its_variable(tmp_path, cli_env):
    name = plugin(tmp_path, "fine_plugin", "")
    assert dpviz_with(tmp_path, cli_env, name, "list").returncode == 0  # the same plugin, under a good limit
    env = dict(cli_env, DPVIZ_PLUGINS=name, DPVIZ_PLUGIN_TIMEOUT="soon", PYTHONPATH=f"{cli_env['PYTHONPATH']}:{tmp_path}")
    bad = subprocess.run([sys.executable, "-m", "dpviz", "list"], env=env, capture_output=True, text=True, timeout=60)
    err = bad.stderr.strip().splitlines()
    assert bad.returncode == 2 and len(err) == 1 and "DPVIZ_PLUGIN_TIMEOUT" in err[0], bad.stderr


TOY = """
    from dpviz import catalog
    catalog.add_dataset(catalog.Dataset(name="toy-digits", label="digits again", source="shipped",
                                        loader="dpviz.data.digits:load_digits", shape=catalog.Shape(1437, 1, 16, 10)))
"""


@pytest.fixture
def toy_plugins(tmp_path, monkeypatch):
    """Two plugin modules registering a dataset of the same name; the catalogue as it was afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("toy_plugin_a", "toy_plugin_b"):
        plugin(tmp_path, name, TOY)
    yield
    catalog.DATASETS.pop("toy-digits", None)
    for name in ("toy_plugin_a", "toy_plugin_b"):
        sys.modules.pop(name, None)


@pytest.mark.subprocess
def test_a_plugins_entry_hashes_with_the_plugins_module(toy_plugins, tmp_path, cli_env):
    builtin = RunConfig(dataset="digits")
    catalog.load_plugins("toy_plugin_a")
    a = RunConfig(dataset="toy-digits")
    assert catalog.DATASETS["toy-digits"].plugin == "toy_plugin_a"
    assert json.loads(a.to_json(hashed_only=True))["_dataset_plugin"] == "toy_plugin_a"
    assert "_dataset_plugin" not in builtin.to_json(hashed_only=True)  # built-in hashes unchanged
    a_hash = a.hash()
    catalog.load_plugins("toy_plugin_b")  # another plugin's entry of the same name replaces a's ...
    b_hash = RunConfig(dataset="toy-digits").hash()
    assert len({builtin.hash(), a_hash, b_hash}) == 3  # ... and never shares a's cache key
    # the command line (the plugin named in DPVIZ_PLUGINS) hashes it as Python does
    child = subprocess.run([sys.executable, "-c", "import dpviz; print(dpviz.RunConfig(dataset='toy-digits').hash())"],
                           env=dict(cli_env, DPVIZ_PLUGINS="toy_plugin_a",
                                    PYTHONPATH=f"{cli_env['PYTHONPATH']}:{tmp_path}"),
                           capture_output=True, text=True, timeout=60)
    assert child.stdout.strip() == a_hash, child.stderr


def test_a_failing_plugin_is_kept_for_the_dashboard_and_the_next_one_loads(toy_plugins, tmp_path):
    plugin(tmp_path, "broken_plugin", "1 / 0\n")
    kept, known = catalog.PLUGIN_ERRORS, len(catalog.PLUGIN_ERRORS)  # what the sidebar shows
    try:
        catalog.load_plugins("broken_plugin,toy_plugin_a", deferred=True)
        assert [e.got for e in kept[known:]] == ["broken_plugin"]
        assert "ZeroDivisionError" in str(kept[known]) and "toy-digits" in catalog.DATASETS
    finally:
        del kept[known:]


@pytest.mark.parametrize("argv", [["worker", "--study", "nope"], ["worker"],
                                  ["reproduce", "--claims", "000-lpfft", "--set", "epochs=-1"]],
                         ids=["worker-study", "worker-idle", "reproduce-set"])
def test_a_refused_or_idle_command_creates_nothing_in_the_cache(argv, cache_dir, capsys):
    before = listing(cache_dir)
    code = cli.main(["--cache-dir", str(cache_dir), *argv])
    assert code == (0 if argv == ["worker"] else 2), capsys.readouterr().err
    assert listing(cache_dir) == before


@pytest.mark.subprocess  # its `dpviz run` starts dpviz.training.ahead's accounting child
def test_a_run_keeping_only_its_final_model_is_analysed_at_its_last_step(cache_dir, capsys):
    from dpviz.analyses import service
    from dpviz.store import Store

    assert cli.main(["--cache-dir", str(cache_dir), "run", "--epochs", "1", "--keep-weights", "final", "--json",
                     "--quiet"]) == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    store = Store(cache_dir)
    assert store.weight_steps(run_id) == []  # nothing but model.pt
    last = store.feature_steps(run_id)[-1]
    out = service.analyze(store, run_id, "hessian", batch=64, max_probes=10)
    assert out["step"] == last and out["trace"] > 0
    code = cli.main(["--cache-dir", str(cache_dir), "analyze", "hessian", run_id, "--step", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "keep_weights" in err[0] and f"step {last}" in err[0], err
    assert "--keep-weights checkpoints" in err[0]


def test_reproduce_list_json_is_json(capsys):
    from dpviz import reproduce

    assert cli.main(["reproduce", "--list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and {"id", "paper", "sentence", "preset"} <= set(rows[0])
    assert [r["id"] for r in rows] == list(reproduce.REGISTRY)
