"""Read serving benchmark outputs: trtllm-bench's throughput report, ``vllm bench serve``, and SGLang's
``bench_serving`` and ``bench_one_batch_server``. Each gives the run's configuration and its output
throughput (tokens/s over all its GPUs).

- **trtllm-bench** prints ``Key:  value`` lines in its sections (``Model:``, ``TP Size:``, ``EP Size:``,
  ``Max Runtime Batch Size:``, ``Max Runtime Tokens:``, ``KV Memory Percentage:``, ``KV Cache Dtype:``,
  ``Quantization:``, ``Total Output Throughput (tokens/sec):``, ``Average Input Length (tokens):``,
  ``Average Output Length (tokens):``): an offline run, every request queued, as many in flight as
  fit (``batch = max``, limited by the runtime batch size and tokens).
- **vLLM** ``bench serve`` and **SGLang** ``bench_serving`` print their client arguments (the
  ``Namespace``: ``model``, ``random_input_len``, ``random_output_len``, ``max_concurrency``) and a
  ``Serving Benchmark Result`` block with ``Output token throughput (tok/s):``: requests in flight are
  the concurrency. The server's parallelism is not in the client's output: give ``--tp`` (and
  ``--ep``, ``--attention-dp``).
- **SGLang** ``bench_one_batch_server`` prints ``batch size:``, ``input_len:``, ``output_len:`` and
  ``output throughput: X tok/s`` of one batch run to its end: the batch in flight throughout. The
  model and the server's parallelism are not in its output: give ``--model`` and ``--tp``.

A client run is read at its mean lengths, the result block's ``Total input tokens`` and ``Total
generated tokens`` over its ``Successful requests`` (as ``commodel validate`` prices a ShareGPT row;
a random dataset's stated lengths where the block lacks them): the serving job takes fixed lengths,
and the log does not give their spread. A run some of whose requests failed is refused.

A report must agree with itself: a rate its own totals contradict (a client's generated tokens over
its duration, trtllm-bench's request throughput times its output length), a line printed twice with
two values, or a run that completed nothing is refused as an edited or mixed log.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path
from typing import Any

from commodel.calibrate.measured import MeasuredRun, about, fail, model_of, named_model, reported, setting
from commodel.pricing.serving_job import serving_job
from commodel.units import readable_number

_KEY = re.compile(r"^\s*([A-Za-z][\w .()/%-]*?)\s*:\s+(\S.*?)\s*$", re.MULTILINE)
_NAMESPACE = re.compile(r"Namespace\((.*)\)\s*$", re.MULTILINE)
_ONE_BATCH = re.compile(r"^output throughput:\s*(\S+)\s*tok", re.MULTILINE)

#: trtllm-bench quantization names -> commodel's serving precision.
QUANTIZATION = {"none": "bf16", "fp8": "fp8", "fp8_block_scales": "fp8", "nvfp4": "fp4", "w4a16_mxfp4": "fp4"}

#: Log formats (:func:`detect`) and what marks them.
FORMATS = ("trtllm-bench", "vllm-serve", "sglang-serving", "sglang-one-batch")


class Report(dict[str, str]):
    """A report's ``Key: value`` lines, keys lower-cased, each with its first value; ``twice``: the
    keys it prints again with another value (two runs' reports in one log)."""

    twice: dict[str, tuple[str, str]]


def keys(text: str) -> Report:
    """The ``Key: value`` lines of ``text`` (:class:`Report`)."""
    found = Report()
    found.twice = {}
    for match in _KEY.finditer(text):
        key, value = match[1].strip().lower(), match[2]
        first = found.setdefault(key, value)
        if first != value:
            found.twice.setdefault(key, (first, value))
    return found


def namespace(path: Path, text: str) -> dict[str, Any]:
    """The arguments an argparse ``Namespace(...)`` line prints (a value that is no literal, such as
    ``inf``, as its text), or an error."""
    match = _NAMESPACE.search(text)
    if match is None:
        raise fail(path, "no 'Namespace(...)' line with the benchmark's arguments")
    try:
        call = ast.parse(f"f({match[1]})", mode="eval").body
    except SyntaxError:
        raise fail(path, "the 'Namespace(...)' line is not whole: a truncated log") from None
    return {k.arg: _literal(k.value) for k in getattr(call, "keywords", []) if k.arg}


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)


def detect(text: str) -> str | None:
    """Which serving benchmark printed ``text`` (:data:`FORMATS`), or ``None``."""
    if "PERFORMANCE OVERVIEW" in text or "Total Output Throughput (tokens/sec)" in text:
        return "trtllm-bench"
    if "Serving Benchmark Result" in text:
        return "sglang-serving" if re.search(r"Backend:\s*sglang|backend='sglang", text) else "vllm-serve"
    if _ONE_BATCH.search(text):
        return "sglang-one-batch"
    return None


def _number(path: Path, found: Report, *names: str) -> float:
    """The first of ``names``' values: a report's lengths, sizes, shares and rates, never negative
    and never infinite, printed once (or always alike), or one error naming the line."""
    for name in names:
        if name in found.twice:
            first, second = found.twice[name]
            raise fail(path, f"'{name}' reads {first} and then {second}: one run's report per log")
        if name in found:
            text = found[name].rstrip("%").replace(",", "")
            try:
                number = float(text)
            except ValueError:
                raise fail(path, f"'{name}: {found[name]}' is not a number") from None
            if not (math.isfinite(number) and number >= 0):
                raise fail(path, f"'{name}: {found[name]}' is not a non-negative number")
            return number
    raise fail(path, f"no '{names[0]}' line: a truncated or different report")


def _size(path: Path, found: Report, name: str) -> int:
    """A report's count (GPUs of a parallel group, requests, tokens): a whole number of at least 1,
    or one error naming the line."""
    number = _number(path, found, name)
    if number < 1 or number != int(number):
        raise fail(path, f"'{name}: {found[name]}' is not a whole number of at least 1")
    return int(number)


#: How far a report's rate may sit from the one its own totals give: their printed rounding.
AGREEMENT = 0.02


def _agrees(path: Path, rate: float, name: str, derived: float, how: str) -> float:
    """``rate`` (the report's ``name``) where it is the ``derived`` rate the report's own totals give
    (``how``) within :data:`AGREEMENT`; else an error: an edited log, or two runs' lines in one."""
    if not math.isclose(rate, derived, rel_tol=AGREEMENT):
        raise fail(
            path,
            f"its '{name}' {readable_number(rate)} is not the {readable_number(derived)} {how} give: an edited or mixed log",
        )
    return rate


#: trtllm-bench's engine limits -> the serving job's, with the factor on the printed number.
TRTLLM_LIMITS = {
    "max runtime batch size": ("max_batch_size", 1.0),
    "max runtime tokens": ("max_num_tokens", 1.0),
    "kv memory percentage": ("kv_fraction", 0.01),
}


def _trtllm(path: Path, text: str) -> tuple[dict[str, Any], float]:
    found = keys(text)
    quant = found.get("quantization", "None").lower()
    if quant not in QUANTIZATION:
        raise fail(path, f"Quantization: {found['quantization']}: commodel prices {', '.join(QUANTIZATION)}")
    settings: dict[str, Any] = {
        "model": found.get("model", ""), "tp": _size(path, found, "tp size"),
        "prompt": round(_number(path, found, "average input length (tokens)")),
        "output": round(_number(path, found, "average output length (tokens)")),
        "dtype": QUANTIZATION[quant], "batch": "max",
        "kv_dtype": "fp8" if "fp8" in found.get("kv cache dtype", "").lower() else "auto",
    }  # fmt: skip
    for size in ("ep", "pp"):
        if f"{size} size" in found:
            settings[size] = _size(path, found, f"{size} size")
    for key, (name, factor) in TRTLLM_LIMITS.items():
        if key in found:
            settings[name] = _size(path, found, key) if factor == 1 else _number(path, found, key) * factor
    rate = _number(path, found, "total output throughput (tokens/sec)")
    if "request throughput (req/sec)" in found:
        output = _number(path, found, "average output length (tokens)")  # as printed, not rounded
        per_request = _number(path, found, "request throughput (req/sec)") * output
        rate = _agrees(path, rate, "total output throughput (tokens/sec)", per_request,
                       "its request throughput and average output length")  # fmt: skip
    if "per gpu output throughput (tps/gpu)" in found:
        gpus = settings["tp"] * settings.get("pp", 1)
        per_gpu = _number(path, found, "per gpu output throughput (tps/gpu)") * gpus
        rate = _agrees(path, rate, "total output throughput (tokens/sec)", per_gpu,
                       f"its per-GPU output throughput on tp x pp = {gpus} GPUs")  # fmt: skip
    return settings, rate


def _one_batch(path: Path, text: str) -> tuple[dict[str, Any], float]:
    found = keys(text)
    settings = {
        "prompt": _size(path, found, "input_len"), "output": _size(path, found, "output_len"),
        "batch": str(_size(path, found, "batch size")), "model": "",
    }  # fmt: skip
    return settings, reported(path, _ONE_BATCH.findall(text)[-1], "last 'output throughput' (tok/s)")


def _client(path: Path, text: str) -> tuple[dict[str, Any], float]:
    args, found = namespace(path, text), keys(text)
    if args.get("max_concurrency") is None:
        raise fail(path, "no max_concurrency: requests arrived at a rate, not a fixed number in flight")
    rate = _client_rate(path, found)
    prompt, output = _client_lengths(path, args, found)
    settings = {"model": str(args.get("model", "")), "prompt": prompt, "output": output,
                "batch": str(setting(path, args, "max_concurrency"))}  # fmt: skip
    return settings, rate


#: The result lines a client's mean lengths are read from.
_TOTALS = ("successful requests", "total input tokens", "total generated tokens")


def _client_lengths(path: Path, args: dict[str, Any], found: Report) -> tuple[int, int]:
    """Mean prompt and output tokens of a client's requests: its totals over its successful requests
    (a dataset's lengths; random ones spread by ``random_range_ratio`` or cut short where the run did
    not ignore end-of-sequence tokens), every one of the ``num_prompts`` it sent having succeeded;
    without the totals, the random dataset's stated lengths."""
    if args.get("dataset_name", "random") == "random" and not all(name in found for name in _TOTALS):
        return setting(path, args, "random_input_len"), setting(path, args, "random_output_len")
    requests = _number(path, found, "successful requests")
    sent = args.get("num_prompts")
    if isinstance(sent, int) and requests < sent:
        raise fail(
            path, f"{requests:g} of its {sent} requests succeeded: the failed ones left the load it states"
        )
    prompt, output = (
        _number(path, found, f"total {kind} tokens") / requests for kind in ("input", "generated")
    )
    if round(output) < 1:
        raise fail(path, f"its requests generated {output * requests:g} tokens: no output to time")
    return round(prompt), round(output)


def _client_rate(path: Path, found: Report) -> float:
    """A client's output token throughput, where its run completed requests and, if it prints them,
    its generated tokens over its duration give that rate."""
    name = "output token throughput (tok/s)"
    rate = _number(path, found, name)
    if "successful requests" in found and _number(path, found, "successful requests") < 1:
        raise fail(path, "0 successful requests: the run completed none, so it measured no rate or length")
    if "total generated tokens" in found and "benchmark duration (s)" in found:
        seconds = _number(path, found, "benchmark duration (s)")
        if seconds <= 0:
            raise fail(path, f"'benchmark duration (s): {found['benchmark duration (s)']}': a run takes time")
        made = _number(path, found, "total generated tokens")
        rate = _agrees(
            path, rate, name, made / seconds, f"its {made:,.0f} generated tokens over {seconds:g} s"
        )
    return rate


_READERS = {
    "trtllm-bench": _trtllm,
    "vllm-serve": _client,
    "sglang-serving": _client,
    "sglang-one-batch": _one_batch,
}


def parse_serving(
    path: Path, text: str, system: str, model: str | None = None, server: dict[str, Any] | None = None
) -> MeasuredRun:
    """The run a serving benchmark's output records, on ``system``; ``server``: the server settings
    given on the command line (``tp``, ``ep``, ``attention_dp``), which fill what the log cannot say
    and must agree with what it does."""
    kind = detect(text)
    if kind is None:
        raise fail(path, f"not a serving benchmark's output ({', '.join(FORMATS)})")
    settings, measured = _READERS[kind](path, text)
    for name, value in (server or {}).items():
        if name in settings and settings[name] != value:
            raise fail(
                path,
                f"the run had {name} {settings[name]}; --{name.replace('_', '-')} {value} says otherwise",
            )
        settings[name] = value
    name = model_of(model, lambda: named_model(path, settings["model"]))
    ranks = max(settings.get("tp", 1), settings.get("ep", 1)) * settings.get("pp", 1)
    with about(path):
        job = serving_job(system=system, gpus=ranks, **(settings | {"model": name}))
    return MeasuredRun(path, job, "output_tokens_per_s", measured, f"{kind}'s output throughput")
