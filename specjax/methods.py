"""Decoding methods by name: a drafter plus a policy and a verifier, with sensible defaults.

``build("prompt_lookup", lm, {"k": "8"})`` -> ``Method(drafter, policy, verifier)``;
``"ar"`` -> ``Method(None, None, None)``. The keys ``policy`` and ``verifier`` choose those
components by registered name; every other key is an option of the drafter, the policy or the
verifier (in that order), converted through the typed config of the component that owns it
(``specjax methods`` lists them all). Unknown keys, and options of a policy or verifier that
was not chosen, are errors naming the method and the key.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from specjax import cost_curves
from specjax.drafters.base import DRAFTERS
from specjax.errors import DrafterError
from specjax.policies import POLICIES
from specjax.policies.adaptive import tree_step_cost
from specjax.registry import field_default
from specjax.verifiers import VERIFIERS

METHODS = ("ar",) + tuple(DRAFTERS.names())

# the `idle_decay` of the drafters that back off under `adaptive` and always offer a draft when
# asked (the untrained drafters, the Medusa and Hydra heads, Token Recycling): a row that
# stopped drafting probes again after about 165 idle steps (the comments below)
UNTRAINED_IDLE_DECAY = 0.995

# per-method defaults (chosen from the measurements in docs/benchmarks.md)
DEFAULTS: dict[str, dict[str, Any]] = {
    "prompt_lookup": {"k": 16, "min_ngram": 2, "max_ngram": 3, "policy": "adaptive",
                      "decay": 0.97},
    "ngram": {"k": 16, "policy": "fixed"},  # it prices its chains itself (verify curve)
    # its static tree cut at the depth that pays on this machine's verify curve, priced by
    # the nodes each depth verifies (tree_step_cost); a row whose drafts keep failing stops
    # and probes again after about 165 idle steps. Its fixed 10-node tree ran at 0.69x of
    # plain decoding over the 130 Spec-Bench questions on the project's 2-core CPU
    # (docs/benchmarks_notes.md, "Token recycling backs off ..."). Its prompt's entries come
    # from the prompt's text: the target's top ids at every prompt position cost the prefill
    # the LM head over the whole prompt (rag 0.91x -> 1.04x, summarization 0.93x -> 0.99x).
    # Its tree (the drafter's default, levels:3.2.2.1 since 2026-12-06) starts with a level
    # that fits the 4-token verify bucket: 1.19x over the 130 questions, where levels:4.3.2.1
    # gave 1.04x (configs/spec_bench_token_recycling_tree3221.py). Every row starts from the
    # table shipped for the target (prior=shipped, the drafter's default since 2026-12-06:
    # configs/spec_bench_token_recycling_prior.py); where none is shipped its table is carried
    # from batch to batch within a generate call (memory=auto; carried from question to
    # question over Spec-Bench it ran fewer forwards than each question starting from junk:
    # configs/spec_bench_token_recycling_hot.py, but replayed it loses against the prior)
    "token_recycling": {"policy": "adaptive", "idle_decay": UNTRAINED_IDLE_DECAY,
                        "prompt": "text", "memory": "auto"},
    "early_exit": {"k": 3},
    "layer_skip": {"k": 3},
    "draft_model": {"k": 3},
}
# defaults that apply to chains only (a tree keeps the drafter's own depth): the shipped
# (GPU-trained) EAGLE-3 head on SmolLM2 on a CPU, built-in prompts, batch 1 (2026-11-26):
# k = 1 / 2 / 3 / 4: 1.36x / 1.38x / 1.40x / 1.09x (a 5-token verify block costs a bucket
# more); docs/benchmarks.md, "Draft-length policies on the GPU-trained EAGLE-3 head"
#
# the drafters that are not trained for the target (the draft model, by default the target's
# first layers; the early exit; layer skipping) draft as chains under `adaptive` with this
# machine's measured step costs at every batch size: on SmolLM2 at batch 1 their fixed k = 3
# ran at 0.51-0.63x of plain decoding (13 Spec-Bench questions, 2026-12-01), `adaptive` at
# 0.94-1.00x. A row whose drafts are rejected stops drafting; `idle_decay` sets when it probes
# again: 0.98, after about 35 idle steps instead of 8 (`decay`'s 0.9; the draft model 0.954x
# against 0.925x on 4 questions), 0.995 (since 2026-12-01, fourteenth session), after about 165,
# so a 128-token answer holds one or two probes (configs/policies_untrained_idle_b1.py;
# docs/benchmarks_notes.md, "Untrained drafters ...").
#
# the Hydra++ and Medusa-1 heads do the same at batch 1 (since 2026-12-03, twentieth session):
# once Hydra++ deferred its prefix pass on idle steps (an idle step 1.041 -> 1.008 plain
# steps), `adaptive` with `idle_decay` 0.995 ran at 1.09x with no category below 0.98x where
# fixed k = 3 ran at 1.04x with four categories at 0.91-0.94x (26 Spec-Bench prompts x 2,
# configs/policies_hydra_b1.py); Medusa-1 `adaptive` 1.13x against k = 3's 1.07x (qa 0.96x),
# configs/policies_step_cost_b1.py. Over the 130 questions
# (configs/spec_bench_heads_mh_default.py) Hydra++ 1.17x, lowest category 0.98x; Medusa-1
# 1.10x, summarization 0.96x, where fixed k = 3 ran at 0.89x against adaptive's 0.95x in one
# A/B (docs/benchmarks_notes.md).
# EAGLE-3 chains keep k = 3 at batch 1: `adaptive` matched it within 2% (1.35x against 1.37x)
# and its weakest category was 1.06x over 130 questions.
#
# greedy at batch 1, where no `tree`, `k` or `policy` is given, the EAGLE-3 head drafts the
# EAGLE-2 dynamic tree of 3 nodes (the 3 best of its candidates by cumulative draft
# log-probability, width 2, depth 3), verified in the same 4-token block as the chain of
# k = 3 (one such tree: by the head's own probabilities the 3 best nodes are at least as
# likely to be accepted as the chain's 3): on 26 Spec-Bench prompts
# (configs/eagle_trees_b1.py, 2026-12-07) 1.58x against the chain's 1.50x, paired 1.053x
# (95% 1.020-1.090), where a tree of 7 nodes (an 8-token block) ran at 0.94x of the chain;
# over the 130 questions (configs/spec_bench_eagle_tree3.py) 1.58x, tau 1.99, against the
# chain's 1.54x, tau 1.91, paired 1.027x (1.016-1.039), level or ahead in every category
# (docs/benchmarks_notes.md, "The EAGLE-3 head as a 3-node dynamic tree ..."). Not
# measured when sampling (a dynamic tree is verified with the deterministic-candidate rule)
# or above batch 1 (`adaptive` prices chains there), so those keep the chain.
#
# the Medusa-1 heads likewise draft a static tree of 3 nodes in the 4-token block (the two
# best first tokens and the best second after the first), under `adaptive` as their chains:
# each depth priced by the step timed in the decode loop, so a row backs off where no depth
# pays. Over the 130 questions (configs/spec_bench_medusa_tree3.py, 2026-12-07) 1.16x, tau
# 1.38, against the chain default's 1.12x, tau 1.29, paired 1.037x (95% 1.022-1.053), level
# or ahead in every category, none below 0.99x (docs/benchmarks_notes.md, "Medusa-1 as a
# 3-node static tree ..."); the same tree at a fixed length lost where drafting does not pay
# (summarization 0.96x on 26 prompts, configs/heads_trees_b1.py).
GREEDY_B1_DEFAULTS: dict[str, dict[str, Any]] = {
    "eagle": {"tree": "dynamic:width=2,nodes=3,depth=3"},
    "medusa": {"tree": "fixed:0,1,0.0", "policy": "adaptive",
               "idle_decay": UNTRAINED_IDLE_DECAY},
}
# when sampling at batch 1 (the same rule: no `tree`, `k`, `policy` or `verifier` given), the
# Medusa-1 heads draft the same static tree, verified by the lossless tree-sampling rule: over
# the 130 questions at temperature 0.7 (configs/spec_bench_medusa_tree3_sampling.py,
# 2026-12-07, one sample each) 1.14x, tau 1.35, against the chain default's 1.09x, tau 1.27,
# paired 1.042x (95% 1.022-1.062), no category below 1.02x (docs/benchmarks_notes.md,
# "Medusa-1's 3-node tree when sampling ..."). The EAGLE-3 head's dynamic tree is not measured
# when sampling, so it keeps its chain there.
SAMPLED_B1_DEFAULTS: dict[str, dict[str, Any]] = {"medusa": dict(GREEDY_B1_DEFAULTS["medusa"])}
# options whose presence keeps the chain (what was measured is each default tree under its
# own policy and the exact verifier; the legacy tree keys, LEGACY_TREE_KEYS, count too: they
# ask for a tree of their own)
GREEDY_B1_OFF = ("tree", "k", "policy", "verifier")
UNTRAINED = ("draft_model", "early_exit", "layer_skip")
IDLE_ADAPTIVE = UNTRAINED + ("hydra", "medusa")
CHAIN_DEFAULTS: dict[str, dict[str, Any]] = {
    "eagle": {"k": 3},
    **{name: {"policy": "adaptive", "idle_decay": UNTRAINED_IDLE_DECAY}
       for name in IDLE_ADAPTIVE},
}
# defaults at batch sizes above 1 (chains): a drafter that spends compute of its own per draft
# drafts only where this machine's measured costs say it pays. On the project's 2-core CPU
# the EAGLE-3 head's fixed k = 3 ran at 0.84x of plain decoding at batch 4 and 0.87x at batch
# 16; `adaptive` with the step costs measured in the decode loop finds that no draft pays
# there at its prior acceptance and decodes plainly (specjax.engine.drafting_off);
# docs/benchmarks_notes.md, "Default policies above batch 1". At batch 1 the EAGLE-3 head keeps
# its fixed length (the measured best there).
#
# the Medusa-1 and Hydra++ heads above batch 1 draft only where `adaptive` expects the batch
# to finish at least 10% sooner per unit cost (`min_gain` 1.1; since 2026-12-07, forty-seventh
# session). At batch 4 on this CPU their best draft, one token at a first-token acceptance of
# 25-34%, is worth at most 7% more than its price, inside the error of the price itself:
# the step timed at 1.17-1.25 plain steps by the probe ran at about 1.3 in the Spec-Bench
# batches, and the batch waits for its unluckiest row. Drafting there at 1.0 ran at 0.89x in
# math and 0.92x in coding in decode time, decoding plainly at 0.98x / 0.94x (same run, 5
# repeats; docs/benchmarks_notes.md, "Medusa-1 and Hydra++ above batch 1: a margin ...").
# With the margin (configs/heads_b4_margin.py, 52 questions in batches of four, four
# repeats) Medusa-1 ran at 0.99x, lowest categories rag 0.966x and math 0.967x (seven at
# 0.93-0.96x before), Hydra++ at 0.98x with rag 0.92x (where it drafted only a probe).
# These defaults apply as a set where no `policy` is given.
#
# Above batch 1 the head drafters (`eagle`, `medusa`, `hydra`) under these defaults start
# `adaptive` from the first-token acceptance their head file records for the run's
# temperature (specjax.heads.measured; `specjax head record-acceptance`), at the even prior's
# weight (2 tokens), instead of the even prior (0.5); a head without such a record, an
# untrained head, a prior given in part, and batch 1 keep the even prior (since 2026-12-07,
# fiftieth session, for the shipped heads greedy; since the fifty-first read from the head
# files, and for sampled runs from a record at the nearest positive temperature). The shipped
# Medusa-1 and Hydra++ files record Spec-Bench's 130 questions at batch 1: greedy, their first
# drafted token was accepted 2,574 times in 9,874 (0.26) and 3,397 in 10,138 (0.335)
# (docs/results/spec_bench_heads_mh_default.journal.jsonl); at temperature 0.7 Medusa-1's
# 2,785 in 11,802 (0.236, docs/results/spec_bench_medusa_tree3_sampling.journal.jsonl) and
# Hydra++'s from docs/results/spec_bench_hydra_sampling.journal.jsonl. Where the machine's
# measured step costs say no draft pays at that acceptance under the margin (a one-token
# step of 1.25-1.31 plain steps at batch 4 with a 1,024-position cache on this project's
# 2-core CPU, 1.27-1.40 with 256) the run decodes plainly from the start
# (specjax.engine.drafting_off): there the even prior probed each batch, and the probes, the
# idle steps and Hydra++'s prefix pass cost it 2-3% (52 questions in batches of four, eight
# repeats: Hydra++ 0.975x, 95% 0.967-0.984, configs/hydra_b4_all_repeats8.py); since, both
# run plain decoding's program at batch 4 here (configs/heads_b4_prior.py). Where a one-token
# step costs under about 1.21 (Hydra++) or 1.15 (Medusa-1) plain steps the prior lets them
# draft (tested with measured costs faked at 1.05; no GPU has run it). The shipped EAGLE-3
# head records 0.511 greedy (docs/results/spec_bench_eagle_tree3.journal.jsonl, its chain of
# k = 3 over the 130 questions) and 0.488 at 0.7 (26 questions,
# docs/results/eagle_tree3_sampling_b1.journal.jsonl), both with its products in int8 (the
# CPU default): the even prior to within 2%, with which it pays at batch 4 here.
HEADS_BATCHED_MIN_GAIN = 1.1
HEAD_DRAFTERS = ("eagle", "medusa", "hydra")  # drafters that load a head file
PRIOR_KEYS = ("prior_accepted", "prior_rejected")
PRIOR_WEIGHT = 2.0  # the even prior's (1 accepted + 1 rejected), kept for a measured one
BATCHED_DEFAULTS: dict[str, dict[str, Any]] = {
    **{name: {"policy": "adaptive"}
       for name in ("eagle", "medusa", "hydra", "draft_model", "early_exit", "layer_skip")},
    **{name: {"policy": "adaptive", "min_gain": HEADS_BATCHED_MIN_GAIN}
       for name in ("medusa", "hydra")},
}


def _is_chain(args: dict) -> bool:
    return str(args.get("tree", "chain")).strip().lower() in ("", "chain", "none")


def _batched_defaults_apply(name: str, args: dict, batch: int) -> bool:
    """Whether :data:`BATCHED_DEFAULTS` apply (as a set): above batch 1, a chain, no policy
    given."""
    return batch > 1 and name in BATCHED_DEFAULTS and _is_chain(args) and "policy" not in args


def head_prior(drafter, temperature: float | None) -> dict[str, float]:
    """``prior_accepted`` / ``prior_rejected`` from the acceptance ``drafter``'s head file
    records for ``temperature`` (:func:`specjax.heads.measured.acceptance_for`) at
    :data:`PRIOR_WEIGHT`, or ``{}`` (no head file, no fitting record)."""
    from specjax.heads.measured import acceptance_for

    rec = acceptance_for(getattr(drafter, "head_dir", None), temperature)
    if rec is None:
        return {}
    return {"prior_accepted": round(PRIOR_WEIGHT * rec.rate, 3),
            "prior_rejected": round(PRIOR_WEIGHT * (1 - rec.rate), 3)}


def static_tree(drafter):
    """The static tree a drafter drafts (token recycling's, a Medusa topology), or None: a
    chain, or a tree whose shape the drafter chooses each step. A cost-aware policy prices
    its depths by the nodes each verifies (:func:`tree_step_cost`) unless the drafter's
    steps were timed whole in the decode loop (a model-based drafter, unless measuring is
    off or the caller gives the cost model: numbers for ``cost``, ``draft_cost`` or
    ``draft_overhead``; :mod:`specjax.draft_costs`)."""
    tree = getattr(drafter, "tree", None)
    return tree if tree is not None and getattr(tree, "kind", None) == "fixed" else None


class Method(NamedTuple):
    drafter: Any
    policy: Any
    verifier: Any  # None: the exact rule that fits the run (see specjax.verifiers.resolve)


def parse_method_args(items: list[str], what: str = "--method-arg") -> dict[str, str]:
    out = {}
    for it in items:
        if "=" not in it:
            raise DrafterError(f"{what} must look like key=value, got {it!r}")
        k, v = it.split("=", 1)
        k = k.strip()
        if not k:
            raise DrafterError(f"{what} has an empty key: {it!r}")
        out[k] = v.strip()
    return out


def parse_method_spec(spec: str) -> tuple[str, dict[str, str]]:
    """``"name:key=value,key=value"`` -> ``(name, args)``; ``;`` inside a value stands for a
    comma (``"ngram:sources=suffix;sssd"``). The form the scripts' ``--methods`` take."""
    name, _, rest = spec.partition(":")
    return name, parse_method_args([kv.replace(";", ",") for kv in rest.split(",") if kv],
                                   what=f"{spec!r}: an argument")


def split_method_specs(args: list[str]) -> list[str]:
    """A script's ``--methods`` arguments as one spec each: an argument with ``:`` is one spec
    (its commas separate its options), any other a comma-separated list of names."""
    return [x.strip() for arg in args for x in ([arg] if ":" in arg else arg.split(","))
            if x.strip()]


def base_method(name: str) -> str:
    """``"early_exit@tree"`` -> ``"early_exit"``: a label after ``@`` names a variant of a
    method (so one benchmark can compare, e.g., chain and tree drafting of one drafter)."""
    return name.split("@", 1)[0]


LEGACY_TREE_KEYS = ("tree_width", "tree_nodes", "sibling")


def _fold_legacy_tree_keys(name: str, args: dict) -> dict:
    """The spellings before the tree became one option (``tree=dynamic tree_width=3
    tree_nodes=10 sibling=iid``, as recorded runs and configs/trees.py use them) folded into
    the ``tree`` option, so old commands reproduce."""
    legacy = {k: args[k] for k in LEGACY_TREE_KEYS if k in args}
    if not legacy:
        return args
    from specjax.drafters.base import tree_option
    from specjax.registry import _coerce
    from specjax.tree import TreeError, parse_tree

    out = {k: v for k, v in args.items() if k not in LEGACY_TREE_KEYS}
    what = f"method {name!r}"
    width = _coerce(legacy.get("tree_width", 0), int, f"{what}: tree_width", DrafterError)
    nodes = _coerce(legacy.get("tree_nodes", 0), int, f"{what}: tree_nodes", DrafterError)
    k = _coerce(out.get("k", 4), int, f"{what}: k", DrafterError)
    tree = out.get("tree", "chain")
    if not isinstance(tree, str):
        raise DrafterError(f"{what}: {', '.join(legacy)} only modify a tree given as a string")
    try:
        spec = parse_tree(tree, k=k, width=width or None, nodes=nodes or None,
                          sibling=str(legacy.get("sibling", "wor")))
    except TreeError as e:
        raise DrafterError(f"{what}: {e}") from None
    out["tree"] = tree_option(spec, k) or spec
    return out


def _fill_measured_cost(args: dict, lm, max_k: int, batch: int,
                        cache_len: int | None = None) -> None:
    """``args["cost"]``: the verify-cost curve of this machine and target unless the caller
    gave one (numbers or a file); a mode (auto / builtin / refresh) picks how it is got.
    Above batch 1 it is the loop's steps against a plain step (``in_loop``): there a
    speculative step verifying a 1-token block already costs 1.21 plain steps on the
    project's CPU, and priced against a lone one-token forward `ngram` ran at 0.90x of plain
    decoding at batch 4, against plain steps at 0.97x (docs/benchmarks_notes.md). Batch 1
    keeps the lone-forward curve its recorded runs were tuned on."""
    mode = args.get("cost")
    if mode is None or str(mode).strip().lower() in cost_curves.MODES:
        args["cost"] = cost_curves.measured_cost(lm, max_k, batch, mode=mode,
                                                 in_loop=batch > 1, cache_len=cache_len)


def _fill_step_cost(args: dict, lm, drafter, name: str, d_args: dict, batch: int,
                    cache_len: int | None = None) -> bool:
    """``args["step_cost"]``: what a step that drafts k = 0..max_k tokens costs on this machine
    at this batch size, measured in the decode loop (:mod:`specjax.draft_costs`), unless the
    caller gave a cost model (``step_cost``; or numbers for ``draft_cost``, ``draft_overhead``
    or ``cost``, which are then used as given) or a ``builtin`` mode. ``draft_cost`` and
    ``cost`` may name the mode (``builtin`` wins over ``refresh``, ``refresh`` over ``auto``;
    neither: ``$SPECJAX_COST_CURVE``). True when ``args`` hold step costs, given or measured:
    the verify curve and the draft costs then go unused and are not measured."""
    from specjax import draft_costs

    if args.get("step_cost") is not None:
        return True
    given, modes = [], set()
    for field in ("draft_cost", "cost", "draft_overhead"):
        raw = args.get(field)
        if raw is None:
            continue
        if field == "draft_cost":
            value = draft_costs.parse_draft_cost(raw)
        else:
            value = raw.strip().lower() if isinstance(raw, str) else raw
        if field != "draft_overhead" and value in cost_curves.MODES:
            modes.add(value)
        else:  # a number or a curve: the caller's cost model
            given.append(field)
    mode = next((m for m in ("builtin", "refresh", "auto") if m in modes), None)
    model_free = getattr(drafter, "model_free", False)
    if given:
        if ("draft_cost" not in given and not model_free
                and cost_curves.resolve_mode(mode) != "builtin"):
            import warnings

            warnings.warn(
                f"method {name!r}: {' and '.join(f'{f}=' for f in given)} given without "
                f"draft_cost=: the policy prices the drafter's steps by that model with "
                f"nothing per drafted token; leave cost=, draft_cost= and draft_overhead= "
                f"unset to price whole steps as timed in the decode loop (step_cost)",
                draft_costs.DraftCostWarning, stacklevel=3)
        return False
    steps = draft_costs.measured_step_costs(lm, drafter, name, d_args, batch=batch,
                                            cache_len=cache_len, mode=mode)
    if steps is None:
        return False
    args["step_cost"] = steps
    args.pop("cost", None)
    args["draft_cost"] = 0.0
    return True


def _fill_draft_cost(args: dict) -> None:
    """``args["draft_cost"]`` as a number: a mode (auto / builtin / refresh) left over where
    no step cost was measured (a model-free drafter, or ``builtin``) counts nothing."""
    from specjax import draft_costs

    raw = args.get("draft_cost")
    value = 0.0 if raw is None else draft_costs.parse_draft_cost(raw)
    args["draft_cost"] = 0.0 if isinstance(value, str) else value


def _check_ar(args) -> None:
    if args:
        raise DrafterError(f"method 'ar' (plain decoding) takes no arguments, got {args}")


def _split_args(name: str, args: dict | None, batch: int, greedy: bool = True):
    """Method ``name``'s arguments with its defaults, split between the drafter, the policy
    and the verifier: ``(policy name, verifier name, d_args, p_args, v_args)``; an option
    none of them takes is an error naming who does."""
    args = dict(args or {})
    if name not in METHODS:
        raise DrafterError(f"unknown method {name!r}; available: {', '.join(METHODS)}")
    if batch == 1 and not {*GREEDY_B1_OFF, *LEGACY_TREE_KEYS} & set(args):
        b1 = GREEDY_B1_DEFAULTS if greedy else SAMPLED_B1_DEFAULTS
        args = {**b1.get(name, {}), **args}
    chain = _is_chain(args)
    batched = BATCHED_DEFAULTS.get(name, {}) if _batched_defaults_apply(name, args, batch) else {}
    defaults = {**DEFAULTS.get(name, {}), **(CHAIN_DEFAULTS.get(name, {}) if chain else {}),
                **batched}
    merged = _fold_legacy_tree_keys(name, {**defaults, **args})
    args = _fold_legacy_tree_keys(name, args)
    pol_name = str(merged.pop("policy", "fixed"))
    ver_name = merged.pop("verifier", None)
    POLICIES.entry(pol_name)  # unknown names: an error listing the registered ones
    if ver_name not in (None, "exact"):
        VERIFIERS.entry(ver_name)
    d_keys = set(DRAFTERS.option_names(name))
    p_keys = set(POLICIES.option_names(pol_name))
    v_keys = set(VERIFIERS.option_names(ver_name)) if ver_name not in (None, "exact") else set()
    d_args, p_args, v_args = {}, {}, {}
    for key, val in merged.items():
        if key in d_keys:
            d_args[key] = val
        elif key in p_keys:
            p_args[key] = val
        elif key in v_keys:
            v_args[key] = val
        elif key not in args:  # a default of another policy (e.g. decay): not used here
            continue
        else:
            owners = [f"policy={p}" for p in POLICIES.names() if key in
                      POLICIES.option_names(p)]
            owners += [f"verifier={v}" for v in VERIFIERS.names() if key in
                       VERIFIERS.option_names(v)]
            if owners:
                raise DrafterError(f"method {name!r}: {key}= only applies to "
                                   f"{' or '.join(owners)}")
            accepted = sorted(d_keys | p_keys | v_keys | {"policy", "verifier"})
            raise DrafterError(f"method {name!r} does not take {key!r}; it accepts: "
                               f"{', '.join(accepted)}")
    return pol_name, ver_name, d_args, p_args, v_args


def resolved(name: str, args: dict[str, Any] | None = None, *, batch: int = 1,
             greedy: bool = True) -> tuple[str, dict[str, Any]]:
    """``(policy name, drafter options)`` of method ``name`` (its variant label after ``@``
    ignored) with its defaults at ``batch``, as :func:`build` would use them, nothing built."""
    pol_name, _, d_args, _, _ = _split_args(base_method(name), args, batch, greedy)
    return pol_name, d_args


def build_drafter(name: str, lm, args: dict[str, Any] | None = None, *, batch: int = 1,
                  greedy: bool = True):
    """Method ``name``'s drafter alone (None for ``ar``), with nothing measured: a drafter
    that weighs verify costs itself gets the built-in curve unless given one. For checks
    that need the drafter before :func:`build` spends minutes measuring costs (does it
    learn across calls?)."""
    name = base_method(name)
    if name == "ar":
        _check_ar(args)
        return None
    _, _, d_args, _, _ = _split_args(name, args, batch, greedy)
    return _make_drafter(name, lm, d_args, batch, measure=False)


def _make_drafter(name: str, lm, d_args: dict, batch: int, *, measure: bool,
                  cache_len: int | None = None):
    """The drafter of ``d_args``; one that weighs verify costs itself gets this machine's
    curve (``measure``) or, unless given one, the built-in curve."""
    if "cost" in DRAFTERS.option_names(name):
        mode = d_args.get("cost")
        if not measure and (mode is None or str(mode).strip().lower() in cost_curves.MODES):
            d_args["cost"] = "builtin"
        _fill_measured_cost(d_args, lm, int(d_args.get("k", DRAFTERS.make_config(name, {}).k)),
                            batch, cache_len)
    return DRAFTERS.build(name, d_args, lm)


def build(name: str, lm, args: dict[str, Any] | None = None, *, batch: int = 1,
          cache_len: int | None = None, greedy: bool = True,
          temperature: float | None = None) -> Method:
    """Builds method ``name`` (its variant label after ``@`` is ignored) for the target.

    ``batch`` is the batch size it will decode at: a cost-aware policy's step costs are
    measured (and cached) for it in the decode loop for a model-based drafter
    (:mod:`specjax.draft_costs`), its verify-cost curve for a model-free one
    (:mod:`specjax.cost_curves`). Above
    batch 1 the model-based chain drafters default to the cost-aware ``adaptive`` policy
    (:data:`BATCHED_DEFAULTS`, as a set where no ``policy`` is given: the Medusa-1 and
    Hydra++ heads' ``min_gain`` margin with it); ``policy=fixed`` keeps a fixed length.
    ``greedy`` (decoding at temperature 0): at batch 1 the defaults of
    :data:`GREEDY_B1_DEFAULTS` apply (the EAGLE-3 head's 3-node dynamic tree, the Medusa-1
    heads' 3-node static tree under ``adaptive``) where no ``tree``, ``k`` or ``policy`` is
    given; when sampling, those of :data:`SAMPLED_B1_DEFAULTS` (the Medusa-1 heads' tree
    only).

    ``cache_len`` is the KV-cache length the generations will compile, where known: the step
    costs, and above batch 1 the in-loop verify curve, are timed with a cache about that long
    (:func:`specjax.buckets.probe_cache_length`; None: 256 positions).

    ``temperature`` (when sampling; greedy is 0): above batch 1 under those defaults a head
    drafter starts ``adaptive`` from the first-token acceptance its head file records for
    the run's temperature (:func:`head_prior`; with the exact verifier only: a lossy one
    accepts by another rule); sampling with ``temperature`` None, the even prior."""
    name = base_method(name)
    if name == "ar":
        _check_ar(args)
        return Method(None, None, None)
    pol_name, ver_name, d_args, p_args, v_args = _split_args(name, args, batch, greedy)
    drafter = _make_drafter(name, lm, d_args, batch, measure=True, cache_len=cache_len)
    p_opts = POLICIES.option_names(pol_name)
    # the whole step's cost, measured in the decode loop of this machine (model-based drafters)
    priced = "step_cost" in p_opts and _fill_step_cost(p_args, lm, drafter, name, d_args,
                                                       batch, cache_len)
    tree = static_tree(drafter)
    if "cost" in p_opts and not priced:  # the verify curve of this machine and target
        # (a static tree's blocks hold all its nodes: the curve must reach that far)
        _fill_measured_cost(p_args, lm, drafter.max_k if tree is None else tree.num_nodes,
                            batch, cache_len)
    if "draft_cost" in p_opts and not priced:
        _fill_draft_cost(p_args)
    # a policy may fill options from the drafter it runs with (specdec++: the acceptance
    # head shipped for this very drafter, when none is given)
    fill = getattr(POLICIES.entry(pol_name).config, "defaults_for_drafter", None)
    if fill is not None:
        p_args = dict(fill(dict(p_args), drafter))
    given = dict(args or {})
    if (_batched_defaults_apply(name, given, batch) and set(PRIOR_KEYS) <= set(p_opts)
            and not any(k in given for k in PRIOR_KEYS)
            and ver_name in (None, "exact")):  # records hold what the exact rule accepts
        p_args.update(head_prior(drafter, 0.0 if greedy else temperature))
    policy = POLICIES.build(pol_name, p_args, max_k=drafter.max_k)
    if tree is not None and not priced and "step_cost" in p_opts and not policy.step_cost:
        # a policy's k cuts the tree at depth k: price each depth by the nodes it verifies
        policy = dataclasses.replace(policy, step_cost=tree_step_cost(
            policy.cost, tree, policy.draft_cost, policy.draft_overhead,
            per_node=bool(getattr(drafter, "model_free", False))))
    if hasattr(policy, "check_target"):  # e.g. a profiled table: for this model and device?
        policy.check_target(lm)
    if hasattr(policy, "check_drafter"):  # e.g. an acceptance head: for this drafter?
        policy.check_drafter(drafter)
    verifier = None if ver_name in (None, "exact") else VERIFIERS.build(ver_name, v_args)
    return Method(drafter, policy, verifier)


def changed_options(component, beside: tuple[str, ...] = ("max_k",)) -> dict:
    """A policy's or verifier's options that differ from its class defaults, as JSON values
    (``{}`` for a component that is not a dataclass), leaving out the fields in ``beside``
    (recorded next to the name) and those marked ``metadata={"recorded": False}``: costs
    measured on the machine, a file path of this checkout. Results files show them (what a
    reader needs to rebuild the method); journals compare :func:`option_settings`."""
    return _recorded_options(component, beside, changed_only=True)


def option_settings(component, beside: tuple[str, ...] = ("max_k",)) -> dict:
    """Every recorded option of a policy or verifier as resolved, defaults included (the
    same fields as :func:`changed_options`). Bench journals record them (``policy_settings``,
    ``verifier_settings``), so a run continued after a default changed, a builder's
    (``min_gain`` of the heads above batch 1, :data:`BATCHED_DEFAULTS`) or a class's, is
    refused rather than mixed with the earlier runs."""
    return _recorded_options(component, beside, changed_only=False)


def _recorded_options(component, beside: tuple[str, ...], changed_only: bool) -> dict:
    if component is None or not dataclasses.is_dataclass(component):
        return {}
    out = {}
    for f in dataclasses.fields(component):
        if not f.init or f.name in beside or f.metadata.get("recorded", True) is False:
            continue
        value = getattr(component, f.name)
        if not changed_only or value != field_default(f):
            out[f.name] = _json_value(value)
    return out


def _json_value(value):
    """Tuples as lists and NumPy/JAX arrays and scalars as Python values."""
    if isinstance(value, (tuple, list)):
        return [_json_value(v) for v in value]
    if hasattr(value, "shape") and hasattr(value, "tolist"):
        return value.tolist()
    return value


def describe(drafter, policy, verifier=None) -> dict:
    """The method's settings for results files: names, the drafter's main options, the
    policy's and verifier's options that differ from their defaults (``policy_options``,
    ``verifier_options``) and all of them as resolved (``policy_settings``,
    ``verifier_settings``: what a journal compares)."""
    if drafter is None:
        return {"method": "ar"}
    out = {"method": drafter.name, "k": drafter.max_k, "policy": policy.name,
           "verifier": getattr(verifier, "name", "exact"),
           "exact": bool(getattr(verifier, "exact", True)),
           "policy_options": changed_options(policy, ("max_k", "threshold")),
           "verifier_options": changed_options(verifier),
           "policy_settings": option_settings(policy, ("max_k", "threshold")),
           "verifier_settings": option_settings(verifier)}
    for f in ("exit_layer", "exit_layers", "skip_attn", "skip_mlp", "min_ngram", "max_ngram",
              "description"):
        if hasattr(drafter, f):
            out[f] = getattr(drafter, f)
    if getattr(drafter, "tree", None) is not None:
        out["tree"] = drafter.tree.describe()
    extra = getattr(drafter, "describe_extra", None)  # e.g. a carried table's mode
    if callable(extra):
        out.update(extra())
    if getattr(policy, "threshold", None) is not None:
        out["threshold"] = policy.threshold
    return out


def registry_table() -> dict[str, list[dict]]:
    """Every registered drafter, policy and verifier with its options (``specjax methods``)."""
    return {"drafters": DRAFTERS.describe(), "policies": POLICIES.describe(),
            "verifiers": VERIFIERS.describe()}
