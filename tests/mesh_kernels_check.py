"""Run in a subprocess with 8 simulated CPU devices (tests/test_mesh.py): the batch-invariant
Pallas kernels of exact numerics inside ``shard_map`` (specjax.pallas_kernels.invariant_mesh),
in interpret mode. Prints one JSON line ``{"mismatch": [...], "seen": {...}}``.

* each device's kernel sees its own shard (the shapes the kernel is traced with);
* column-parallel and replicated products and the attention part: one device's bits;
* row-parallel products: one device's values to float rounding, and a row's bits the same
  whether it is computed alone or with other rows (batch invariance on the mesh);
* greedy decoding of a tiny model with the kernels on data=2,model=2: prompt lookup gives
  plain decoding's tokens on the mesh, and one device's (``--decode``; in the long run)."""

import json
import os
import sys

os.environ["XLA_FLAGS"] = ("--xla_force_host_platform_device_count=8 "
                           + os.environ.get("SPECJAX_TEST_XLA_FLAGS", ""))  # tests/conftest.py
os.environ.setdefault("SPECJAX_COST_CURVE", "builtin")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from specjax.config import tiny_config  # noqa: E402
from specjax.mesh import make_mesh  # noqa: E402
from specjax.pallas_kernels import invariant_mesh  # noqa: E402
from specjax.pallas_kernels.invariant_attention import invariant_attention_part  # noqa: E402
from specjax.pallas_kernels.invariant_matmul import invariant_matmul  # noqa: E402
from specjax.sharding import kernel_mesh  # noqa: E402

SEEN: dict[str, list] = {"matmul": [], "attention": []}
# the kernels traced inside shard_map (on a mesh) during the decode check
MESHED: dict[str, int] = {"matmul": 0, "attention": 0}


def _spy():
    """Records the operand shapes each kernel is traced with, and whether it was traced under
    a kernel mesh (inside shard_map)."""
    def mm(x, w, *a, **k):
        SEEN["matmul"].append([list(x.shape), list(w.shape)])
        MESHED["matmul"] += invariant_mesh.current() is not None
        return invariant_matmul(x, w, *a, **k)

    def att(q, k_all, *a, **k):
        SEEN["attention"].append([list(q.shape), list(k_all.shape)])
        MESHED["attention"] += invariant_mesh.current() is not None
        return invariant_attention_part(q, k_all, *a, **k)

    invariant_mesh.invariant_matmul = mm
    invariant_mesh.invariant_attention_part = att


def _bits(a):
    return np.asarray(a).view(np.uint32)


def ops(out: dict) -> None:
    cfg = tiny_config(vocab_size=64, num_layers=2)  # 4 heads, 2 KV heads, MLP 128
    mesh = make_mesh("data=2,model=2")
    km = kernel_mesh(cfg, mesh, batch=4)
    want = {"wqkv": ("model", None), "wo": (None, "model"), "w_gate_up": ("model", None),
            "w_down": (None, "model"), "lm_head": (None, None)}
    got = {n: km.weight_axes(n) for n in want}
    if (km.rows, km.kv_heads) != ("data", "model") or got != want:
        out["mismatch"].append(["kernel_mesh", km.rows, km.kv_heads, got])
    rng = np.random.default_rng(0)
    d, f = cfg.hidden_size, cfg.intermediate_size
    x = jnp.asarray(rng.standard_normal((8, d)), jnp.float32)
    xf = jnp.asarray(rng.standard_normal((8, f)), jnp.float32)
    cases = (("w_gate_up", x, (2 * f, d), "bits"), ("lm_head", x, (cfg.vocab_size, d), "bits"),
             ("w_down", xf, (d, f), "close"))
    for name, xs, shape, how in cases:
        w = jnp.asarray(rng.standard_normal(shape) / np.sqrt(shape[1]), jnp.float32)
        one = invariant_matmul(xs, w, jnp.float32)
        with invariant_mesh.sharded(km):
            f_mesh = jax.jit(lambda a, b, n=name: invariant_mesh.matmul(a, b, name=n))
            SEEN["matmul"].clear()
            jaxpr = str(jax.make_jaxpr(f_mesh)(xs, w))
            got = f_mesh(xs, w)
            local = SEEN["matmul"][0]
            alone = f_mesh(xs[:2], w)  # rows 0-1 alone (the data axis splits them 1 + 1)
        if "shard_map" not in jaxpr:
            out["mismatch"].append([name, "no shard_map"])
        out_axis, in_axis = want[name]
        expect = [[xs.shape[0] // 2, xs.shape[1] // (2 if in_axis else 1)],
                  [shape[0] // (2 if out_axis else 1), shape[1] // (2 if in_axis else 1)]]
        if local != expect:
            out["mismatch"].append([name, "local shapes", local, expect])
        if how == "bits" and not np.array_equal(_bits(got), _bits(one)):
            out["mismatch"].append([name, "bits differ from one device"])
        if how == "close" and not np.allclose(got, one, rtol=1e-5, atol=1e-5):
            out["mismatch"].append([name, "values differ from one device"])
        if not np.array_equal(_bits(alone), _bits(got[:2])):
            out["mismatch"].append([name, "a row's bits depend on the batch on the mesh"])
    # the attention part: rows over data, KV heads over model
    B, T, H, kvh, S, hd = 4, 3, cfg.num_heads, cfg.num_kv_heads, 32, cfg.head_dim
    q = jnp.asarray(rng.standard_normal((B, T, H, hd)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((B, kvh, S, hd)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((B, kvh, S, hd)), jnp.float32)
    pre = jnp.asarray(rng.random((B, T, S)) < 0.7)
    m_t = jnp.full((B, T, kvh, H // kvh), -jnp.inf, jnp.float32)
    one = invariant_attention_part(q, k, v, pre, m_t, jnp.float32)
    with invariant_mesh.sharded(km):
        SEEN["attention"].clear()
        got = jax.jit(lambda *a: invariant_mesh.attention_part(*a, jnp.float32))(
            q, k, v, pre, m_t)
    if SEEN["attention"][-1] != [[B // 2, T, H // 2, hd], [B // 2, kvh // 2, S, hd]]:
        out["mismatch"].append(["attention local shapes", SEEN["attention"][-1]])
    for name, a, b in zip(("out", "l", "m"), got, one):
        if not np.array_equal(_bits(a), _bits(b)):
            out["mismatch"].append(["attention", name, "bits differ from one device"])


def decode(out: dict) -> None:
    from specjax import methods
    from specjax.engine import generate
    from specjax.models.loaders import random_model

    target = random_model(tiny_config(vocab_size=64, num_layers=2), seed=21)
    target.set_numerics("exact", products="pallas")
    prompts = [[5, 6, 7, 8] * 3, [1, 2, 3], [9, 4, 9, 4, 9, 4], [11, 12, 13, 14, 15]]
    mesh = make_mesh("data=2,model=2")
    MESHED.update(matmul=0, attention=0)  # the op checks above counted theirs
    plain_one = generate(target, prompts, batch_size=4, max_new_tokens=5).tokens
    if MESHED["matmul"] or MESHED["attention"]:
        out["mismatch"].append(["decode", "kernels traced under a mesh on one device"])
    plain = generate(target, prompts, batch_size=4, max_new_tokens=5, mesh=mesh).tokens
    # 2 layers x 4 products + the LM head, and 2 attention parts, in each of the prefill and
    # the decode step at least
    if MESHED["matmul"] < 10 or MESHED["attention"] < 4:
        out["mismatch"].append(["decode", "the kernels were not traced under the mesh",
                                dict(MESHED)])
    m = methods.build("prompt_lookup", target, {"policy": "fixed"})
    spec = generate(target, prompts, batch_size=4, max_new_tokens=5, mesh=mesh,
                    drafter=m.drafter, policy=m.policy).tokens
    if spec != plain:
        out["mismatch"].append(["decode", "prompt lookup != plain decoding on the mesh"])
    if plain != plain_one:
        out["mismatch"].append(["decode", "mesh != one device"])


if __name__ == "__main__":
    assert len(jax.devices()) == 8, jax.devices()
    _spy()
    result = {"mismatch": []}
    ops(result)
    if "--decode" in sys.argv:
        decode(result)
    result["seen"] = SEEN
    result["meshed"] = MESHED
    print(json.dumps(result))
