"""No command prints NaN or infinity in its JSON for valid input: a strict parser reads every one."""

import json

import pytest
from typer.testing import CliRunner

from commodel.cli import app


def strict(text: str) -> object:
    def refuse(token: str) -> None:
        raise AssertionError(f"{token} in JSON output")

    return json.loads(text, parse_constant=refuse)


COMMANDS = [
    ["train", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--json"],
    ["train", "--model", "deepseek-v3", "--system", "gb200-nvl72", "--gpus", "256", "--pp", "4", "--ep", "64",
     "--global-batch", "4096", "--seq", "4096", "--recompute", "auto", "--failures", "llama3-h100", "--json"],
    ["train", "--model", "llama3-8b", "--system", "dgx-h100:1,mi300x-8:1", "--pp", "2", "--uncertainty", "--json"],
    ["serve", "--model", "qwen3-30b-a3b", "--system", "gb200-nvl72", "--dtype", "fp4", "--json"],
    ["serve", "--model", "llama3-70b", "--system", "dgx-h100", "--gpus", "8", "--tp", "2", "--prefill-gpus", "2",
     "--json"],
    ["serve", "--model", "llama3-70b", "--system", "dgx-h100", "--json"],  # does not fit: still numbers
    ["collective", "alltoall", "--system", "mi300x-8", "--nodes", "2", "--size", "8:1GiB", "--json"],
    ["collective", "allreduce", "--system", "gb200-nvl72", "--nodes", "18", "--size", "8:8GiB", "--uncertainty",
     "--json"],
    ["collective", "allgather", "--library", "all", "--size", "8,1MiB", "--json"],
    ["comm", "schemes", "--system", "frontier-node", "--json"],
    ["comm", "schemes", "--system", "dgx-h100", "--scope", "node", "--json"],
    ["compare", "--common", "model=llama3-8b,gpus=8", "--a", "system=dgx-h100", "--b", "system=dgx-a100", "--json"],
    ["roofline", "gemm", "--m", "1", "--n", "1", "--k", "1", "--json"],
    ["hw", "show", "gb300-nvl72", "--json"],
    ["study", "run", "gin", "--json"],
    ["study", "run", "streamguard", "--json"],
    ["validate", "--json"],
]  # fmt: skip


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_json_is_strict(args):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output[-500:]
    strict(result.output)
