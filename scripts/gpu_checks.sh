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
#   numerics      tests/numerics_checks.py, its whole grid (-m "long or not long"), on the
#                 GPU's kernels: exact numerics bit for bit (issue 22); the real-model cases
#                 need the SmolLM2 package installed, and are skipped without it
#   numerics_cases  the same grid one case at a time, each cut at $CASE_TIMEOUT seconds
#                 (default 60), bfloat16 and w8a8 first: OUTDIR/numerics_cases.tsv says per
#                 case passed / failed / cut / not_run and the seconds it took (float32 at batch 8 ran
#                 past 200 s on an H100 and an H200 and hid the rest of the grid);
#                 $NUMERICS_ONLY (an extended regex) keeps only the case ids it matches;
#                 $CASE_JOBS cases run at once (default 1; compiling is host-bound);
#                 $CASE_XLA_FLAGS: the XLA_FLAGS of each case (default none)
#   exactness     scripts/measure_exactness.py on the GPU: the price of exact numerics and
#                 the identity of prompt lookup with plain decoding, for the precisions in
#                 $EXACT_PRECISIONS (default bfloat16,float32), Spec-Bench questions from
#                 $SPECJAX_UNSEEN (a KIND:PATH prompt spec; none: built-in prompts only)
#   invariant_matmul  the batch-invariant kernels (pallas_kernels/invariant_matmul and
#                 invariant_attention, Triton on a GPU): their tests (rows bit-identical
#                 across row counts with the Triton kernels), the exact-numerics checks with
#                 the model's products and attention through them (numerics_checks.py -k
#                 pallas, SmolLM2's included when its package is installed), and
#                 scripts/bench_invariant_matmul.py --attention (each kernel against XLA's
#                 product and exact numerics' XLA form at SmolLM2's shapes, rows 1, 4, 16),
#                 then both again with the Mosaic GPU kernels (--mode mosaic_gpu,
#                 bfloat16: bench_invariant_matmul_mosaic_gpu.json; the Mosaic GPU kernels'
#                 GPU tests, and their model-level check in numerics_checks.py, ran above);
#                 INVARIANT_QUICK=1: only the Triton and GPU tests, no long checks, 5 repeats
#   decode_bench  `specjax bench` of SmolLM2 in bfloat16, fast and exact numerics: plain
#                 decoding, prompt lookup and the shipped EAGLE-3 head (needs the SmolLM2
#                 package), batch 1, 128 new tokens, one cache length ($DECODE_CACHE_LEN,
#                 default 512: one compiled loop per method; with a cache per prompt bucket
#                 a run took ~55 s on an H200 on 2026-11-28, mostly compiling, and two
#                 runs of 36 filled 150 s); $DECODE_ARGS: more bench flags;
#                 DECODE_PALLAS=1: a third run with --exact-products pallas (the
#                 batch-invariant kernels' price in the decode loop); DECODE_MOSAIC=1: one
#                 more with their Mosaic GPU variants (SPECJAX_INVARIANT_KERNELS=mosaic_gpu)
# Each step is cut at $STEP_TIMEOUT seconds (default 900).
# The log lands in OUTDIR/log.txt and the results as JSON beside it (default out/gpu).
# specjax must be importable (pip install .).
set -u
out=${1:-out/gpu}
steps=${2:-env,kernel_tests,kernel_bench}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
limit=${STEP_TIMEOUT:-900}
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
  timeout $limit $py -P -m pytest tests/test_tree_attention.py -q -p no:cacheprovider -rs \
    --junitxml="$out/kernel_tests.xml" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if has gpu_tests; then
  timeout $limit $py -P -m pytest tests -q -p no:cacheprovider -m gpu -rs 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if has kernel_bench; then
  timeout $limit $py -P scripts/bench_tree_attention.py --output "$out/bench_tree_attention_gpu.json" \
    2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if has prefix_bench; then
  for b in 1 8; do
    timeout $limit $py -P scripts/bench_tree_attention.py --part prefix --batch $b --dtypes bfloat16 \
      --nodes 1 8 64 --lengths 2048 8192 32768 \
      --output "$out/bench_tree_attention_prefix_b$b.json" 2>&1 | tee -a "$log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  done
fi

if has verify_curve; then
  for dt in float32 bfloat16; do
    timeout $limit $py -P -m specjax.cli bench --verify-curve --model "${SPECJAX_MODEL:-random:smollm2-135m}" \
      --dtype "$dt" --output "$out/verify_curve_gpu_$dt.json" 2>&1 | tee -a "$log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  done
fi

if has numerics; then
  XLA_FLAGS="" timeout $limit $py -P -m pytest tests/numerics_checks.py -q -p no:cacheprovider \
    -m "${NUMERICS_MARK:-long or not long}" -rs --junitxml="$out/numerics.xml" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if has numerics_cases; then
  ids=$(XLA_FLAGS="" $py -P -m pytest tests/numerics_checks.py -q -p no:cacheprovider \
    --collect-only -m "${NUMERICS_MARK:-long or not long}" 2>/dev/null | grep '::' \
    | awk '/bfloat16|w8a8/ {print; next} {rest = rest $0 "\n"} END {printf "%s", rest}' \
    | grep -E -- "${NUMERICS_ONLY:-.}")
  one_case() {  # id: run it in its own pytest, cut at CASE_TIMEOUT; one tsv line
    local id=$1 t0 rc r log1
    t0=$(date +%s)
    log1="$out/case.$(echo "$id" | md5sum | cut -c1-8).log"
    echo "== $id" > "$log1"
    # the same -m as the collection: the grid's long cases are deselected by default, and a
    # case id alone does not select them (2026-11-26: every long case "failed" with pytest's
    # rc 5, no test run)
    XLA_FLAGS="${CASE_XLA_FLAGS:-}" timeout -k 5 ${CASE_TIMEOUT:-60} $py -P -m pytest "$id" -q -p no:cacheprovider \
      -m "${NUMERICS_MARK:-long or not long}" --durations=0 >> "$log1" 2>&1
    rc=$?
    case $rc in 0) r=passed ;; 124|137) r=cut ;; 5) r=not_run ;; *) r=failed ;; esac
    printf '%s\t%s\t%d\n' "$id" "$r" "$(( $(date +%s) - t0 ))"
  }
  export -f one_case; export py out
  # CASE_JOBS cases at once (default 1): the time goes to compiling on the host, the GPU
  # machine has 16 cores; each process allocates GPU memory as it needs it
  printf '%s\n' $ids | XLA_PYTHON_CLIENT_PREALLOCATE=false xargs -P "${CASE_JOBS:-1}" -I{} \
    bash -c 'one_case "$1"' _ {} | tee -a "$out/numerics_cases.tsv" | tee -a "$log"
  for f in "$out"/case.*.log; do head -1 "$f"; tail -25 "$f"; done > "$out/numerics_cases.log" 2>/dev/null
  rm -f "$out"/case.*.log
  grep -qvP '\tpassed\t' "$out/numerics_cases.tsv" && status=1
fi

if has invariant_matmul; then
  # INVARIANT_QUICK=1 (a short device lease): the Triton and GPU tests only, the model checks
  # without the long grid and the real model, and fewer timing repeats
  sel=(); nsel="long or not long"; reps=20
  [ -n "${INVARIANT_QUICK:-}" ] && { sel=(-k "triton or gpu"); nsel="not long"; reps=5; }
  timeout $limit $py -P -m pytest tests/test_invariant_matmul.py tests/test_invariant_attention.py \
    -q -p no:cacheprovider -rs ${sel[@]+"${sel[@]}"} \
    --junitxml="$out/invariant_matmul_tests.xml" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  SPECJAX_EXACT_PRODUCTS=pallas XLA_FLAGS="" timeout $limit $py -P -m pytest \
    tests/numerics_checks.py -q -p no:cacheprovider -k "pallas or mosaic_gpu" \
    -m "$nsel" -rs \
    --junitxml="$out/invariant_matmul_numerics.xml" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  timeout $limit $py -P scripts/bench_invariant_matmul.py --attention --reps $reps \
    --output "$out/bench_invariant_matmul_gpu.json" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  timeout $limit $py -P scripts/bench_invariant_matmul.py --mode mosaic_gpu --dtypes bfloat16 \
    --attention --reps $reps \
    --output "$out/bench_invariant_matmul_mosaic_gpu.json" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if has decode_bench; then
  for num in fast exact ${DECODE_PALLAS:+exact-pallas} ${DECODE_MOSAIC:+exact-mosaic}; do
    extra=(); kernels=""; tag=""
    [ "$num" = exact-pallas ] && { num=exact; extra=(--exact-products pallas); tag=_pallas; }
    [ "$num" = exact-mosaic ] && { num=exact; extra=(--exact-products pallas); tag=_mosaic;
                                   kernels=mosaic_gpu; }
    SPECJAX_INVARIANT_KERNELS=$kernels \
    timeout $limit $py -P -m specjax.cli bench --model smollm2-135m --dtype bfloat16 \
      --numerics $num ${extra[@]+"${extra[@]}"} --methods prompt_lookup,eagle --limit 1 \
      --max-new-tokens 128 --repeats 2 \
      --cache-len ${DECODE_CACHE_LEN:-512} ${DECODE_ARGS:-} \
      --output "$out/decode_bf16_$num$tag.json" 2>&1 | tee -a "$log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  done
fi

if has exactness; then
  unseen=()
  [ -n "${SPECJAX_UNSEEN:-}" ] && unseen=(--unseen "$SPECJAX_UNSEEN" --unseen-limit 2)
  timeout $limit $py -P scripts/measure_exactness.py --out "$out/exactness_gpu.json" \
    --precisions "${EXACT_PRECISIONS:-bfloat16,float32}" --prompts 3 --max-new-tokens 32 \
    --repeats 2 "${unseen[@]}" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
exit $status
