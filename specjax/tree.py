"""Static padded token trees: shapes, topologies, derived masks and positions.

A draft tree of one step hangs below the row's *pending* token (the root, index 0 of the
verified block; it is the newest token, not yet in the target cache). Its ``N`` drafted nodes
are numbered ``0..N-1`` in breadth-first order: every node's parent precedes it, the nodes of
one depth are contiguous, and siblings appear in the order they were drawn (the lossless
multi-draft rule tries them in that order). In the verified block, node ``i`` sits at index
``i + 1`` and position ``committed_length + depth[i]``.

A chain of ``k`` tokens is the tree with one branch (``parent[i] = i - 1``).

Two objects:

* :class:`TreeSpec`: static (hashable, part of the compiled program): the kind of tree, its
  node budget ``N``, maximum depth ``D``, and for fixed topologies the parent of each node.
* :class:`DraftTree`: arrays per row (``tokens``, ``parent``, ``depth``, ``valid`` and the draft
  distributions the lossless rule needs).

Ancestor masks and position ids are derived (:func:`ancestor_mask`, :func:`tree_positions`),
never stored twice.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from specjax.errors import TreeError  # noqa: F401  (re-exported)


KINDS = ("chain", "fixed", "topk", "dynamic")
SIBLING_RULES = ("wor", "iid")


@dataclasses.dataclass(frozen=True)
class TreeSpec:
    """Static shape of the draft tree of every step.

    Attributes:
      kind: ``"chain"`` (one branch of ``depth`` tokens), ``"fixed"`` (a static topology,
        ``parents``), ``"topk"`` (per depth, every frontier node proposes ``width`` children and
        the ``width`` best by cumulative draft log-probability form the next level: ``N =
        width * depth``) or ``"dynamic"`` (EAGLE-2 / DySpec style: the same expansion, then the
        ``nodes`` best of all generated candidates by cumulative log-probability are verified).
      depth: maximum depth ``D`` (the longest drafted path).
      width: children per expanded node (``topk`` / ``dynamic``).
      nodes: node budget ``N`` for ``dynamic`` (others derive it).
      parents: for ``fixed``: parent of each node (``-1`` = the root), breadth-first.
      sibling: how siblings are drawn when sampling (``fixed`` trees): ``"wor"`` without
        replacement (Gumbel-top-k, verified with the recursive rule) or ``"iid"`` with
        replacement (SpecInfer's rule). ``topk`` / ``dynamic`` trees choose their children
        deterministically (the top-k of the draft distribution) and are verified with the
        deterministic-candidate rule; greedy decoding ignores this field.
    """

    kind: str = "chain"
    depth: int = 4
    width: int = 1
    nodes: int = 0
    parents: tuple[int, ...] = ()
    sibling: str = "wor"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise TreeError(f"unknown tree kind {self.kind!r}; available: {', '.join(KINDS)}")
        if self.sibling not in SIBLING_RULES:
            raise TreeError(f"sibling must be one of {SIBLING_RULES}, got {self.sibling!r}")
        for name in ("depth", "width"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise TreeError(f"tree {name} must be an integer >= 1, got {v!r}")
        if self.kind == "fixed":
            validate_topology(self.parents)
        elif self.kind == "dynamic":
            cands = self.width + (self.depth - 1) * self.width * self.width
            if not isinstance(self.nodes, int) or not 1 <= self.nodes <= cands:
                raise TreeError(
                    f"a dynamic tree of width {self.width} and depth {self.depth} generates "
                    f"{cands} candidates; nodes must be in [1, {cands}], got {self.nodes!r}")

    # ------------------------------------------------------------------ constructors

    @classmethod
    def chain(cls, k: int) -> "TreeSpec":
        return cls(kind="chain", depth=k, width=1)

    @classmethod
    def topk(cls, width: int, depth: int) -> "TreeSpec":
        return cls(kind="topk", depth=depth, width=width)

    @classmethod
    def dynamic(cls, width: int, depth: int, nodes: int) -> "TreeSpec":
        return cls(kind="dynamic", depth=depth, width=width, nodes=nodes)

    @classmethod
    def fixed(cls, parents: Sequence[int], sibling: str = "wor") -> "TreeSpec":
        parents = tuple(int(p) for p in parents)
        depth = int(max(node_depths(parents))) if parents else 1
        return cls(kind="fixed", depth=depth, width=max_children(parents), parents=parents,
                   sibling=sibling)

    @classmethod
    def from_choices(cls, choices: Sequence[Sequence[int]], sibling: str = "wor") -> "TreeSpec":
        """Medusa-style topology: each choice is a path of sibling ranks from the root, e.g.
        ``[[0], [1], [0, 0], [0, 1], [1, 0]]``: two children of the root (ranks 0 and 1), two
        below the first, one below the second. Every path's prefix must be a choice too, and
        ranks below one parent must be 0, 1, 2, ... without gaps."""
        return cls.fixed(parents_from_choices(choices), sibling=sibling)

    @classmethod
    def from_level_widths(cls, widths: Sequence[int], sibling: str = "wor") -> "TreeSpec":
        """Token-Recycling-style topology given the number of nodes at each depth.

        The ``widths[d]`` nodes of depth ``d + 1`` are shared out among the nodes of depth ``d``
        as evenly as possible, earlier (more likely) parents first, e.g. ``(4, 6, 2)``: the
        root has 4 children, they have 2, 2, 1, 1 children, and the first two of depth 2 have
        one each."""
        widths = [int(w) for w in widths]
        if not widths or any(w < 1 for w in widths):
            raise TreeError(f"level widths must be integers >= 1, got {list(widths)}")
        parents: list[int] = []
        prev = [-1]
        for w in widths:
            base, extra = divmod(w, len(prev))
            level = []
            for i, p in enumerate(prev):
                for _ in range(base + (1 if i < extra else 0)):
                    level.append(len(parents))
                    parents.append(p)
            prev = level
        return cls.fixed(parents, sibling=sibling)

    # ------------------------------------------------------------------ derived sizes

    @property
    def num_nodes(self) -> int:
        """``N``: drafted nodes per row (excluding the root)."""
        if self.kind == "chain":
            return self.depth
        if self.kind == "fixed":
            return len(self.parents)
        if self.kind == "topk":
            return self.width * self.depth
        return self.nodes

    @property
    def is_chain(self) -> bool:
        if self.kind == "chain":
            return True
        if self.kind == "fixed":
            return self.parents == tuple(range(-1, len(self.parents) - 1))
        return self.width == 1 and (self.kind == "topk" or self.nodes == self.depth)

    def describe(self) -> str:
        if self.kind == "chain":
            return f"chain(k={self.depth})"
        if self.kind == "fixed":
            return f"fixed(N={self.num_nodes}, D={self.depth}, sibling={self.sibling})"
        if self.kind == "topk":
            return f"topk(width={self.width}, depth={self.depth}, N={self.num_nodes})"
        return f"dynamic(width={self.width}, depth={self.depth}, N={self.nodes})"


# ----------------------------------------------------------------------------- topology helpers


def node_depths(parents: Sequence[int]) -> np.ndarray:
    """Depth of every node (root children: 1) of a valid parent list."""
    d = np.zeros(len(parents), np.int32)
    for i, p in enumerate(parents):
        d[i] = 1 if p < 0 else d[p] + 1
    return d


def static_topology(spec: "TreeSpec | None", k: int) -> tuple[tuple[int, ...], tuple[int, ...],
                                                              tuple[int, ...]]:
    """(parent, sibling rank, depth) of each node of a fixed tree, breadth-first; a chain of
    ``k`` tokens (one node per level) when ``spec`` is None or a chain."""
    parents = tuple(range(-1, k - 1)) if spec is None or spec.kind == "chain" else spec.parents
    ranks = tuple(sum(1 for q in parents[:i] if q == p) for i, p in enumerate(parents))
    return tuple(parents), ranks, tuple(int(d) for d in node_depths(parents))


def max_children(parents: Sequence[int]) -> int:
    counts: dict[int, int] = {}
    for p in parents:
        counts[p] = counts.get(p, 0) + 1
    return max(counts.values()) if counts else 1


def validate_topology(parents: Sequence[int]) -> None:
    """Raises :class:`TreeError` unless ``parents`` is a breadth-first tree below one root.

    Rules: at least one node; ``parents[i]`` is ``-1`` (the root) or an earlier node
    (``0 <= parents[i] < i``); depths never decrease along the node order (the nodes of one
    depth are contiguous, so a depth limit keeps a prefix of the nodes).
    """
    parents = list(parents)
    if not parents:
        raise TreeError("a tree needs at least one node")
    for i, p in enumerate(parents):
        if not isinstance(p, (int, np.integer)) or not (p == -1 or 0 <= p < i):
            raise TreeError(
                f"node {i} has parent {p!r}: a parent must be -1 (the root) or an earlier node "
                f"(0..{i - 1}); parents must precede their children")
    d = node_depths(parents)
    for i in range(1, len(parents)):
        if d[i] < d[i - 1]:
            raise TreeError(
                f"node {i} (depth {d[i]}) comes after node {i - 1} (depth {d[i - 1]}): nodes must "
                "be in breadth-first order (depths non-decreasing)")


def parents_from_choices(choices: Sequence[Sequence[int]]) -> tuple[int, ...]:
    paths = [tuple(int(r) for r in c) for c in choices]
    if not paths:
        raise TreeError("a tree needs at least one choice (path of sibling ranks)")
    if any(len(p) == 0 for p in paths):
        raise TreeError("an empty choice names the root itself; list only drafted nodes")
    if any(r < 0 for p in paths for r in p):
        raise TreeError(f"sibling ranks must be >= 0: {paths}")
    if len(set(paths)) != len(paths):
        dup = sorted({p for p in paths if paths.count(p) > 1})
        raise TreeError(f"duplicate choices: {dup}")
    have = set(paths)
    for p in paths:
        if len(p) > 1 and p[:-1] not in have:
            raise TreeError(f"choice {list(p)} has no parent choice {list(p[:-1])}")
        if p[-1] > 0 and p[:-1] + (p[-1] - 1,) not in have:
            raise TreeError(f"choice {list(p)} skips sibling rank {p[-1] - 1}: ranks below one "
                            "parent must be 0, 1, 2, ... without gaps")
    order = sorted(paths, key=lambda p: (len(p), p))
    index = {p: i for i, p in enumerate(order)}
    return tuple(-1 if len(p) == 1 else index[p[:-1]] for p in order)


def parse_tree(value: str, *, k: int = 4, width: int | None = None, depth: int | None = None,
               nodes: int | None = None, sibling: str = "wor") -> TreeSpec:
    """Parses the ``tree=`` method argument.

    ``chain`` (``k`` tokens); ``topk`` (default width 4, depth ``k``) and ``dynamic`` (default
    width 4, depth ``k``, 16 nodes), each optionally with ``:key=value,...`` overriding
    ``width``, ``depth`` and (dynamic) ``nodes``, e.g. ``dynamic:width=4,nodes=8``;
    ``fixed:<choices>`` with choices as comma-separated paths of dot-separated sibling ranks
    (``fixed:0,1,0.0,0.1,1.0``) and ``levels:<w1>.<w2>...`` (nodes per depth, e.g.
    ``levels:4.6.2``), each optionally followed by ``:iid`` or ``:wor`` (how siblings are
    drawn when sampling). The keyword arguments give the defaults the string overrides.
    """
    if not isinstance(value, str) or not value:
        raise TreeError(f"tree must be a string such as 'chain', 'topk', 'dynamic', "
                        f"'fixed:0,1,0.0' or 'levels:4.2', got {value!r}")
    kind, _, arg = value.partition(":")
    kind = kind.strip()
    if kind == "chain":
        if arg:
            raise TreeError("tree=chain takes no ':' argument (set the length with k=)")
        return TreeSpec.chain(depth or k)
    if kind in ("topk", "dynamic"):
        allowed = ("width", "depth") + (("nodes",) if kind == "dynamic" else ())
        opts = {}
        for part in filter(None, (p.strip() for p in arg.split(","))):
            key, eq, val = part.partition("=")
            key = key.strip()
            if not eq or key not in allowed:
                raise TreeError(f"tree={kind} takes ':' options {', '.join(allowed)} as "
                                f"key=value, got {part!r}")
            try:
                opts[key] = int(val)
            except ValueError:
                raise TreeError(f"tree={kind}: {key} must be an integer, got {val!r}") from None
        w = opts.get("width", width or 4)
        d = opts.get("depth", depth or k)
        if kind == "topk":
            return TreeSpec.topk(w, d)
        return TreeSpec.dynamic(w, d, opts.get("nodes", nodes or min(16, w + (d - 1) * w * w)))
    if kind in ("fixed", "levels"):
        arg, _, rule = arg.partition(":")
        rule = rule.strip() or sibling
        if kind == "fixed":
            try:
                choices = [[int(r) for r in path.split(".")] for path in arg.split(",")
                           if path.strip()]
            except ValueError:
                raise TreeError(f"tree=fixed:<choices> wants comma-separated paths of "
                                f"dot-separated integers, e.g. fixed:0,1,0.0; got {arg!r}"
                                ) from None
            return TreeSpec.from_choices(choices, sibling=rule)
        try:
            widths = [int(w) for w in arg.split(".") if w.strip()]
        except ValueError:
            raise TreeError(f"tree=levels:<widths> wants dot-separated integers, e.g. "
                            f"levels:4.6.2; got {arg!r}") from None
        return TreeSpec.from_level_widths(widths, sibling=rule)
    raise TreeError(f"unknown tree {value!r}; use chain, topk, dynamic, fixed:<choices> or "
                    "levels:<widths>")


# ----------------------------------------------------------------------------- arrays


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DraftTree:
    """The drafted tree of one step, per row (``N`` nodes below the pending token).

    Attributes:
      tokens: ``int32[B, N]`` drafted token of each node.
      parent: ``int32[B, N]`` parent node (``-1`` = the root); ``parent[b, i] < i``.
      depth: ``int32[B, N]`` depth (children of the root: 1).
      valid: ``bool[B, N]`` the node was drafted this step (a prefix of the nodes: depth
        limits keep whole levels). Invalid nodes are verified as padding and never accepted.
      q: ``float32[B, N + 1, V]`` or None: the processed draft distribution at the root
        (index 0) and at each node (index ``i + 1``): the distribution that node's children were
        drawn from (needed by the lossless rule when sampling; None when greedy or when the
        children were chosen deterministically).
      slot: ``int32[B, N]`` or None: the drafter's scratch slot of each node (offset past the
        root) if the drafter fed it through a network with its own cache, else -1; a drafter
        uses it to commit the accepted path into that cache.
    """

    tokens: jax.Array
    parent: jax.Array
    depth: jax.Array
    valid: jax.Array
    q: jax.Array | None = None
    slot: jax.Array | None = None

    @property
    def num_nodes(self) -> int:
        return self.tokens.shape[1]

    @classmethod
    def chain(cls, tokens: jax.Array, n: jax.Array, q: jax.Array | None = None) -> "DraftTree":
        """The one-branch tree of a drafted chain (``tokens[B, K]``, ``n[B]`` valid)."""
        B, K = tokens.shape
        ar = jnp.arange(K, dtype=jnp.int32)
        return cls(tokens=tokens, parent=jnp.broadcast_to(ar - 1, (B, K)),
                   depth=jnp.broadcast_to(ar + 1, (B, K)), valid=ar[None] < n[:, None], q=q)


def ancestor_mask(parent: jax.Array, max_depth: int) -> jax.Array:
    """``bool[B, N + 1, N + 1]`` over the verified block (root at index 0): entry ``[i, j]``
    is true iff block entry ``j`` is an ancestor of ``i`` or ``i`` itself.

    For a chain this is the causal mask.
    """
    B, N = parent.shape
    # parent in block indices: node i -> i + 1, root (0) has no parent (-1)
    pb = jnp.concatenate([jnp.full((B, 1), -1, jnp.int32), parent.astype(jnp.int32) + 1], axis=1)
    cur = jnp.broadcast_to(jnp.arange(N + 1, dtype=jnp.int32)[None], (B, N + 1))
    cols = jnp.arange(N + 1, dtype=jnp.int32)
    mask = cur[..., None] == cols
    for _ in range(max_depth):
        cur = jnp.where(cur >= 0, jnp.take_along_axis(pb, jnp.maximum(cur, 0), axis=1), -1)
        mask = mask | (cur[..., None] == cols)
    return mask


def tree_positions(depth: jax.Array, base: jax.Array) -> jax.Array:
    """``int32[B, N + 1]`` rotary positions of the verified block: ``base + [0, depth...]``."""
    B = depth.shape[0]
    return base[:, None] + jnp.concatenate([jnp.zeros((B, 1), jnp.int32), depth], axis=1)


def check_tree(tree: DraftTree) -> None:
    """Host-side validation of a concrete :class:`DraftTree` (tests, debugging, external
    drafters): parents precede children, depths consistent, valid nodes' parents valid,
    valid nodes a prefix. Raises :class:`TreeError` naming the row and node."""
    parent = np.asarray(tree.parent)
    depth = np.asarray(tree.depth)
    valid = np.asarray(tree.valid)
    B, N = parent.shape
    for b in range(B):
        for i in range(N):
            p = int(parent[b, i])
            if not (p == -1 or 0 <= p < i):
                raise TreeError(f"row {b}, node {i}: parent {p} does not precede it")
            want = 1 if p < 0 else int(depth[b, p]) + 1
            if int(depth[b, i]) != want:
                raise TreeError(f"row {b}, node {i}: depth {int(depth[b, i])}, expected {want}")
            if valid[b, i] and p >= 0 and not valid[b, p]:
                raise TreeError(f"row {b}, node {i} is valid but its parent {p} is not")
        nv = int(valid[b].sum())
        if not valid[b, :nv].all():
            raise TreeError(f"row {b}: valid nodes must be a prefix of the node order")
