#!/usr/bin/env bash
# Continue (or start) the journaled full Spec-Bench run recorded in docs/benchmarks.md.
#
#   scripts/spec_bench_full.sh MINUTES [ENGINE_COMMIT]
#
# The run takes 10-11 hours on a 2-core CPU, so it goes on over several sessions: each call
# runs for about MINUTES (the group under way when the time is up still finishes), appends the
# finished prompt batches to docs/results/spec_bench_full.journal.jsonl and rewrites the
# partial JSON and plot next to it. It runs from a detached worktree of ENGINE_COMMIT
# (default e355976: the engine the run started with, d687c99, plus journal machine stamps), so
# later changes to the engine on main do not mix into one table; the journal itself checks
# only that the settings and resolved method configs match. Needs the Spec-Bench question file at ../shared/data/spec_bench/question.jsonl
# (beside the checkout) and the bench extra installed in .venv. Nothing else may run on the
# machine meanwhile: the figures are timings.
set -euo pipefail
minutes=${1:?usage: scripts/spec_bench_full.sh MINUTES [ENGINE_COMMIT]}
commit=${2:-e355976}
repo=$(cd "$(dirname "$0")/.." && pwd)
questions=$(cd "$repo/.." && pwd)/shared/data/spec_bench/question.jsonl
[ -f "$questions" ] || { echo "no Spec-Bench questions at $questions" >&2; exit 2; }
tree=/tmp/specjax_spec_bench_tree
git -C "$repo" worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"
git -C "$repo" worktree prune
git -C "$repo" worktree add --detach "$tree" "$commit" >/dev/null
# the command line (and so the journal header) names the prompts as ../shared/...
ln -sfn "$(dirname "$(dirname "$(dirname "$questions")")")" "$(dirname "$tree")/shared"
mkdir -p "$tree/docs/results"
res=docs/results
cp "$repo/$res/spec_bench_full.journal.jsonl" "$tree/$res/" 2>/dev/null || true
(cd "$tree" && PYTHONPATH="$tree" "$repo/.venv/bin/specjax" bench \
    --methods ar,prompt_lookup,early_exit,layer_skip,draft_model --peer hf \
    --prompts spec_bench:../shared/data/spec_bench/question.jsonl --max-new-tokens 128 \
    --repeats 1 --journal $res/spec_bench_full.journal.jsonl --time-limit "$minutes" \
    --output $res/bench_spec_bench_full.json --plot $res/bench_spec_bench_full.png)
cp "$tree/$res/spec_bench_full.journal.jsonl" "$tree/$res/bench_spec_bench_full.json" \
   "$tree/$res/bench_spec_bench_full.png" "$repo/$res/"
git -C "$repo" worktree remove --force "$tree"
"$repo/.venv/bin/python" "$repo/scripts/make_benchmarks_md.py"
echo "journal, JSON and plot copied to $res/; docs/benchmarks.md regenerated"
