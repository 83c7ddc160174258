"""Bad input, systematically: every command, every option a user can get wrong, each wrong the ways
users get it wrong. Each must exit 2 with one ``error:`` line and no traceback."""

import pytest

from commodel.cli import main

TRAIN = ["train", "--model", "llama3-8b", "--system", "dgx-h100"]
SERVE = ["serve", "--model", "llama3-8b", "--system", "dgx-h100"]
COLLECTIVE = ["collective", "allreduce", "--size", "1MiB"]

COUNTS = ("-1", "0", "many", "1.5")
REALS = ("nan", "inf", "-inf", "lots")

CASES = (
    [[*TRAIN, option, value] for option in ("--tp", "--pp", "--cp", "--ep", "--vpp", "--gpus", "--nodes",
                                            "--global-batch", "--micro-batch", "--seq") for value in COUNTS]
    + [[*TRAIN, option, value] for option in ("--pue", "--carbon-g-per-kWh", "--price-per-gpu-hour",
                                              "--train-tokens") for value in REALS]
    + [[*TRAIN, option, value] for option, value in (
        ("--model", "llama9"), ("--system", "dgx-h1000"), ("--dtype", "fp7"), ("--overlap", "sometimes"),
        ("--tp-overlap", "t4"), ("--attention", "slow"), ("--recompute", "half"), ("--zero", "4"),
        ("--zero", "-1"), ("--fabric", "ib-qdr"), ("--transport", "pigeon"), ("--failures", "llama4"),
        ("--checkpoint", "never"), ("--mtbf-gpu-hours", "0"), ("--storage-GBps", "0"), ("--pue", "0.5"),
        ("--global-batch", "1e30"), ("--seq", "0"), ("--tp", "3"), ("--gpus", "7"),
        ("--system", "mi300x-8:1,"), ("--stage-layers", "1,2"), ("--checkpoint-interval-min", "-5"),
        ("--dispatcher", "deepepp"), ("--dispatcher", "deepep"), ("--dtype", "fp8-blocks"),
        ("--recompute-modules", "mlp,moe"), ("--recompute-modules", "shared_experts"), ("--ep-sms", "0"),
    )]
    + [[*SERVE, option, value] for option in ("--prompt", "--output", "--tp", "--pp", "--gpus",
                                              "--max-batch-size", "--max-num-tokens") for value in COUNTS]
    + [[*SERVE, option, value] for option, value in (
        ("--dtype", "fp4"), ("--kv-dtype", "fp2"), ("--batch", "0"), ("--batch", "-3"), ("--kv-fraction", "0"),
        ("--kv-fraction", "1.5"), ("--slo-ttft", "0"), ("--slo-tpot", "-1"), ("--slo-tpot", "nan"),
        ("--prompt-cv", "-1"), ("--output-cv", "11"), ("--price-per-gpu-hour", "inf"), ("--ep", "2"),
    )]
    + [[*SERVE, "--gpus", "2", "--prefill-gpus", "1", "--kernels"]]  # the kernel table is colocated serving's
    + [[*COLLECTIVE, option, value] for option in ("--nodes", "--gpus", "--channels", "--gpus-per-process")
       for value in ("-1", "0", "x")]
    + [[*COLLECTIVE, option, value] for option, value in (
        ("--size", "0"), ("--size", "-5"), ("--size", "abc"), ("--size", "1e99"), ("--size", "8GiB:8B"),
        ("--size", ""), ("--system", "dgx-h1000"), ("--algo", "rign"), ("--protocol", "ll256"),
        ("--library", "mpich"), ("--launch", "pigeon"), ("--partition", "5"),
    )]
    + [["collective", "allreduse"], ["collective", "alltoall", "--algo", "nvls"]]
    + [["roofline", "gemm", option, value] for option in ("--m", "--n", "--k") for value in ("0", "-8", "x")]
    + [["roofline", "gemm", "--gpu", "h100"], ["roofline", "gemm", "--dtype", "fp3"],
       ["roofline", "plot", "--gpu", "a100"], ["roofline", "plot", "-o", "/nonexistent/dir/plot.png"]]
    + [["hw", "show", "h100"], ["hw", "show", ""], ["hw", "list", "--kind", "switch"]]
    + [["study", "run", "overlab"], ["study", "run", ""]]
    + [["sweep", "/nonexistent/spec.toml"], ["sweep", "--executor", "mpi"], ["sweep", "--max-points", "0"]]
    + [["comm", "schemes", "--system", "dgx-h1000"], ["comm", "schemes", "--size", "0"],
       ["comm", "schemes", "--scope", "rack"], ["comm", "schemes", "--system", "frontier-node", "--scheme", "proxy2"]]
    + [["compare", "--a", "model=llama3-8b,system=dgx-h100", "--b", "model=llama3-8b,system=dgx-h100,tp=3"],
       ["compare", "--a", "", "--b", "x=1"], ["compare", "--a", "/nonexistent.toml", "--b", "x=1"]]
    + [["sensitivity", "/nonexistent.toml"], ["calibrate", "nccl-tests", "/nonexistent.log", "--system", "dgx-h100"]]
    + [["validate", "--parameter-draws", "-1"], ["validate", "--parameter-draws", "1"]]
    + [["train", "--model", "/nonexistent.json", "--system", "dgx-h100"], ["model", "show", "lama3-8b"],
       ["model", "show", "/nonexistent.toml"], ["model", "show", "/dev/null"], ["serve", "--model", "/tmp", "--system", "dgx-h100"],
       ["model", "show", "llama3-8b", "--seq", "0"]]
    + [["train", "--model", "llama3-8b", "--system", "dgx-h100", "--micro-batch", v] for v in ("x", "0", "1.5", "-2", "maxx")]
    + [["compare", "--a", "tp=8,tp=4", "--b", "tp=2"], ["compare", "--a", "tp=8", "--b", "pp=2,pp=2"]]
)  # fmt: skip


def test_there_are_more_than_150_cases():
    assert len(CASES) >= 150


@pytest.mark.parametrize("args", CASES, ids=lambda a: " ".join(a)[:80])
def test_bad_input_is_one_line_exit_2_no_traceback(args, capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["commodel", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    captured = capsys.readouterr()
    assert exit_info.value.code == 2, (args, captured.out[-300:], captured.err[-300:])
    assert "Traceback" not in captured.err + captured.out
    assert captured.err.startswith("error") and captured.err.count("\n") == 1, captured.err
