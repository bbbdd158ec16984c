"""Run in a subprocess with 8 simulated CPU devices (tests/test_mesh.py): training on a mesh
(``TrainConfig.mesh``: data=8, 4, 2 and data=4,model=2) gives the single-device run's
parameters and losses within float tolerance (the gradient's cross-device sum, and on a
model axis the split matmuls' sums, add in another order); a run checkpointed on
data=4,model=2 resumes on data=2; an EAGLE-3 head's loss and gradients with its weights split
over a model axis equal one device's. Prints one JSON line. ``--quick`` (the default test
run): data=4 and data=4,model=2 only."""

import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ["XLA_FLAGS"] = ("--xla_force_host_platform_device_count=8 "
                           + os.environ.get("SPECJAX_TEST_XLA_FLAGS", ""))  # tests/conftest.py

import jax  # noqa: E402
import numpy as np  # noqa: E402

from specjax.config import tiny_config  # noqa: E402
from specjax.models.loaders import LoadedModel, random_model  # noqa: E402
from specjax.train import fit  # noqa: E402
from test_train import VOCAB, counting_records, leaves_of, small_config, \
    write_corpus  # noqa: E402  (registers the toy task)

RTOL, ATOL = 1e-4, 1e-6


def losses(out_dir):
    rows = [json.loads(x) for x in (Path(out_dir) / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["split"], r["loss"]) for r in rows]


def compare(name, a_dir, b_dir, out):
    a, ma = leaves_of(a_dir)
    b, mb = leaves_of(b_dir)
    if ma["step"] != mb["step"]:
        out["mismatch"].append([name, "step", ma["step"], mb["step"]])
    for group in ("params", "opt_state"):
        for x, y in zip(a[group], b[group]):
            if x.shape != y.shape or not np.allclose(x, y, rtol=RTOL, atol=ATOL):
                err = float(np.max(np.abs(x - y))) if x.shape == y.shape else "shape"
                out["mismatch"].append([name, group, err])
                break
    la, lb = losses(a_dir), losses(b_dir)
    if [r[:2] for r in la] != [r[:2] for r in lb] or not np.allclose(
            [r[2] for r in la], [r[2] for r in lb], rtol=RTOL):
        out["mismatch"].append([name, "losses"])


def sharded_head_step(out):
    """EAGLE-3's loss and gradients with the head, the frozen target and the batch placed on
    data=4,model=2 by the sharding table equal the single-device ones."""
    import jax.numpy as jnp

    from specjax.mesh import Placement, make_mesh
    from specjax.train.task import TASKS

    cfg = tiny_config(vocab_size=64, num_layers=4)
    target = random_model(cfg, seed=21)
    task = TASKS.build("eagle3", {"ttt_steps": "2", "draft_vocab": "48"}, target)
    params, frozen = task.init_params(jax.random.key(0)), task.frozen()
    rng = np.random.default_rng(0)
    batch = {"tokens": jnp.asarray(rng.integers(0, 64, (8, 16)), jnp.int32),
             "loss_mask": jnp.asarray(rng.random((8, 16)) < 0.8),
             "lengths": jnp.asarray(rng.integers(8, 17, (8,)), jnp.int32)}

    def grads(params, frozen, batch):
        return jax.value_and_grad(task.loss, has_aux=True)(params, frozen, batch,
                                                           jax.random.key(1))

    (l1, _), g1 = jax.jit(grads)(params, frozen, batch)
    place = Placement(make_mesh("data=4,model=2"))
    p2, f2 = place.weights((params, frozen), cfg)
    w = p2["head"]["w_down"]
    w = getattr(w, "get_value", lambda: w)()
    if w.addressable_shards[0].data.shape[1] * 2 != w.shape[1]:
        out["mismatch"].append(["eagle head not split", str(w.sharding)])
    (l2, _), g2 = jax.jit(grads)(p2, f2, place.rows(batch))
    if not np.allclose(float(l1), float(l2), rtol=RTOL):
        out["mismatch"].append(["eagle loss", float(l1), float(l2)])
    for a, b in zip(jax.tree_util.tree_leaves(g1), jax.tree_util.tree_leaves(g2)):
        if not np.allclose(np.asarray(a), np.asarray(b), rtol=1e-3, atol=1e-6):
            out["mismatch"].append(["eagle grads", float(np.max(np.abs(a - b)))])
            break


def main(quick: bool = False):
    assert len(jax.devices()) == 8, jax.devices()
    cfg = tiny_config(vocab_size=VOCAB)
    lm = LoadedModel(random_model(cfg, seed=3), None, cfg, "random:tiny", "random")
    out = {"mismatch": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = write_corpus(tmp / "c", counting_records(48), shards=2)
        base = small_config(corpus, tmp / "one", batch_size=8)
        fit(base, lm=lm, progress=False)
        specs = ("data=4", "data=4,model=2") if quick else ("data=8", "data=4", "data=2",
                                                            "data=4,model=2")
        for spec in specs:
            d = tmp / spec.replace("=", "").replace(",", "_")
            fit(dataclasses.replace(base, out_dir=str(d), mesh=spec), lm=lm, progress=False)
            compare(spec, tmp / "one", d, out)
        # checkpointed on one mesh shape, resumed on another
        r = dataclasses.replace(base, out_dir=str(tmp / "resumed"), mesh="data=4,model=2")
        s1 = fit(dataclasses.replace(r, max_steps_this_run=3), lm=lm, progress=False)
        s2 = fit(dataclasses.replace(r, mesh="data=2"), lm=lm, progress=False)
        if (s1["step"], s2["resumed_from"], s2["step"]) != (3, 3, base.total_steps):
            out["mismatch"].append(["resume", s1["step"], s2["resumed_from"], s2["step"]])
        compare("data=4,model=2 -> data=2", tmp / "one", tmp / "resumed", out)
    sharded_head_step(out)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(quick="--quick" in sys.argv))
