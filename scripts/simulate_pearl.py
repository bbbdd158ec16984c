"""PEARL's two-device overlap, simulated from times measured on one device (issue 23, card C29).

specjax runs drafting and verification one after the other in one compiled loop, so the
``pearl`` policy (:mod:`specjax.policies.pearl`) reproduces PEARL's draft lengths, output and
tokens per forward, but not the speed it wins by running the drafter and the target at the
same time. This script measures, on this machine:

* plain decoding, the drafter at a fixed ``k = gamma``, and the drafter under ``pearl``
  (decode seconds of each prompt; outputs checked identical to plain decoding);
* the in-loop time of a verify step over ``T = 1, 2, gamma + 1`` tokens with nothing to draft
  (:func:`specjax.bench.curve.verify_curve_in_loop`), and from it and the fixed-``k`` run the
  drafter's time per drafted token, ``t_d = (step(gamma) - t_v(gamma + 1)) / gamma``;

then models each prompt's decode time from its round counts (``pearl_pre`` rounds verify
2 tokens, ``pearl_post`` rounds ``gamma + 1``, other steps drafted nothing):

* one device (what ran): ``pre * (t_d + t_v(2)) + post * (gamma t_d + t_v(gamma+1))
  + rest * t_v(1)``, printed beside the measured time as the model's check;
* two devices (PEARL): every drafting round costs ``max(gamma t_d, t_v(T))`` (the drafter
  drafts ``gamma`` tokens in every round while the target verifies), with the same rounds;
  reported as the measured one-device time times (two-device model / one-device model), so
  the model's own error cancels (the raw model figure is kept too).

The two-device figure is a simulation, labelled so in the output; it charges the
pre-verify round a two-token verify (PEARL's target scores one token there), an upper bound.

    python scripts/simulate_pearl.py --method eagle --gamma 3 --out docs/results/pearl_sim.json
"""

from __future__ import annotations

import argparse
import json
import statistics


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", default="eagle")
    ap.add_argument("--gamma", type=int, default=3)
    ap.add_argument("--method-arg", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=8, help="built-in prompts used (first N)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=None, help="write the JSON here (else print it)")
    a = ap.parse_args()

    from specjax import methods
    from specjax.bench.curve import verify_curve_in_loop
    from specjax.bench.machine import machine_description, utc_now
    from specjax.data.builtin import BUILTIN
    from specjax.engine import generate
    from specjax.models.loaders import load

    lm = load(a.model)
    g = a.gamma
    prompts = [lm.tokenizer.encode_chat(t) for _, t in BUILTIN[:a.prompts]]
    extra = methods.parse_method_args(a.method_arg)
    runs = {"ar": methods.build("ar", lm),
            "fixed": methods.build(a.method, lm, {**extra, "k": str(g), "policy": "fixed"}),
            "pearl": methods.build(a.method, lm, {**extra, "k": str(g), "policy": "pearl"})}
    eos = lm.tokenizer.eos_ids

    def decode(m, p):
        r = generate(lm.model, [p], max_new_tokens=a.max_new_tokens, eos_ids=eos,
                     drafter=m.drafter, policy=m.policy)
        return r

    per = {name: [] for name in runs}
    for i, p in enumerate(prompts):
        out = {}
        for name, m in runs.items():  # interleaved per prompt; the first call compiles
            times = []
            for rep in range(a.repeats + (1 if i == 0 else 0)):
                r = decode(m, p)
                times.append(r.wall_s[0] - r.prefill_s[0])
            if i == 0:
                times = times[1:]
            out[name] = r
            per[name].append({"decode_s": statistics.median(times),
                              "tokens": len(r.tokens[0]),
                              "forwards": r.target_forwards[0],
                              "pre": r.extra.get("pearl_pre", [0])[0],
                              "post": r.extra.get("pearl_post", [0])[0]})
        for name in ("fixed", "pearl"):
            if out[name].tokens != out["ar"].tokens:
                raise SystemExit(f"{name} differs from plain decoding on prompt {i}")
        print(f"prompt {i + 1}/{len(prompts)}: " + ", ".join(
            f"{n} {per[n][-1]['decode_s']:.2f}s" for n in runs), flush=True)

    # the probe's relative verify costs, scaled to this run's plain decoding step (the probe's
    # absolute seconds drift with the machine between runs; the ratios hold)
    curve = verify_curve_in_loop(lm, ks=(1, 2, g + 1), repeats=max(a.repeats, 3))
    probe = dict(zip((1, 2, g + 1), curve["seconds"]["1"]))
    ar_step = sum(r["decode_s"] for r in per["ar"]) / max(
        sum(r["forwards"] - 1 for r in per["ar"]), 1)
    tv = {T: ar_step * probe[T] / probe[1] for T in probe}
    fixed_steps = sum(r["forwards"] - 1 for r in per["fixed"])
    fixed_s = sum(r["decode_s"] for r in per["fixed"])
    td = max((fixed_s / max(fixed_steps, 1) - tv[g + 1]) / g, 0.0)

    def model(r, two_devices: bool):
        rest = r["forwards"] - 1 - r["pre"] - r["post"]
        if two_devices:
            rounds = r["pre"] * max(g * td, tv[2]) + r["post"] * max(g * td, tv[g + 1])
        else:
            rounds = r["pre"] * (td + tv[2]) + r["post"] * (g * td + tv[g + 1])
        return rounds + rest * tv[1]

    tok = sum(r["tokens"] for r in per["ar"])
    ar_s = sum(r["decode_s"] for r in per["ar"])
    pearl_s = sum(r["decode_s"] for r in per["pearl"])
    one = sum(model(r, False) for r in per["pearl"])
    two = sum(model(r, True) for r in per["pearl"])
    # the model's bias cancels in the ratio: two devices = measured one-device time x modelled
    # two-device / modelled one-device
    two_scaled = pearl_s * two / max(one, 1e-9)
    res = {
        "method": a.method, "gamma": g, "method_args": extra, "prompts": len(prompts),
        "max_new_tokens": a.max_new_tokens, "tokens": tok,
        "verify_step_s": {str(k): round(v, 5) for k, v in tv.items()},
        "probe_step_s": {str(k): round(v, 5) for k, v in probe.items()},
        "plain_step_s": round(ar_step, 5),
        "draft_token_s": round(td, 5),
        "speedup": {"fixed": round(ar_s / fixed_s, 3), "pearl_one_device": round(
            ar_s / pearl_s, 3), "pearl_two_devices_simulated": round(ar_s / two_scaled, 3),
            "pearl_two_devices_model_only": round(ar_s / two, 3)},
        "tau": {n: round(sum(r["tokens"] for r in per[n]) / sum(r["forwards"] for r in per[n]),
                         3) for n in runs},
        "pearl_rounds": {"pre": sum(r["pre"] for r in per["pearl"]),
                         "post": sum(r["post"] for r in per["pearl"])},
        "model_check": {"pearl_measured_s": round(pearl_s, 3),
                        "pearl_modelled_one_device_s": round(one, 3)},
        "per_prompt": per, "machine": machine_description(), "date": utc_now(),
        "command": f"python scripts/simulate_pearl.py --method {a.method} --gamma {g} "
                   f"--prompts {a.prompts} --max-new-tokens {a.max_new_tokens} --repeats "
                   f"{a.repeats}" + "".join(f" --method-arg {x}" for x in a.method_arg)
                   + (f" --out {a.out}" if a.out else ""),
    }
    text = json.dumps(res, indent=2)
    if a.out:
        from pathlib import Path

        Path(a.out).write_text(text + "\n")
    print(json.dumps({k: res[k] for k in ("speedup", "tau", "pearl_rounds", "model_check",
                                          "draft_token_s", "verify_step_s")}, indent=2))


if __name__ == "__main__":
    main()
