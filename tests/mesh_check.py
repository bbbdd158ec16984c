"""Run in a subprocess with 8 simulated CPU devices (tests/test_mesh.py): decoding on meshes
(8,1), (4,2), (2,4) and (1,8) (data, model) gives every row what one device gives. Prints one
JSON line. ``--quick``: prompt lookup, greedy, on data=4,model=2 and a padded batch on
data=2; without it every case (plain decoding, prompt lookup, EAGLE, Token Recycling, STAND,
DEL, draft model, early exit, Medusa, Hydra, suffix, SSSD, layer skip, n-gram, and trees
drafted by EAGLE, Medusa and a draft model; greedy and sampling; every mesh shape): about 30
minutes on a 2-core CPU (``--only=a,b`` runs some methods, by the names printed;
``kernel``: the Pallas tree-attention kernel inside ``shard_map``; ``invariant``: exact
numerics with the batch-invariant Pallas kernels).

The tiny target has 4 query heads, 2 KV heads and an MLP of 128: model=2 splits attention
(and the cache's KV heads) and the MLP; model=4 splits the query side (``wo``) and the MLP,
leaving ``wqkv`` and the cache replicated (2 KV heads); model=8 splits only the MLP; model=3
splits nothing and is refused."""

import json
import os
import sys

os.environ["XLA_FLAGS"] = ("--xla_force_host_platform_device_count=8 "
                           + os.environ.get("SPECJAX_TEST_XLA_FLAGS", ""))  # tests/conftest.py
os.environ.setdefault("SPECJAX_COST_CURVE", "builtin")

import jax  # noqa: E402

from specjax import methods  # noqa: E402
from specjax.config import tiny_config  # noqa: E402
from specjax.engine import generate, release_compiled  # noqa: E402
from specjax.errors import ConfigError  # noqa: E402
from specjax.mesh import make_mesh  # noqa: E402
from specjax.models.loaders import random_model  # noqa: E402
from specjax.sampling import SamplingParams  # noqa: E402


def _against_one_device(label: str, target, prompts, out: dict, runs) -> None:
    """Greedy decoding of ``runs`` (method, args) on data=8 and data=4,model=2 against one
    device, 6 new tokens; a mismatch is appended to ``out`` under ``label``."""
    for name, args in runs:
        release_compiled()
        print(f"{label} {name}", file=sys.stderr, flush=True)
        m = methods.build(name, target, args)
        kw = dict(max_new_tokens=6, drafter=m.drafter, policy=m.policy)
        ref = generate(target, prompts, batch_size=8, **kw).tokens
        for spec in ("data=8", "data=4,model=2"):
            got = generate(target, prompts, batch_size=8, mesh=make_mesh(spec), **kw).tokens
            if got != ref:
                out["mismatch"].append([label, name, spec])
                print(f"  mismatch on {spec}", file=sys.stderr, flush=True)


def main(quick: bool):
    assert len(jax.devices()) == 8, jax.devices()
    target = random_model(tiny_config(vocab_size=64, num_layers=4), seed=21)
    prompts = [[(7 * i + j) % 64 for j in range(3 + 4 * i)] for i in range(8)]
    prompts[1] = [5, 6, 7, 8] * 5
    out = {"mismatch": []}
    runs = (("ar", {}), ("prompt_lookup", {}), ("eagle", {"head": "random", "k": "3"}),
            # its tree drafted every step (its default, adaptive, may decode plainly)
            ("token_recycling", {"policy": "fixed"}), ("stand", {"buckets": "1024"}),
            ("del", {"prior": "0.9", "prior_weight": "50"}),
            ("draft_model", {}), ("early_exit", {"exit_layer": "2"}),
            # the chain (at batch 1 its default is a 3-node tree: medusa@tree below)
            ("medusa", {"head": "random", "k": "3"}), ("hydra", {"head": "random"}),
            # learn=false: these drafters learn from every call's outputs, so a later call
            # drafts differently and samples differently (greedy output would still match)
            # (n-gram's suffix source too)
            ("suffix", {"learn": "false"}), ("sssd", {"datastore": "empty", "learn": "false"}),
            ("ngram", {"learn": "false"}), ("layer_skip", {}),
            # trees: the ancestor mask and the path commit under the mesh
            ("eagle@tree", {"head": "random", "tree": "dynamic:width=2,nodes=6"}),
            ("medusa@tree", {"head": "random", "tree": "levels:2.2"}),
            ("draft_model@tree", {"tree": "topk:width=2"}))
    samplings = (SamplingParams(), SamplingParams(temperature=1.0, seed=3))
    specs = ("data=8", "data=4", "data=2", "data=4,model=2", "data=2,model=4", "model=8")
    if quick:  # the default test run: prompt lookup, greedy, data=4,model=2 (rows and heads)
        runs, samplings, specs = runs[1:2], samplings[:1], ("data=4,model=2",)
    only = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--only=")]
    if only:  # e.g. --only=stand: rerun one method's cases
        runs = tuple(r for r in runs if r[0] in only[0].split(","))
    for name, args in runs:
        m = methods.build(name, target, args)
        for sampling in samplings:
            release_compiled()  # one process compiles every (method, mesh): release them
            print(f"{name} T={sampling.temperature}", file=sys.stderr, flush=True)
            kw = dict(max_new_tokens=10, drafter=m.drafter, policy=m.policy, sampling=sampling)
            ref = generate(target, prompts, batch_size=8, **kw).tokens
            for spec in specs:
                got = generate(target, prompts, batch_size=8, mesh=make_mesh(spec), **kw).tokens
                if got != ref:
                    out["mismatch"].append([name, sampling.temperature, spec])
                    print(f"  mismatch on {spec}", file=sys.stderr, flush=True)
            # a batch that does not divide the axis is padded (3 rows on data=2); against the
            # same 3-row batch on one device (STAND shares its tables within a batch, so its
            # samples depend on the batch's rows)
            ref3 = generate(target, prompts[:3], batch_size=3, **kw).tokens
            got = generate(target, prompts[:3], batch_size=3, mesh=make_mesh("data=2"),
                           **kw).tokens
            if got != ref3:
                out["mismatch"].append([name, sampling.temperature, "data=2, batch 3"])
    # the tree-attention kernel (Pallas, interpret mode on CPU) runs inside shard_map over
    # the cache's sharding: rows over data, KV heads over model (model=2 splits the tiny
    # target's 2 KV heads); against the same kernel on one device
    if not quick and (not only or "kernel" in only[0].split(",")):
        from specjax.pallas_kernels.tree_attention import api

        traced = []  # the kernel traced inside shard_map (by the loop's placement), not beside
        shard_mapped = api._shard_mapped
        api._shard_mapped = lambda fn, km: traced.append(km.rows) or shard_mapped(fn, km)
        kt = random_model(tiny_config(vocab_size=64, num_layers=4), seed=21)
        kt.set_attention_impl("pallas_interpret")
        try:
            _against_one_device("kernel", kt, prompts, out, (
                ("ar", {}),
                ("eagle@tree", {"head": "random", "tree": "dynamic:width=2,nodes=6"})))
        finally:
            api._shard_mapped = shard_mapped
        if "data" not in traced:
            out["mismatch"].append(["kernel", "never traced inside shard_map", traced])
    # the batch-invariant Pallas kernels of exact numerics (interpret mode on CPU) inside
    # shard_map (specjax.pallas_kernels.invariant_mesh); against the same kernels on one device
    # (tests/mesh_kernels_check.py checks the shards and the bits op by op)
    if not quick and (not only or "invariant" in only[0].split(",")):
        kt = random_model(tiny_config(vocab_size=64, num_layers=4), seed=21)
        kt.set_numerics("exact", products="pallas")
        _against_one_device("invariant", kt, prompts, out,
                            (("ar", {}), ("prompt_lookup", {"policy": "fixed"})))
    # the sharding table's plan: what is split where
    from specjax.sharding import check_plan, plan

    p = plan(target.cfg, make_mesh("data=2,model=4"))
    got = {k: v["axis"] for k, v in p.items()}
    if got != {"batch": "data", "heads": "model", "kv_heads": None, "mlp": "model",
               "vocab": None, "embed": None, "sequence": None} or "why" not in p["kv_heads"]:
        out["mismatch"].append(["plan", p])
    # a model axis that splits nothing is refused, naming the sizes that work
    try:
        check_plan(target.cfg, make_mesh("model=3"))
        out["mismatch"].append(["model=3", "not refused"])
    except ConfigError as e:
        if "model-axis sizes that work here: 2, 4, 8" not in str(e):
            out["mismatch"].append(["model=3", str(e)])
    # the weights really are split (not silently replicated)
    from flax import nnx
    from specjax.mesh import Placement

    _, params = nnx.split(target)
    placed = Placement(make_mesh("data=4,model=2")).weights(params, target.cfg)
    w = placed["layers"][0]["mlp"]["w_down"].get_value()
    if len(w.addressable_shards) != 8 or w.addressable_shards[0].data.shape != (64, 64):
        out["mismatch"].append(["w_down shards", str(w.sharding)])
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(quick="--quick" in sys.argv))
