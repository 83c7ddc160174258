"""The one reader of a measurement row's own description of its run (its ``op`` text), for rows that
``data/runs.toml`` does not configure: a verb, named words in order, and sizes written ``KEYnumber``
(``tp8``, ``gbs128``, ``tokens128``) or ``N^3`` (a cube).

- ``train MODEL DTYPE [SIZES] [fsdp] [full] [NAME=VALUE...]``: a Megatron-Bridge performance-table recipe
  (or a run stated as one, with its software settings)
  (:func:`commodel.validate.adapters.recipe_run`);
- ``serve MODEL tpN [epN] [attention_dp] islN oslN DTYPE [batchN] [kv=DTYPE]``: a serving run (trtllm-bench's
  offline run where it gives no batch);
- ``deepep MODE OP MODEL tokensN``: one DeepEP dispatch or combine;
- ``gemm DTYPE N^3``, ``gemm DTYPE best shape``, ``large GEMM DTYPE``: a GEMM, or the best one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from commodel.errors import CommodelError

_SIZE = re.compile(r"([a-z]+)(\d+)")
_CUBE = re.compile(r"(\d+)\^3")


@dataclass(frozen=True)
class Grammar:
    """A description's form: its ``verb``, the ``words`` after it (named, in order), the ``sizes`` it
    may give (``required`` among them), the ``flags`` it may carry and the ``settings`` it may state
    as ``name=value`` (named as commodel's CLI options; the value as written, case kept)."""

    form: str
    verb: str
    words: tuple[str, ...]
    sizes: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    settings: tuple[str, ...] = ()

    def read(self, text: str) -> dict[str, str | int | bool]:
        """The named words, sizes, flags (``True`` where given) and settings of ``text``; anything
        else is an error quoting the text and its form."""
        stated = {}
        for token in [t for t in text.split() if "=" in t]:
            name, _, value = token.partition("=")
            if name not in self.settings:
                allowed = ", ".join(self.settings) or "none"
                raise CommodelError(f"cannot read the setting '{name}' in '{text}' (settings: {allowed})")
            stated[name] = value
        text = " ".join(t for t in text.split() if "=" not in t)
        found, words = read_sizes(text, self.sizes)
        flags = {word: True for word in words if word in self.flags}
        words = [word for word in words if word not in self.flags]
        if not words or words[0] != self.verb or len(words) < 1 + len(self.words):
            raise CommodelError(f"'{text}' is not '{self.form}'")
        extra = words[1 + len(self.words) :]
        if extra:
            raise CommodelError(f"cannot read '{extra[0]}' in '{text}' (sizes: {', '.join(self.sizes)})")
        missing = [name for name in self.required if name not in found]
        if missing:
            raise CommodelError(f"'{text}' gives no {', '.join(missing)} (form: '{self.form}')")
        return {**dict(zip(self.words, words[1:], strict=True)), **found, **flags, **stated}


def read_sizes(text: str, sizes: tuple[str, ...]) -> tuple[dict[str, int], list[str]]:
    """The sizes ``text`` gives (``KEYnumber`` for a key in ``sizes``; ``N^3`` as ``cube`` where
    ``sizes`` has it), and its other words in order, lowercased."""
    found: dict[str, int] = {}
    words = []
    for token in text.lower().split():
        size, cube = _SIZE.fullmatch(token), _CUBE.fullmatch(token)
        if size and size[1] in sizes:
            found[size[1]] = int(size[2])
        elif cube and "cube" in sizes:
            found["cube"] = int(cube[1])
        else:
            words.append(token)
    return found, words


#: Layout sizes a recipe may give (``tp2``, ``gbs128``, ...), the flags ``fsdp`` and ``full`` (full
#: recomputation), and the software settings a run states (``dispatcher=deepep``).
RECIPE = Grammar(
    "train MODEL DTYPE SIZES... [fsdp] [full] [NAME=VALUE...]", "train", ("model", "dtype"),
    ("seq", "gbs", "mbs", "tp", "pp", "cp", "vp", "ep", "etp", "dp", "ga"), flags=("fsdp", "full"),
    settings=("dispatcher", "cuda_graphs", "ep_overlap", "recompute_modules", "zero", "elementwise",
              "pipeline_layout", "ep_sms", "grad_reduce_in_fp32"),
)  # fmt: skip
#: A serving run: trtllm-bench's offline run unless it states its requests in flight (``batchN``);
#: ``epN`` and ``attention_dp`` for expert and attention data parallelism, ``kv=DTYPE``; a run of
#: one phase (``decode-only``, ``prefill-only``); a run of a dataset's lengths (``sharegpt``) states
#: their means as ``islN oslN``.
SERVING = Grammar(
    "serve MODEL tpN [epN] [attention_dp] islN oslN DTYPE [batchN] [kv=DTYPE]", "serve", ("model", "dtype"),
    ("tp", "ep", "isl", "osl", "batch", "tokens"),
    flags=("attention_dp", "decode-only", "prefill-only", "sharegpt"), settings=("kv",),
)  # fmt: skip
DISPATCH = Grammar(
    "deepep MODE dispatch|combine MODEL tokensN", "deepep", ("mode", "op", "model"), ("tokens",), ("tokens",)
)
