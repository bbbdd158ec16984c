#!/usr/bin/env bash
# Launch one specjax command on every host of a multi-host job: each process runs the same
# command with --distributed (jax.distributed.initialize); only process 0 writes files.
#
#   scripts/launch_multihost.sh tpu TPU_NAME ZONE -- specjax bench --config configs/x.py --mesh data=32
#       a Cloud TPU pod slice: `gcloud compute tpus tpu-vm ssh --worker=all` runs the command on
#       every worker (JAX finds the coordinator itself); the checkout and its .venv must be at
#       the same path on every worker (REPO, default: this checkout's path)
#   scripts/launch_multihost.sh hosts "h0 h1 h2 h3" -- specjax train --config configs/train/x.py
#       GPU hosts over ssh: process i runs on host i, the coordinator is h0:PORT (default 8476)
#   scripts/launch_multihost.sh local N -- specjax generate --prompt hi --mesh data=8
#       N processes on this machine, each with LOCAL_DEVICES (default 4) simulated CPU devices:
#       try a launch before paying for a pod
set -euo pipefail
mode=${1:?usage: launch_multihost.sh tpu|hosts|local ... -- COMMAND}
shift
REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
PORT=${PORT:-8476}
case "$mode" in
  tpu)
    name=${1:?TPU name}; zone=${2:?zone}; shift 2; [ "${1:-}" = "--" ] && shift
    exec gcloud compute tpus tpu-vm ssh "$name" --zone "$zone" --worker=all --command \
      "cd $REPO && .venv/bin/$* --distributed"
    ;;
  hosts)
    read -r -a hosts <<< "${1:?\"host list\"}"; shift; [ "${1:-}" = "--" ] && shift
    n=${#hosts[@]}
    pids=()
    for i in "${!hosts[@]}"; do
      ssh "${hosts[$i]}" "cd $REPO && SPECJAX_COORDINATOR=${hosts[0]}:$PORT \
        SPECJAX_NUM_PROCESSES=$n SPECJAX_PROCESS_ID=$i .venv/bin/$* --distributed" &
      pids+=($!)
    done
    rc=0; for p in "${pids[@]}"; do wait "$p" || rc=$?; done; exit $rc
    ;;
  local)
    n=${1:?number of processes}; shift; [ "${1:-}" = "--" ] && shift
    pids=()
    for ((i = 0; i < n; i++)); do
      SPECJAX_COORDINATOR=localhost:$PORT SPECJAX_NUM_PROCESSES=$n SPECJAX_PROCESS_ID=$i \
        SPECJAX_LOCAL_DEVICES=${LOCAL_DEVICES:-4} "$REPO/.venv/bin/$1" "${@:2}" --distributed &
      pids+=($!)
    done
    rc=0; for p in "${pids[@]}"; do wait "$p" || rc=$?; done; exit $rc
    ;;
  *) echo "unknown mode $mode (tpu, hosts or local)" >&2; exit 2 ;;
esac
