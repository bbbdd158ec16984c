"""Two processes on one machine, 4 simulated CPU devices each, joined by
``jax.distributed`` (tests/test_mesh.py starts them; ``scripts/launch_multihost.sh`` does the
same): decoding on meshes spanning both processes gives every row what one device gives, and
both processes return the same result. Prints one JSON line per process.

Usage: multihost_check.py COORDINATOR NUM_PROCESSES PROCESS_ID [--quick]
(``--quick``: plain decoding, greedy; else prompt lookup and sampling too)"""

import json
import os
import sys

os.environ.setdefault("SPECJAX_COST_CURVE", "builtin")

from specjax.distributed import initialize, is_main  # noqa: E402


def main(coordinator: str, n: int, pid: int, quick: bool) -> int:
    initialize(coordinator, n, pid, local_devices=4)
    import jax

    from specjax import methods
    from specjax.config import tiny_config
    from specjax.engine import generate
    from specjax.mesh import make_mesh
    from specjax.models.loaders import random_model
    from specjax.sampling import SamplingParams

    out = {"process": jax.process_index(), "devices": len(jax.devices()),
           "local": len(jax.local_devices()), "main": is_main(), "mismatch": [], "tokens": {}}
    target = random_model(tiny_config(vocab_size=64, num_layers=4), seed=21)
    prompts = [[(7 * i + j) % 64 for j in range(3 + 4 * i)] for i in range(8)]
    prompts[1] = [5, 6, 7, 8] * 5
    runs = (("ar", {}), ("prompt_lookup", {}))[:1 if quick else 2]
    samplings = (SamplingParams(), SamplingParams(temperature=1.0, seed=3))[:1 if quick else 2]
    for name, args in runs:
        m = methods.build(name, target, args)
        for sampling in samplings:
            kw = dict(max_new_tokens=8, drafter=m.drafter, policy=m.policy, sampling=sampling)
            ref = generate(target, prompts, batch_size=8, **kw).tokens
            for spec in ("data=8", "data=4,model=2"):
                got = generate(target, prompts, batch_size=8, mesh=make_mesh(spec), **kw).tokens
                if got != ref:
                    out["mismatch"].append([name, sampling.temperature, spec])
                out["tokens"][f"{name}/{sampling.temperature}/{spec}"] = got
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), "--quick" in sys.argv))
