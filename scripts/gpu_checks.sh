#!/usr/bin/env bash
# The checks and timings that need a GPU, in one command (a lent GPU machine is held for a
# short while, so everything runs in one go). Run from the repository root on a machine with
# an NVIDIA GPU and jax[cuda] installed:
#
#     bash scripts/gpu_checks.sh [OUTDIR] [STEPS]
#
# STEPS (comma-separated, default "env,kernel_tests,kernel_bench"):
#   env           GPU, driver and package versions
#   kernel_tests  tests/test_tree_attention.py on the GPU (TestMosaicGpu compiles and runs the
#                 Mosaic GPU kernel against the dense oracle; the other backends run too)
#   kernel_bench  scripts/bench_tree_attention.py: xla vs pallas_mosaic_gpu, with the
#                 achieved bandwidth against a device-to-device copy measured in the same run
#                 (the whole op at batch 1, as on CPU)
#   prefix_bench  the same for the prefix kernel alone (--part prefix), bfloat16, at batch 1
#                 and 8 and prefixes up to 32k: where the bytes are and bandwidth is the goal
#   gpu_tests     the tests marked `gpu` across the whole suite
#   verify_curve  `specjax bench --verify-curve` of the model in $SPECJAX_MODEL (default
#                 random:smollm2-135m, its shape with random weights: the timing is the
#                 same and the weights need not travel), float32 and bfloat16
# The log lands in OUTDIR/log.txt and the results as JSON beside it (default out/gpu).
# specjax must be importable (pip install .).
set -u
out=${1:-out/gpu}
steps=${2:-env,kernel_tests,kernel_bench}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
status=0
log="$out/log.txt"

has() { [[ ",$steps," == *",$1,"* ]]; }

if has env; then
  {
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem \
      --format=csv 2>&1
    $py - <<'EOF'
import jax, jaxlib, platform
print("python", platform.python_version(), "jax", jax.__version__, "jaxlib", jaxlib.__version__)
print("devices", jax.devices())
EOF
  } 2>&1 | tee -a "$log"
fi

if has kernel_tests; then
  timeout 900 $py -P -m pytest tests/test_tree_attention.py -q -p no:cacheprovider -rs \
    --junitxml="$out/kernel_tests.xml" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if has gpu_tests; then
  timeout 900 $py -P -m pytest tests -q -p no:cacheprovider -m gpu -rs 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if has kernel_bench; then
  timeout 900 $py -P scripts/bench_tree_attention.py --output "$out/bench_tree_attention_gpu.json" \
    2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if has prefix_bench; then
  for b in 1 8; do
    timeout 900 $py -P scripts/bench_tree_attention.py --part prefix --batch $b --dtypes bfloat16 \
      --nodes 1 8 64 --lengths 2048 8192 32768 \
      --output "$out/bench_tree_attention_prefix_b$b.json" 2>&1 | tee -a "$log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  done
fi

if has verify_curve; then
  for dt in float32 bfloat16; do
    timeout 600 $py -P -m specjax.cli bench --verify-curve --model "${SPECJAX_MODEL:-random:smollm2-135m}" \
      --dtype "$dt" --output "$out/verify_curve_gpu_$dt.json" 2>&1 | tee -a "$log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  done
fi
exit $status
