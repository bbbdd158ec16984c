"""Tokenizers built with the `tokenizers` library, and chat templates rendered with jinja2."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Sequence

import jinja2
import jinja2.sandbox
from tokenizers import AddedToken, Regex, Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers
import hashlib
import json

from specjax.errors import DataError, TokenizerError  # noqa: F401  (re-exported)

# GGUF token types (llama.cpp's llama_token_type)
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6

# Pre-tokenizer regexes named by GGUF's `tokenizer.ggml.pre`.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _pre_tokenizer(pre: str | None):
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in ("smollm", "starcoder", "refact"):
        # byte-level BPE with every digit split on its own
        return pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    if pre in ("llama-bpe", "llama3", "dbrx", "smaug-bpe"):
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    if pre in ("qwen2",):
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    if pre not in (None, "gpt2", "default"):
        warnings.warn(
            f"unknown GGUF pre-tokenizer {pre!r}: using GPT-2 byte-level splitting; "
            "tokenization may differ from the original. Load a tokenizer.json to be exact.",
            stacklevel=3,
        )
    return byte_level


@dataclasses.dataclass
class Tokenizer:
    """Text <-> token ids, special tokens and the chat template of a checkpoint."""

    backend: HFTokenizer
    eos_ids: tuple[int, ...]
    bos_id: int | None = None
    pad_id: int | None = None
    add_bos: bool = False
    chat_template: str | None = None
    bos_token: str | None = None
    eos_token: str | None = None

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, *, add_bos: bool | None = None) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        ids = self.backend.encode(text, add_special_tokens=False).ids
        if (self.add_bos if add_bos is None else add_bos) and self.bos_id is not None:
            ids = [self.bos_id] + ids
        return ids

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def id_to_token(self, i: int) -> str | None:
        return self.backend.id_to_token(int(i))

    def apply_chat_template(self, messages: Sequence[dict], *, add_generation_prompt: bool = True
                            ) -> str:
        """Renders ``messages`` (``[{"role", "content"}]``) with the checkpoint's template."""
        if not self.chat_template:
            raise TokenizerError(
                "this checkpoint has no chat template; pass --no-chat-template (CLI) or "
                "chat_template=False to use raw prompts"
            )
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

        def raise_exception(msg):
            raise TokenizerError(f"chat template error: {msg}")

        env.globals["raise_exception"] = raise_exception
        tmpl = env.from_string(self.chat_template)
        return tmpl.render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "",
            eos_token=self.eos_token or "",
        )

    def encode_chat(self, user_text: str, system: str | None = None) -> list[int]:
        msgs = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": user_text}
        ]
        # the template already contains any BOS text it wants
        return self.encode(self.apply_chat_template(msgs), add_bos=False)


def tokenizer_from_gguf_fields(fields: dict, source: str) -> Tokenizer:
    """Builds the tokenizer from GGUF metadata (``tokenizer.ggml.*``)."""
    model = fields.get("tokenizer.ggml.model")
    if model is None:
        raise TokenizerError(f"{source}: no tokenizer in GGUF metadata (tokenizer.ggml.model)")
    if model != "gpt2":
        raise TokenizerError(
            f"{source}: GGUF tokenizer model {model!r} is not supported (only byte-level BPE, "
            "'gpt2'); load the checkpoint's tokenizer.json instead"
        )
    if "tokenizer.ggml.tokens" not in fields:
        raise TokenizerError(f"{source}: GGUF metadata lacks tokenizer.ggml.tokens")
    tokens = list(fields["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in fields.get("tokenizer.ggml.merges", [])]
    types = list(fields.get("tokenizer.ggml.token_type", [_NORMAL] * len(tokens)))
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise TokenizerError(f"{source}: duplicate tokens in tokenizer.ggml.tokens")
    tok = HFTokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = _pre_tokenizer(fields.get("tokenizer.ggml.pre"))
    tok.decoder = decoders.ByteLevel()
    added = [
        AddedToken(tokens[i], special=(types[i] == _CONTROL), normalized=False)
        for i in range(len(tokens))
        if types[i] in (_CONTROL, _USER_DEFINED)
    ]
    tok.add_tokens(added)
    if tok.get_vocab_size(with_added_tokens=True) != len(tokens):
        raise TokenizerError(f"{source}: tokenizer vocabulary size changed while building")

    def tid(key):
        v = fields.get(key)
        return int(v) if v is not None else None

    eos = tid("tokenizer.ggml.eos_token_id")
    eot = tid("tokenizer.ggml.eot_token_id")
    eos_ids = tuple(dict.fromkeys(i for i in (eos, eot) if i is not None))
    bos = tid("tokenizer.ggml.bos_token_id")
    return Tokenizer(
        backend=tok,
        eos_ids=eos_ids,
        bos_id=bos,
        pad_id=tid("tokenizer.ggml.padding_token_id"),
        add_bos=bool(fields.get("tokenizer.ggml.add_bos_token", False)),
        chat_template=fields.get("tokenizer.chat_template"),
        bos_token=tokens[bos] if bos is not None else None,
        eos_token=tokens[eos] if eos is not None else None,
    )


def tokenizer_from_hf_dir(path, config: dict, source: str) -> Tokenizer:
    """Builds the tokenizer from ``tokenizer.json`` (+ ``tokenizer_config.json``)."""
    import json
    from pathlib import Path

    path = Path(path)
    tj = path / "tokenizer.json"
    if not tj.exists():
        raise TokenizerError(f"{source}: no tokenizer.json in {path}")
    try:
        backend = HFTokenizer.from_file(str(tj))
    except Exception as e:  # tokenizers raises a bare Exception
        raise TokenizerError(f"{tj}: cannot parse tokenizer ({e})") from e

    def read_json(name):
        f = path / name
        if not f.exists():
            return {}
        try:
            out = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise TokenizerError(f"{f}: cannot read ({e})") from None
        if not isinstance(out, dict):
            raise TokenizerError(f"{f}: expected a JSON object")
        return out

    tcfg = read_json("tokenizer_config.json")

    def tok_str(v):
        if isinstance(v, dict):
            return v.get("content")
        return v

    bos_token = tok_str(tcfg.get("bos_token"))
    eos_token = tok_str(tcfg.get("eos_token"))
    eos_ids = []
    cfg_eos = config.get("eos_token_id")
    gen = read_json("generation_config.json")
    cfg_eos = gen.get("eos_token_id", cfg_eos)
    if isinstance(cfg_eos, int):
        eos_ids.append(cfg_eos)
    elif isinstance(cfg_eos, list):
        eos_ids.extend(int(i) for i in cfg_eos)
    if eos_token is not None and backend.token_to_id(eos_token) is not None:
        eos_ids.append(backend.token_to_id(eos_token))
    bos_id = config.get("bos_token_id")
    if bos_token is not None and backend.token_to_id(bos_token) is not None:
        bos_id = backend.token_to_id(bos_token)
    template = tcfg.get("chat_template")
    if isinstance(template, list):  # named templates: take "default"
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    if template is None and (path / "chat_template.jinja").exists():
        # newer transformers versions save the template beside the config, not inside it
        try:
            template = (path / "chat_template.jinja").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise TokenizerError(f"{path / 'chat_template.jinja'}: cannot read ({e})") from None
    return Tokenizer(
        backend=backend,
        eos_ids=tuple(dict.fromkeys(eos_ids)),
        bos_id=bos_id,
        pad_id=config.get("pad_token_id"),
        add_bos=bool(tcfg.get("add_bos_token", False)),
        chat_template=template,
        bos_token=bos_token,
        eos_token=eos_token,
    )


def tokenizer_sha256(tokenizer) -> str:
    """Hex SHA-256 of what decides the token ids of a text: the vocabulary (tokens by id,
    added/special tokens included), the BPE merges, the normalizer and the pre-tokenizer.

    This is the one definition: the corpus builder writes it into a corpus manifest (and
    :meth:`specjax.train.batches.Corpus.open` refuses a model whose tokenizer hashes
    differently), and head files record it (a head trained with another tokenizer is
    refused). Two tokenizers with the same hash encode every
    text to the same ids. The hash is of canonical JSON (sorted keys), not of the
    ``tokenizers`` library's serialization, so it survives a change of its formatting.

    Args:
      tokenizer: a :class:`specjax.tokenizer.Tokenizer` or a ``tokenizers.Tokenizer``.

    Raises:
      DataError: ``tokenizer`` is neither.
    """
    backend = getattr(tokenizer, "backend", tokenizer)
    try:
        full = json.loads(backend.to_str())
        vocab = backend.get_vocab(with_added_tokens=True)
    except AttributeError:
        raise DataError(f"tokenizer_sha256: {type(tokenizer).__name__} is not a tokenizer "
                        "(expected specjax.tokenizer.Tokenizer or tokenizers.Tokenizer)"
                        ) from None
    model = full.get("model") or {}
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    added = sorted((int(t["id"]), t["content"], bool(t.get("special")))
                   for t in full.get("added_tokens") or [])
    canon = {
        "vocab": [tok for tok, _ in sorted(vocab.items(), key=lambda kv: kv[1])],
        "merges": merges,
        "model_type": model.get("type"),
        "added_tokens": added,
        "normalizer": full.get("normalizer"),
        "pre_tokenizer": full.get("pre_tokenizer"),
    }
    blob = json.dumps(canon, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()
