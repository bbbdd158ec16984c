"""Why exact numerics cost float32 decoding ~29% at batch 1 on this CPU: 30 stacked
1536x576 float32 products (one layer's MLP-sized weight each, 106 MB, read from memory as in a
decode step) run as XLA's plain product, as the chunked product that exact numerics use, and
as an order-fixed element-wise dot (products, then a fixed pairwise tree over the input axis),
at 1, 2 and 4 rows. Prints milliseconds and the weight-read rate.

    python scripts/probe_exact_products.py

Exact numerics need every row of a product to come out as in the two-row reference program,
so a one-row decode step pays the two-row product (docs/numerics.md).
"""

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from specjax.models.llama import chunked_matmul, small_gemm_chunks  # noqa: E402
from specjax.models.numerics import fixed_sum  # noqa: E402

L, O, I = 30, 1536, 576


def main() -> None:
    rng = np.random.default_rng(0)
    w_all = jnp.asarray(rng.standard_normal((L, O, I)) / 24, jnp.float32)
    ch = max(small_gemm_chunks((O, I), 2, 4, any_backend=True), 1)
    prods = {"xla": lambda x, w: x @ w.T,
             "chunked": lambda x, w: chunked_matmul(x, w, ch, jnp.float32),
             "tree": lambda x, w: fixed_sum(x[:, None, :] * w[None], -1)}

    def program(prod):
        def f(x, ws):
            return jax.lax.scan(lambda h, w: (jnp.tanh(prod(h, w)[:, :I]), None), x, ws)[0]
        return jax.jit(f)

    print(f"device: {jax.devices()[0]}; {L} products of {O}x{I} float32")
    for m in (1, 2, 4):
        x = jnp.asarray(rng.standard_normal((m, I)), jnp.float32)
        out = []
        for name, p in prods.items():
            f = program(p)
            f(x, w_all).block_until_ready()
            ts = []
            for _ in range(15):
                t = time.perf_counter()
                f(x, w_all).block_until_ready()
                ts.append(time.perf_counter() - t)
            t = float(np.median(ts))
            out.append(f"{name} {t * 1e3:6.2f} ms ({L * O * I * 4 / t / 1e9:5.1f} GB/s)")
        print(f"rows {m}: " + "   ".join(out), flush=True)


if __name__ == "__main__":
    main()
