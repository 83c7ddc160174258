"""Bad input, systematically: every command, every option a user can get wrong, each wrong the ways
users get it wrong. Each must exit 2 with one ``error:`` line and no traceback."""

import pytest

from commodel.cli import main
from commodel.hardware.loader import OVERLAY_ENV

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
        ("--dispatcher", "deepepp"), ("--dispatcher", "deepep"), ("--dispatcher", "hybrid"), ("--dtype", "fp8-blocks"),
        ("--recompute-modules", "mlp,moe"), ("--recompute-modules", "shared_experts"), ("--ep-sms", "0"),
        ("--power-limit", "900"), ("--power-limit", "100"), ("--power-limit", "0"), ("--power-limit", "lots"),
        ("--cuda-graphs", "attnn"), ("--cuda-graphs", "attn,,mlp;"), ("--capacity-factor", "1"),
        ("--recompute-layers", "-1"), ("--recompute-layers", "x"), ("--recompute-layers", "2000"),
        ("--storage-share", "0"), ("--storage-share", "1.5"), ("--storage-node-GBps", "0"), ("--failures", "bloom"),
        ("--elementwise", "eagr"), ("--elementwise", ""), ("--reshard-after-forward", "yes"),
    )]
    + [[*SERVE, option, value] for option in ("--prompt", "--output", "--tp", "--pp", "--gpus",
                                              "--max-batch-size", "--max-num-tokens") for value in COUNTS]
    + [[*SERVE, option, value] for option, value in (
        ("--dtype", "int4"), ("--kv-dtype", "fp2"), ("--batch", "0"), ("--batch", "-3"), ("--kv-fraction", "0"),
        ("--kv-fraction", "1.5"), ("--slo-ttft", "0"), ("--slo-tpot", "-1"), ("--slo-tpot", "nan"),
        ("--prompt-cv", "-1"), ("--output-cv", "11"), ("--price-per-gpu-hour", "inf"), ("--ep", "2"), ("--kv-reserve", "half"),
        ("--host-schedule", "async"),
    )]
    + [[*SERVE, "--gpus", "2", "--prefill-gpus", "1", "--kernels"]]
    + [[*SERVE, "--prompt", "30000", "--output", "128", "--batch", "512"],  # the tokens per iteration keep fewer
       [*SERVE, "--phase", "prefill", "--prompt", "4096", "--output", "1", "--batch", "8", "--max-num-tokens", "16384"]]
    + [["train", "--model", "qwen3-30b-a3b", "--system", "gb200-nvl72", "--gpus", "8", "--ep", "8", "--cuda-graphs", g]
       for g in ("attn,moe", "full_iteration")]  # dropless experts have dynamic shapes
    + [[*TRAIN, "--recompute", "selective", "--recompute-layers", "2"]]
    + [[*SERVE, "--tp", "8", "--attention-dp"],
       ["serve", "--model", "deepseek-v3", "--system", "hgx-h200", "--tp", "8", "--ep", "4", "--attention-dp"]]  # the kernel table is colocated serving's
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
    + [["comm", "dispatch", option, value] for option, value in (
        ("--tokens", "0"), ("--tokens", "1.5"), ("--tokens", "many"), ("--tokens", "4096:128"), ("--tokens", ""),
        ("--ep", "0"), ("--ep", "1"), ("--ep", "12"), ("--ep", "7"), ("--ep", "512"), ("--ep", "x"), ("--mode", "fast"), ("--scheme", "pigeon"),
        ("--model", "llama3-8b"), ("--model", "deepseek-v4"), ("--system", "dgx-h1000"),
    )]
    + [["comm", "dispatch", "--system", "frontier-node", "--model", "qwen3-30b-a3b", "--ep", "16"],  # no IBGDA on Slingshot
       ["comm", "dispatch", "--ep", "1", "--mode", "high-throughput"]]  # no peer: no time, no bandwidth
    + [["train", "--system", "mi325x-8:1,hgx-h200:1", "--pp", "2", "--recompute", "full", "--transport", "gloo",
        "--zero", "3"]]  # Gloo for all prices ZeRO 0-2's reduction only
    + [["compare", "--a", "model=llama3-8b,system=dgx-h100", "--b", "model=llama3-8b,system=dgx-h100,tp=3"],
       ["compare", "--a", "", "--b", "x=1"], ["compare", "--a", "/nonexistent.toml", "--b", "x=1"]]
    + [["sensitivity", "/nonexistent.toml"], ["calibrate", "nccl-tests", "/nonexistent.log", "--system", "dgx-h100"]]
    + [["validate", "--parameter-draws", "-1"], ["validate", "--parameter-draws", "1"]]
    + [["train", "--model", "/nonexistent.json", "--system", "dgx-h100"], ["model", "show", "lama3-8b"],
       ["model", "show", "/nonexistent.toml"], ["model", "show", "/dev/null"], ["serve", "--model", "/tmp", "--system", "dgx-h100"],
       ["model", "show", "llama3-8b", "--seq", "0"]]
    + [["train", "--model", "llama3-8b", "--system", "dgx-h100", "--micro-batch", v] for v in ("x", "0", "1.5", "-2", "maxx")]
    + [["compare", "--a", "tp=8,tp=4", "--b", "tp=2"], ["compare", "--a", "tp=8", "--b", "pp=2,pp=2"]]
    + [[*TRAIN, option, value] for option in ("--mtbf-gpu-hours", "--storage-GBps", "--restart-min", "--repair-hours",
                                              "--checkpoint-interval-min", "--expert-load", "--oversubscription", "--capacity-factor")
       for value in REALS]
    + [[*TRAIN, "--pod-gpus", value] for value in COUNTS]
    + [[*SERVE, option, value] for option in ("--slo-ttft", "--slo-tpot", "--kv-fraction", "--prompt-cv",
                                              "--output-cv", "--pue", "--price-per-gpu-hour") for value in REALS]
    + [[*COLLECTIVE, "--pod-gpus", value] for value in COUNTS]
    + [[*COLLECTIVE, "--system", "gb200-nvl72", "--trays-per-rack", value] for value in (*COUNTS, "19")]
    + [[*COLLECTIVE, "--system", "dgx-h100", "--trays-per-rack", "4"]]
    + [[*COLLECTIVE, "--oversubscription", value] for value in REALS]
    + [["collective", "allreduce", "--system", "dgx-h100", "--nodes", "99999999999", "--size", "1MiB"],
       ["collective", "allreduce", "--system", "dgx-h100", "--partition", "4", "--size", "1MiB"],
       # one GPU is not a collective (NCCL's one-rank path is a local copy): refused, not priced at 0 s
       ["collective", "allreduce", "--system", "gh200-ib", "--size", "1MiB"],
       ["collective", "allgather", "--system", "dgx-h100", "--gpus", "1", "--size", "1MiB"],
       ["overlap", "--system", "dgx-h100", "--gpus", "1"],
       ["comm", "schemes", "--system", "gh200-ib", "--scope", "node"],  # no second GPU in the node
       # a decode pool makes the tokens after the first: one output token leaves it none
       ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--output", "1", "--phase", "decode"],
       ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--prefill-gpus", "4", "--output", "1"],
       ["collective", "allreduce", "--system", "dgx-h100", "--gpus-per-process", "3", "--size", "1MiB"],
       ["collective", "allreduce", "--system", "dgx-h100", "--size", "1GiB,,2GiB"],
       ["collective", "alltoall", "--system", "dgx-h100", "--nodes", "4", "--pod-gpus", "12"],
       ["collective", "alltoall", "--system", "dgx-h100", "--nodes", "4", "--oversubscription", "0.5"],
       [*TRAIN, "--failures", "llama3-h100", "--mtbf-gpu-hours", "1000"], [*TRAIN, "--pue", "1e308"],
       [*TRAIN, "--gpus", "8", "--nodes", "3"], [*TRAIN, "--offload", "weight"], [*TRAIN, "--gpus", "1e9"],
       ["train", "--model", "llama3-8b", "--system", "a40-pcie-8", "--offload", "optimizer"],
       ["sensitivity", "studies/default/study.toml", "--samples", "1000000"],
       ["validate", "--parameter-draws", "100000000"], ["validate", "--json", "--markdown"],
       ["sweep", "--executor", "dask", "--scheduler", "notanaddress"],
       ["calibrate", "nccl-tests", "/dev/zero", "--system", "dgx-h100", "-o", "/tmp/x.toml"],
       ["--hardware", "/dev/zero", "hw", "list"]]
    # No answer that cannot be true: a batch above the engine's limits, no micro-batch that fits,
    # GEMM operands larger than the GPU
    + [[*SERVE, "--batch", "4096"], [*SERVE, "--batch", "100", "--max-batch-size", "10"],
       [*SERVE, "--batch", "100", "--max-num-tokens", "64"],
       ["train", "--model", "llama3-70b", "--system", "dgx-h100", "--gpus", "64", "--tp", "8", "--pp", "2",
        "--global-batch", "256", "--seq", "8192", "--micro-batch", "max"],
       [*TRAIN, "--gpus", "8", "--global-batch", "1099511627776", "--micro-batch", "max"],
       ["roofline", "gemm", "--gpu", "h100-sxm", "--m", "1000000", "--n", "1000000", "--k", "1000000"]]
)  # fmt: skip


def test_there_are_at_least_300_cases():
    assert len(CASES) + len(FILE_CASES) >= 300


#: Files a user may hand over by mistake, by name: (content, or a kind of non-regular file).
BAD_FILES = {
    "binary.toml": b"\xff\xfe\x00binary",
    "not-utf8.toml": b"name = '\xe9t\xe9'\n",
    "derived-self.toml": "[study]\nname='x'\nevaluate='training'\n[fixed]\nmodel='llama3-8b'\nsystem='dgx-h100'\n"
    "[variables]\ntp={choice=[1,2]}\n[derived]\npue='pue*2'\n[objectives]\nstep_time_s='min'\n",
    "derived-cycle.toml": "[study]\nname='x'\nevaluate='training'\n[fixed]\nmodel='llama3-8b'\nsystem='dgx-h100'\n"
    "[variables]\ntp={choice=[1,2]}\n[derived]\npue='price_per_gpu_hour'\nprice_per_gpu_hour='pue'\n"
    "[objectives]\nstep_time_s='min'\n",
    "objective-on-words.toml": "[study]\nname='x'\nevaluate='training'\n[fixed]\nmodel='llama3-8b'\n"
    "[variables]\nsystem={choice=['dgx-h100']}\n[objectives]\nsystem='min'\n",
    "constraint-on-words.toml": "[study]\nname='x'\nevaluate='training'\nconstraints=['system <= 3']\n[fixed]\n"
    "model='llama3-8b'\nsystem='dgx-h100'\n[variables]\ntp={choice=[1,2]}\n[objectives]\nstep_time_s='min'\n",
    "infinite-range.toml": "[study]\nname='x'\nevaluate='training'\n[fixed]\nmodel='llama3-8b'\nsystem='dgx-h100'\n"
    "[variables]\npue={real=[1.0, inf]}\n[objectives]\nstep_time_s='min'\n",
    "escaping-name.toml": "[study]\nname='../up'\nevaluate='training'\n[fixed]\nmodel='llama3-8b'\nsystem='dgx-h100'\n"
    "[variables]\ntp={choice=[1,2]}\n[objectives]\nstep_time_s='min'\n",
    "infinite-count.toml": "[systems.dgx-h100]\ngpus_per_node = { value = inf, source = 'x' }\n",
    "idle-above-tdp.toml": "[gpus.h100-sxm]\nidle_power = { value = '900 W', source = 'x' }\n",
    # an HBM whose latency the ceiling lets grow without bound, a wire byte that crosses HBM 100 times
    "ceiling-one.toml": "[gpus.h100-sxm.memory_contention]\n"
    "load_ceiling = { value = 1.0, range = [0.5, 1.0], source = 'x' }\n",
    "wire-bytes.toml": "[gpus.h100-sxm.memory_contention]\n"
    "hbm_per_wire_byte = { value = 100, range = [1, 100], source = 'x' }\n",
    "nan-constraint.toml": "[study]\nname='x'\nevaluate='training'\nconstraints=['mfu >= nan']\n[fixed]\n"
    "model='llama3-8b'\nsystem='dgx-h100'\n[variables]\ntp={choice=[1,2]}\n[objectives]\nstep_time_s='min'\n",
    "all-invalid.toml": "[study]\nname='x'\nevaluate='training'\n[fixed]\nmodel='llama3-8b'\nsystem='dgx-h100'\n"
    "[variables]\ntp={choice=[3,5]}\n[objectives]\nstep_time_s='min'\n",
    "negative-suspend.toml": "[study]\nname='x'\nevaluate='scheduling'\n[fixed]\nload=0.8\nmethod='simulation'\n"
    "suspend_after_min=-5.0\n[variables]\npolicy={choice=['tres']}\n[objectives]\nmean_start_min='min'\n",
    "stream-arm.toml": "[study]\nname='x'\nevaluate='stream'\n[variables]\narm={choice=['flink']}\n"
    "[objectives]\nimpact_pct='min'\n",
    "folder.toml": "folder",
    "unread-parameter.toml": "[study]\nname='x'\nevaluate='training'\n[parameters]\nnested={a=1}\n[fixed]\n"
    "model='llama3-8b'\nsystem='dgx-h100'\n[variables]\ntp={choice=[1,2]}\n[objectives]\nstep_time_s='min'\n",
    "fifo.toml": "fifo",
    "empty-hardware-folder": "folder",
}


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    import os

    root = tmp_path_factory.mktemp("bad")
    for name, content in BAD_FILES.items():
        path = root / name
        if content == "folder":
            path.mkdir()
        elif content == "fifo":
            os.mkfifo(path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    (root / "a-file").write_text("x")
    from test_calibrate import write_log  # a valid log, to try calibrate's options on

    from commodel.comm.calls import run
    from commodel.hardware import cluster

    write_log(root / "good.log", run("allreduce", cluster("dgx-h100"), [2**k for k in range(10, 30, 4)], 8))
    write_log(root / "one-size.log", run("allreduce", cluster("dgx-h100"), [2**20], 8))
    one_rank = run("allreduce", cluster("dgx-h100"), [2**k for k in range(10, 30, 4)], 8).assign(
        busbw_GBps=0.0
    )
    write_log(root / "one-rank.log", one_rank, ranks=1)  # a GPU alone: no collective to fit
    return root


FILE_CASES = [
    ["sweep", "{binary.toml}", "-o", "{out}"], ["sweep", "{not-utf8.toml}", "-o", "{out}"],
    ["sweep", "{folder.toml}", "-o", "{out}"], ["sweep", "{fifo.toml}", "-o", "{out}"],
    ["sweep", "{derived-self.toml}", "-o", "{out}"], ["sweep", "{derived-cycle.toml}", "-o", "{out}"],
    ["sweep", "{objective-on-words.toml}", "-o", "{out}"], ["sweep", "{constraint-on-words.toml}", "-o", "{out}"],
    ["sweep", "{infinite-range.toml}", "-o", "{out}"], ["sweep", "{escaping-name.toml}", "-o", "{out}"],
    ["sweep", "studies/fabric-tiers/study.toml", "-o", "{a-file}"],
    ["sweep", "{negative-suspend.toml}", "-o", "{out}"], ["sweep", "{stream-arm.toml}", "-o", "{out}"],
    ["--hardware", "{binary.toml}", "hw", "list"], ["--hardware", "{infinite-count.toml}", "hw", "list"],
    ["--hardware", "{empty-hardware-folder}", "hw", "list"], ["--hardware", "{fifo.toml}", "hw", "list"],
    ["compare", "--a", "{binary.toml}", "--b", "tp=2", "--common", "model=llama3-8b,system=dgx-h100"],
    ["sensitivity", "studies/default/study.toml", "--samples", "8", "-o", "{a-file}"],
    ["calibrate", "nccl-tests", "{fifo.toml}", "--system", "dgx-h100", "-o", "{out}/c.toml"],
    ["calibrate", "nccl-tests", "{one-rank.log}", "--system", "dgx-h100", "-o", "{out}/c.toml"],
    ["train", "--model", "{binary.toml}", "--system", "dgx-h100"],
    ["--hardware", "{idle-above-tdp.toml}", "hw", "list"], ["sweep", "{nan-constraint.toml}", "-o", "{out}"],
    ["--hardware", "{ceiling-one.toml}", "overlap"], ["--hardware", "{wire-bytes.toml}", "overlap"],
    ["roofline", "gemm", "--m", "100000000000000000000"], ["sweep", "{all-invalid.toml}", "-o", "{out}"],
    ["sweep", "{unread-parameter.toml}", "-o", "{out}"], ["sensitivity", "{unread-parameter.toml}"],
    # calibrate's options and output, checked before the fit
    *[["calibrate", "nccl-tests", "{good.log}", "--system", "dgx-h100", "-o", "{out}/c.toml", *extra]
      for extra in (["--gpus", "0"], ["--nodes", "0"], ["--gpus-per-process", "0"], ["--gpus", "-8"])],
    *[["calibrate", "nccl-tests", "{good.log}", "--system", "dgx-h100", "-o", out]
      for out in ("{empty-hardware-folder}", "{a-file}/x.toml", "", "{out}/", "{fifo.toml}")],
    # one run given twice would weigh twice in the fit and predict itself under --check
    ["calibrate", "nccl-tests", "{good.log}", "{good.log}", "--system", "dgx-h100", "-o", "{out}/c.toml"],
    *[["calibrate", kind, "tests/data/logs/" + log, "./tests/data/logs/" + log, "--system", system, "-o",
       "{out}/c.toml", "--check"]
      for kind, log, system in (("train", "torchtitan-llama3-8b-eager.log", "grand-teton-h100"),
                                ("serve", "trtllm-bench-qwen3-30b-gb200-128-2048.log", "gb200-nvl72"))],
]  # fmt: skip


@pytest.mark.parametrize("args", FILE_CASES, ids=lambda a: " ".join(a)[:80])
def test_bad_files_are_one_line_exit_2_no_traceback(args, bad_files, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(OVERLAY_ENV, "")  # --hardware sets it: restore it after the test
    names = {
        name: str(bad_files / name)
        for name in [*BAD_FILES, "a-file", "good.log", "one-size.log", "one-rank.log"]
    }
    names |= {"out": str(tmp_path / "out")}

    def filled(arg: str) -> str:
        for name, path in names.items():
            arg = arg.replace("{" + name + "}", path)
        return arg

    assert_one_line_exit_2([*map(filled, args)], capsys, monkeypatch)


def test_a_fifo_as_the_output_is_refused_and_left_intact(tmp_path):
    """No write ever replaces a file that is not a regular file."""
    import os
    import stat

    from commodel.errors import CommodelError
    from commodel.io import write_text

    fifo = tmp_path / "out.toml"
    os.mkfifo(fifo)
    with pytest.raises(CommodelError, match="not a regular file"):
        write_text(fifo, "x")
    assert stat.S_ISFIFO(fifo.stat().st_mode) and [p.name for p in tmp_path.iterdir()] == ["out.toml"]


def assert_one_line_exit_2(args, capsys, monkeypatch):
    """``commodel ARGS`` exits 2 with one ``error`` line on stderr and no traceback: that line."""
    monkeypatch.setattr("sys.argv", ["commodel", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    captured = capsys.readouterr()
    assert exit_info.value.code == 2, (args, captured.out[-300:], captured.err[-300:])
    assert "Traceback" not in captured.err + captured.out
    assert captured.err.startswith("error") and captured.err.count("\n") == 1, captured.err
    return captured.err


@pytest.mark.parametrize("args", CASES, ids=lambda a: " ".join(a)[:80])
def test_bad_input_is_one_line_exit_2_no_traceback(args, capsys, monkeypatch):
    monkeypatch.setenv(OVERLAY_ENV, "")  # --hardware sets it: restore it after the test
    assert_one_line_exit_2(args, capsys, monkeypatch)


def test_a_bad_overlay_in_the_environment_is_said_once(tmp_path, capsys, monkeypatch):
    """An overlay named by COMMODEL_HARDWARE that every hardware lookup of a job fails on (the system,
    the fabric) is one error, said once, naming the file and the field."""
    overlay = tmp_path / "limit.toml"
    overlay.write_text('[gpus.h100-sxm]\npower_limit = { value = "900 W", source = "test" }\n')
    monkeypatch.setenv(OVERLAY_ENV, str(overlay))
    assert_one_line_exit_2(
        ["train", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8"], capsys, monkeypatch
    )
    monkeypatch.setattr("sys.argv", ["commodel", "train", "--model", "llama3-8b", "--system", "dgx-h100"])
    with pytest.raises(SystemExit):
        main()
    err = capsys.readouterr().err
    assert err.count("900 W") == 1 and "field 'power_limit'" in err and "limit.toml" in err


@pytest.mark.parametrize(
    "args",
    [[*TRAIN, "--capacity-factor", "nan"], [*TRAIN, "--power-limit", "inf"], [*SERVE, "--prompt-cv", "nan"]],
    ids=lambda a: " ".join(a[-2:]),
)
def test_a_number_that_is_not_finite_is_called_that_not_out_of_bounds(args, capsys, monkeypatch):
    """NaN fails every bound a field has: the message says what is wrong with it, not which bound."""
    err = assert_one_line_exit_2(args, capsys, monkeypatch)
    assert err == f"error: {args[-2]}: must be a finite number, got {args[-1]}\n"
