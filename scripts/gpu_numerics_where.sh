#!/usr/bin/env bash
# Issue 22 on a lent GPU: where does the bfloat16 batch-1 verify block (k = 2) stop matching
# one-token decoding, and does XLA's excess precision explain it? One device call (run on an
# H100 on 2026-11-28: yes; docs/results/numerics_gpu_h100_2026-11-28.tsv). Since then the
# exact programs compile with xla_allow_excess_precision off by themselves
# (specjax.models.numerics.EXACT_COMPILER_OPTIONS), so the runs "with XLA's defaults" below
# pass --xla-defaults to numerics_where.py, and the test runs need no flag:
#
#     bash scripts/gpu_numerics_where.sh OUTDIR
#
# 1. scripts/numerics_where.py for the failing shapes (bfloat16, batch 1, k = 2, gqa 4,2 and
#    mha 2,2), with XLA's defaults and with xla_allow_excess_precision off (XLA:GPU may keep
#    a bfloat16 intermediate in float32 inside a fusion; which values are rounded then depends
#    on how the program was fused, and fusion depends on shapes);
# 2. the bfloat16 verify-block tests;
# 3. beside them, the two identity cases cut on the H200 (token recycling and STAND in
#    bfloat16), XLA's defaults;
# 4. the optimized HLO of the failing shape (defaults), gzipped, for reading afterwards.
# specjax must be importable (pip install --no-deps --target ... .).
set -u
out=${1:-out/gpu}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
py=${PYTHON:-python3}
T=tests/numerics_checks.py
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/env.txt" 2>&1
$py -c 'import jax, jaxlib; print("jax", jax.__version__, jaxlib.__version__, jax.devices())' \
  >> "$out/env.txt" 2>&1
(XLA_FLAGS="" timeout 420 $py -P -m pytest $T -q -p no:cacheprovider -m "long or not long" \
   -k "test_greedy_speculative_equals_plain_in_every_precision and bfloat16 and (token_recycling or stand)" \
   -rs --durations=0 > "$out/identity_tr_stand.log" 2>&1; echo "rc $?" >> "$out/identity_tr_stand.log") &
{
  for d in --xla-defaults ""; do
    for h in 4,2 2,2; do
      echo "== numerics_where heads $h ${d:-exact compiler options}"
      XLA_FLAGS="" timeout 150 $py -P scripts/numerics_where.py --precision bfloat16 \
        --batch 1 --heads $h --k 2 $d --json "$out/where_h${h/,/_}${d:+_defaults}.json"
      echo "rc $?"
    done
  done
  echo "== test_verify_blocks bfloat16"
  XLA_FLAGS="" timeout 200 $py -P -m pytest $T -q -p no:cacheprovider -m "long or not long" \
    -k "test_verify_blocks_equal_one_token_decoding and bfloat16" -rs 2>&1 | tail -15
  echo "== HLO dump (XLA's defaults)"
  rm -rf /tmp/hlo; XLA_FLAGS="--xla_dump_to=/tmp/hlo --xla_dump_hlo_as_text" timeout 120 $py -P \
    scripts/numerics_where.py --precision bfloat16 --batch 1 --heads 4,2 --k 2 --xla-defaults \
    --variants full > /dev/null 2>&1
  tar czf "$out/hlo.tgz" -C /tmp hlo --exclude='*.dot' 2>/dev/null; ls -la "$out/hlo.tgz"
} > "$out/where.log" 2>&1
wait
cat "$out/env.txt" "$out/where.log"; tail -30 "$out/identity_tr_stand.log"
