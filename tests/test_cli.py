"""The CLI contract other tools rely on, and its handling of bad input (exit 2, one line, no traceback)."""

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commodel.cli import app, main
from commodel.comm.calls import COLUMNS

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_collective_table_like_nccl_tests():
    result = invoke("collective", "allreduce", "--system", "dgx-h100", "--size", "8B:8GiB")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if not line.startswith("#")]
    assert len(lines) == 31
    assert "busbw" in result.output and "Avg bus bandwidth" in result.output


def test_collective_sizes_are_whole_float_elements_as_nccl_tests_runs_them():
    """nccl-tests runs ``size / 4`` floats and prints their bytes: -b 5 -e 17 runs 4 and 8 B."""
    records = json.loads(invoke("collective", "allreduce", "--size", "5B:17B", "--json").output)
    assert [r["size_bytes"] for r in records] == [4, 8]


def test_collective_json_contract():
    result = invoke(
        "collective", "allgather", "--system", "dgx-a100", "--nodes", "2", "--size", "64,1MiB,1GiB", "--json"
    )
    assert result.exit_code == 0, result.output
    records = json.loads(result.output)
    assert len(records) == 3
    assert list(records[0]) == COLUMNS
    assert records[0]["gpus"] == 16 and records[0]["nodes"] == 2
    assert records[2]["busbw_GBps"] == pytest.approx(records[2]["algbw_GBps"] * 15 / 16)


def test_a_sliced_collective_leaves_out_the_sizes_below_one_element_per_rank():
    """nccl-tests' all-gather on 16 GPUs runs ``count / 16`` elements a rank: 8 B is none, so it is left
    out, the table saying so (it had been priced as an 8-byte run), and the sizes from 64 B on are priced."""
    args = ["collective", "allgather", "--system", "dgx-a100", "--nodes", "2", "--size", "8:256"]
    table = invoke(*args)
    assert table.exit_code == 0, table.output
    assert "# 8 B, 16 B, 32 B left out: less than one 4-byte element per rank of 16" in table.output
    assert [r["size_bytes"] for r in json.loads(invoke(*args, "--json").output)] == [64, 128, 256]


def test_collective_csv_and_forced_algorithm():
    result = invoke(
        "collective", "allreduce", "--system", "dgx-h100", "--size", "1GiB", "--algo", "ring", "--csv"
    )
    assert result.exit_code == 0, result.output
    header, row = result.output.strip().splitlines()
    assert header.split(",")[:3] == ["op", "algo", "protocol"]
    assert row.split(",")[1] == "ring"


def test_roofline_gemm_json():
    result = invoke(
        "roofline", "gemm", "--gpu", "h100-sxm", "--m", "8192", "--n", "8192", "--k", "8192", "--json"
    )
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert {"time_s", "tflops", "bound"} <= set(record)
    assert record["bound"] == "compute" and 600 < record["tflops"] < 800 and record["split_k"] == 1
    assert (record["tile"], record["tiles"], record["waves"]) == ("128x256", 64 * 32, 16)  # 2,048 on 132 SMs
    amd = invoke(
        "roofline", "gemm", "--gpu", "mi300x", "--m", "4096", "--n", "3648", "--k", "32896", "--dtype", "fp8"
    )
    assert "304 tiles of 256x192, 1 wave)" in amd.output, amd.output
    skinny = invoke("roofline", "gemm", "--m", "394", "--n", "2560", "--k", "8192", "--dtype", "fp8")
    assert skinny.exit_code == 0 and "split-K 3; 120 tiles of 128x256, 1 wave)" in skinny.output


def test_roofline_plot_writes_png(tmp_path):
    out = tmp_path / "roofline.png"
    result = invoke("roofline", "plot", "--gpu", "mi300x", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert not list(tmp_path.glob(".*.tmp"))


def test_hw_list_and_show():
    listed = invoke("hw", "list", "--kind", "system")
    assert listed.exit_code == 0 and "frontier-node" in listed.output and "h100-sxm " not in listed.output
    shown = invoke("hw", "show", "h100-sxm")
    assert shown.exit_code == 0
    assert "memory_bandwidth = 3.35 TB/s" in shown.output and "[ml-engineering" in shown.output
    assert "peak_flops.bf16 = 989 TFLOP/s" in shown.output and "launch_overhead = 3 us" in shown.output
    as_json = json.loads(invoke("hw", "show", "nvlink4", "--json").output)
    assert (
        as_json["record"] == "link"
        and as_json["kind"] == "nvlink"
        and as_json["in_network_reduction"] is True
    )


def test_validate_prints_errors_and_gates():
    result = invoke("validate")
    assert result.exit_code == 0, result.output
    assert "error_%" in result.output and "median" in result.output and "holds" in result.output
    data = json.loads(invoke("validate", "--json").output)
    assert {"rows", "summary", "gates"} <= set(data)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["collective", "allreduce", "--system", "dgx-h10"], "did you mean 'dgx-h100'"),
        (["collective", "allreduse", "--system", "dgx-h100"], "did you mean 'allreduce'"),
        (["collective", "allreduce", "--size", "12XB"], "cannot read '12XB'"),
        (["collective", "allreduce", "--gpus", "0"], "--gpus: Input should be greater than or equal to 1"),
        (["collective", "allreduce", "--gpus", "-3"], "--gpus: Input should be greater than or equal to 1"),
        (["collective", "allreduce", "--nodes", "0"], "--nodes: Input should be greater than or equal to 1"),
        (["collective", "allreduce", "--gpus", "16"], "raise --nodes to at least 2"),
        (
            ["collective", "allreduce", "--system", "dgx-a100", "--algo", "nvls"],
            "NVLS needs an NVLink switch",
        ),
        (["collective", "allreduce", "--system", "gb200-nvl72", "--partition", "5"], "does not divide"),
        (["collective", "allreduce", "--launch", "grpah"], "did you mean 'graph'"),
        (
            ["collective", "allreduce", "--channels", "0"],
            "--channels: Input should be greater than or equal to 1",
        ),
        (
            ["collective", "allreduce", "--channels", "65"],
            "--channels: Input should be less than or equal to 64",
        ),
        (
            ["collective", "allreduce", "--gpus-per-process", "0"],
            "--gpus-per-process: Input should be greater than or equal to 1",
        ),
        (["collective", "allreduce", "--system", "gb200-nvl72", "--nodes", "20"], "do not fill whole"),
        (["collective", "allreduce", "--algo", "collnet-direct", "--nodes", "2"], "SHARP"),
        (["collective", "allreduce", "--algo", "rign"], "did you mean 'ring'"),
        (["collective", "alltoall", "--algo", "ring"], "alltoall has no 'ring' algorithm"),
        (["roofline", "gemm", "--gpu", "h100"], "did you mean 'h100-sxm'"),
        (["roofline", "gemm", "--gpu", "a100-sxm-80gb", "--dtype", "fp8"], "no fp8 peak"),
        (["hw", "show", "nvlink9"], "did you mean"),
        (
            ["compare", "--a", "sytem=dgx-h100,model=llama3-8b", "--b", "system=dgx-h100,model=llama3-8b"],
            "did you mean 'system'",
        ),
        (["compare", "--a", "system", "--b", "x=1"], "field=value pairs"),
        (
            ["train", "--model", "llama3-8b", "--system", "dgx-h100:1,mi300x-8:1", "--pp", "2", "--kernels"],
            "one kind of node",
        ),
        (["roofline", "plot", "-o", "/tmp/roofline.foo"], "image extension"),
        (["roofline", "plot", "-o", "/tmp"], "is a folder"),
        (["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--output-cv", "-1"], "--output-cv"),
        (
            ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "4", "--prefill-gpus", "4"],
            "leave some",
        ),
        (
            [
                "serve",
                "--model",
                "llama3-8b",
                "--system",
                "dgx-h100",
                "--gpus",
                "4",
                "--prefill-gpus",
                "1",
                "--batch",
                "8",
            ],
            "size their own batches",
        ),
        (["collective", "allreduce", "--size", "1e99"], "above 2^63 bytes"),
        (["collective", "allreduce", "--size", "8B:1e30"], "above 2^63 bytes"),
        (["collective", "allreduce", "--size", "3B:17B"], "less than one 4-byte float element"),
        # NCCL's NVLS all-gather stops at 32 GPUs of a domain: the reason says so, not that NVLS is missing
        (
            [
                "collective",
                "allgather",
                "--system",
                "gb200-nvl72",
                "--nodes",
                "18",
                "--size",
                "1GiB",
                "--algo",
                "nvls",
            ],
            "NCCL runs NVLS allgathers on at most 32 GPUs of a domain (NCCL_MAX_NVLS_ARITY), and this one has 72",
        ),
        # a GEMM beside an all-gather of 1 B over 8 GPUs: a run of no bytes, not a 14 us collective
        (
            ["overlap", "--system", "dgx-h100", "--gpus", "8", "--size", "1"],
            "less than one 4-byte float element per rank of 8",
        ),
        # an all-to-all slices its buffer over its ranks: 7 B over 72 GPUs is no element each, not 10 us
        (
            ["collective", "alltoall", "--system", "gb200-nvl72", "--nodes", "18", "--size", "7"],
            "--size 7 B is less than one 4-byte float element per rank of 72",
        ),
        (["collective", "allreduce", "--size", "1MiB", "--json", "--csv"], "choose one"),
        (["sweep", "-o", ""], "needs a name"),
        (["sweep", "--scheduler", "tcp://127.0.0.1:9", "-o", "/tmp/commodel-unused"], "--executor dask"),
        (
            ["comm", "schemes", "--system", "frontier-node", "--scheme", "kernel-initiated"],
            "GPU-initiated work",
        ),
        (["comm", "schemes", "--scheme", "kernel-initated"], "did you mean 'kernel-initiated'"),
        (["train", "--model", "llama3-8b", "--system", "dgx-h100:1;mi300x-8:1", "--pp", "2"], "SYSTEM:NODES"),
        (
            [
                "train",
                "--model",
                "llama3-8b",
                "--system",
                "dgx-h100:1,mi300x-8:1",
                "--pp",
                "2",
                "--stage-layers",
                "9,9",
            ],
            "sum to the model's 32 layers",
        ),
        (["train", "--model", "llama3-8b", "--system", "dgx-h100", "--stage-layers", "16,16"], "node groups"),
        (
            ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--slo-tpot", "1e-4"],
            "below one request's",
        ),
        (["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--output", "-5"], "--output"),
        (
            ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--batch", "lots"],
            "a number of requests",
        ),
        (
            ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--batch", "4", "--slo-ttft", "1"],
            "not both",
        ),
        (["serve", "--model", "llama3-8b", "--system", "dgx-a100", "--dtype", "fp8"], "no fp8 tensor cores"),
        (
            ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--tp", "3", "--gpus", "3"],
            "divisible by tp",
        ),
        (["validate", "--row", "mb-gb200-gptoss-12b"], "did you mean 'mb-gb200-gptoss-120b'"),
        (["validate", "--row", "h100-ar-1k", "--markdown"], "--row prints one row"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["commodel", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.startswith("error: ") and "Traceback" not in err


TRAIN = [
    "train",
    "--model",
    "llama3-70b",
    "--system",
    "dgx-h100",
    "--gpus",
    "64",
    "--tp",
    "8",
    "--pp",
    "2",
    "--global-batch",
    "128",
    "--micro-batch",
    "1",
    "--seq",
    "8192",
    "--sequence-parallel",
    "--zero",
    "1",
]


def test_train_json_contract():
    result = invoke(*TRAIN, "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert {"step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "memory_per_gpu_bytes", "fits"} <= set(
        record
    )
    assert record["layout"]["dp"] == 4  # default: gpus / (tp pp cp)
    assert set(record["breakdown"]) == {
        "compute",
        "host",
        "tp_comm",
        "cp_comm",
        "ep_comm",
        "pp_comm",
        "dp_comm",
        "offload",
        "bubble",
        "optimizer",
    }
    assert sum(record["breakdown"].values()) == pytest.approx(record["step_time_s"])


def test_train_table_for_a_person():
    result = invoke(*TRAIN, "--overlap", "occupancy-shaped")
    assert result.exit_code == 0, result.output
    assert "MFU" in result.output and "bubble" in result.output and "GiB per GPU" in result.output
    moe = ("train", "--model", "qwen3-30b-a3b", "--system", "dgx-h100", "--gpus", "16", "--ep", "16")
    assert "experts dispatched by deepep" in invoke(*moe, "--dispatcher", "deepep").output
    assert "dispatched" not in invoke(*moe).output
    # the layers each pipeline stage holds, repeats folded, and none without pipelining
    llama = ("train", "--model", "llama3-405b", "--system", "dgx-h100", "--gpus", "2048", "--tp", "8")
    piped = invoke(*llama, "--pp", "16", "--vpp", "8", "--ends-as-layers", "--global-batch", "512").output
    assert "stages           7, 14 x 8, 7 layers, first to last" in piped
    assert "stages" not in invoke(*llama, "--global-batch", "512").output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--tp", "3"], "heads (64) must be divisible by tp"),
        (["--overlap", "sm-partiton"], "did you mean 'sm-partition'"),
        (["--recompute", "ful"], "did you mean 'full'"),
        (["--dp", "3"], "must equal the number of GPUs"),
        (["--dtype", "bf61"], "did you mean 'bf16'"),
        (["--attention", "flsh"], "did you mean 'flash'"),
        (["--pue", "0.9"], "at least 1"),
        (["--gpus", "60"], "do not fill whole dgx-h100 nodes"),
    ],
)
def test_train_bad_input_exits_2(extra, message, capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["commodel", *TRAIN, *extra])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_sweep_default_runs_and_writes_its_outputs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("sweep", "--quiet")
    assert result.exit_code == 0, result.output
    assert len(result.output.strip().splitlines()) == 1 and "Pareto-optimal" in result.output
    out = tmp_path / "sweep-default"
    assert (out / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "summary.json").read_text())["pareto"] >= 1


def test_sweep_bad_spec_exits_2(tmp_path, capsys, monkeypatch):
    spec = tmp_path / "bad.toml"
    spec.write_text(
        '[study]\nname = "x"\nevaluate = "training"\n[variables]\nsytem = { choice = ["dgx-h100"] }\n[objectives]\nstep_time_s = "min"\n'
    )
    monkeypatch.setattr("sys.argv", ["commodel", "sweep", str(spec), "-o", str(tmp_path / "out")])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown input 'sytem' (did you mean 'system'?)" in err and "Traceback" not in err


def test_collective_library_all_may_choose_mpi_algorithms():
    nccl = json.loads(
        invoke("collective", "allreduce", "--system", "dgx-h100", "--size", "1MiB", "--json").output
    )
    every = json.loads(
        invoke(
            "collective", "allreduce", "--system", "dgx-h100", "--size", "1MiB", "--library", "all", "--json"
        ).output
    )
    assert nccl[0]["algo"] in {"ring", "tree", "nvls"}
    assert every[0]["time_s"] <= nccl[0]["time_s"]


def test_study_run_prints_claims_for_a_person():
    result = invoke("study", "run", "disaggregation")
    assert result.exit_code == 0, result.output
    assert "paper 32 to 47 %" in result.output and "model" in result.output


def test_a_sweep_never_replaces_another_specs_results_nor_writes_into_a_file(tmp_path, capsys, monkeypatch):
    cais = str(Path(__file__).parents[1] / "studies" / "cais" / "study.toml")
    ncclbpf = str(Path(__file__).parents[1] / "studies" / "ncclbpf" / "study.toml")
    out = tmp_path / "out"

    def run(*args):
        monkeypatch.setattr("sys.argv", ["commodel", "sweep", *args, "--quiet"])
        try:
            main()
        except SystemExit as exit_info:
            return exit_info.code
        return 0

    assert run(cais, "-o", str(out)) == 0
    before = (out / "results.parquet").read_bytes()
    for extra in ([], ["--resume"]):
        assert run(ncclbpf, "-o", str(out), *extra) == 2
        assert "another specification" in capsys.readouterr().err
    assert (out / "results.parquet").read_bytes() == before
    assert run(ncclbpf, "-o", str(out), "--force") == 0
    (tmp_path / "file").write_text("x")
    assert run(cais, "-o", str(tmp_path / "file")) == 2 and "is a file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("variables", "fixed", "message"),
    [
        (
            "nodes = { int = [1, 100000] }\nglobal_batch = { int = [1, 10000000] }",
            "",
            "1,000,000,000,000 points",
        ),
        ("nodes = { choice = [] }", "", "empty choice list"),
        ("nodes = { choice = [1, 2] }", 'global_batch = "lots"', "valid integer"),
        ("nodes = { choice = [1, 2] }", "pue = 0.5", "PUE"),
    ],
)
def test_bad_sweep_specs_stop_before_any_work_and_leave_nothing(
    tmp_path, capsys, monkeypatch, variables, fixed, message
):
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'[study]\nname = "bad"\nevaluate = "training"\nmethod = "grid"\n[fixed]\nmodel = "llama3-8b"\n'
        f'system = "dgx-h100"\n{fixed}\n[variables]\n{variables}\n[objectives]\nstep_time_s = "min"\n'
    )
    out = tmp_path / "out"
    monkeypatch.setattr("sys.argv", ["commodel", "sweep", str(spec), "-o", str(out), "--quiet"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1
    assert not out.exists()


def test_compare_sets_two_designs_side_by_side_from_the_train_model(tmp_path):
    from commodel.pricing.run import train

    common = "model=llama3-8b,gpus=8,global_batch=64,seq=2048"
    result = invoke("compare", "--common", common, "--a", "system=dgx-h100", "--b", "system=dgx-b200",
                    "--json", "--plot", str(tmp_path / "cmp.png"))  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    a = train(model="llama3-8b", gpus=8, global_batch=64, seq=2048, system="dgx-h100")
    step = next(r for r in data["metrics"] if r["metric"] == "step time")
    assert step["a"] == pytest.approx(a["step_time_s"]) and step["b_over_a"] < 1  # B200 is faster
    assert sum(r["change_s"] for r in data["breakdown"]) == pytest.approx(step["b"] - step["a"])
    assert (tmp_path / "cmp.png").read_bytes()[:4] == b"\x89PNG"
    # no price: no cost row, and a note on how to get one; with a price, the cost row
    assert "cost to train" not in {r["metric"] for r in data["metrics"]} and data["notes"]
    priced = json.loads(invoke("compare", "--common", f"{common},price_per_gpu_hour=2", "--a", "system=dgx-h100",
                               "--b", "system=dgx-b200", "--json").output)  # fmt: skip
    assert "cost to train" in {r["metric"] for r in priced["metrics"]} and not priced["notes"]


def test_serve_prices_a_token_only_when_given_a_gpu_hour_price():
    job = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "1"]
    job += ["--prompt", "100", "--output", "100"]
    unpriced, priced = invoke(*job), invoke(*job, "--price-per-gpu-hour", "2.5")
    assert unpriced.exit_code == priced.exit_code == 0
    assert "give --price-per-gpu-hour" in unpriced.stdout and "$0 " not in unpriced.stdout
    assert "per million output tokens" in priced.stdout


def test_train_lists_one_layers_kernels_when_asked():
    job = ["train", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--global-batch", "64"]
    text, plain = invoke(*job, "--kernels"), invoke(*job)
    assert text.exit_code == plain.exit_code == 0
    assert "one layer, one micro-batch on one GPU" in text.stdout and "fc1" in text.stdout
    assert "one layer, one micro-batch" not in plain.stdout
    rows = json.loads(invoke(*job, "--kernels", "--json").stdout)["kernels"]
    assert {"qkv", "attention out", "fc1", "fc2", "attention"} <= {r["kernel"] for r in rows}


def test_kernel_columns_stay_aligned_under_long_kernel_names():
    """gpt-oss's banded layers add "prefill attention (window)" (26 characters): every row's dtype
    still starts where the header's does."""
    job = [
        "serve",
        "--model",
        "gpt-oss-120b",
        "--system",
        "dgx-h100",
        "--gpus",
        "8",
        "--tp",
        "8",
        "--ep",
        "8",
    ]
    text = invoke(*job, "--kernels")
    assert text.exit_code == 0
    lines = text.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("kernel "))
    rows = lines[
        header + 1 : next(i for i in range(header, len(lines)) if lines[i].lstrip().startswith("total"))
    ]
    assert any("(window)" in row for row in rows)
    column = lines[header].index("dtype")
    assert all(row[column : column + 4] in ("bf16", "fp8 ", "fp4 ") for row in rows), rows


@pytest.mark.parametrize(
    ("row", "metric"),
    [
        ("mb-gb200-gptoss-120b", "tokens_per_s_per_gpu"),
        ("trt-gb200-llama3-70b-1000-1000", "output_tokens_per_s"),
        ("gb200-ib12-ring", "busbw_GBps"),
        ("deepep-ht-ep32-combine", "rdma_GBps"),
        ("deepep-ll-ep16-dispatch", "time_us"),
        ("a100-gemm-16k", "tflops"),
    ],
)
def test_validate_row_prints_the_command_that_prices_it(row, metric):
    """validate --row: one row, and a commodel command that, run, gives the row's model value."""
    detail = json.loads(invoke("validate", "--row", row, "--json").stdout)
    text = invoke("validate", "--row", row).stdout
    assert detail["id"] == row and f"run it    {detail['command']}" in text
    args = shlex.split(detail["command"])[1:]
    result = json.loads(invoke(*args, "--json").stdout)
    if metric == "busbw_GBps":  # a collective's table: one row per size
        (result,) = result
    if metric in ("rdma_GBps", "time_us"):  # a dispatch's table: the dispatch and the combine
        (result,) = [r for r in result if r["call"] in row]
    value = result["tokens_per_s"] / result["gpus"] if metric == "tokens_per_s_per_gpu" else result[metric]
    assert value == pytest.approx(detail["model"], rel=1e-9)


def test_validate_row_priced_without_a_job_gives_its_formula_from_the_hardware_it_reads():
    """A row priced without a job (a hardware constant, a put, a PUE) shows how its value is derived
    instead of a command; every modelled row gives one or the other, and a formula follows the
    records it reads."""
    import dataclasses

    from commodel.hardware import default_db
    from commodel.validate.measurements import load_measurements
    from commodel.validate.table import row_detail

    text = invoke("validate", "--row", "a100-mamf").stdout  # the best GEMM shape: the GPU's ceiling
    assert "measured  271.2 TFLOP/s (throughput)" in text and "run it" not in text
    assert "formula   bf16 peak 312 TFLOP/s x matmul efficiency" in text and "= 271.1 TFLOP/s" in text
    jobless = load_measurements().query("kind in ['p2p', 'gemm', 'memory', 'power', 'facility', 'latency']")
    for row_id in jobless.id:
        detail = row_detail(row_id)
        assert detail["model"] != detail["model"] or detail["job"] is not None or detail["formula"], row_id
    db = default_db()
    link = db.link("nvlink4")
    doubled = link.model_copy(
        update={"bandwidth": link.bandwidth.model_copy(update={"value": 2 * link.bandwidth.value})}
    )
    faster = dataclasses.replace(db, links={**db.links, "nvlink4": doubled})
    assert "18 x 50 GB/s x efficiency 0.8 = 720 GB/s" in row_detail("h100-p2p-ce", faster)["formula"]


def test_warnings_are_one_line_notes_without_paths(capsys):
    import warnings

    from commodel.cli import one_line_warning

    with warnings.catch_warnings():
        warnings.showwarning = one_line_warning
        warnings.simplefilter("always")
        warnings.warn("invalid value\n encountered in divide", RuntimeWarning, stacklevel=1)
    err = capsys.readouterr().err
    assert err == "note: invalid value encountered in divide (RuntimeWarning)\n"


def test_validate_strict_exits_1_when_a_gate_fails(monkeypatch, capsys):
    import pandas as pd

    import commodel.cli.validation as validation

    report = {"rows": pd.DataFrame(), "summary": pd.DataFrame(), "band_coverage": pd.DataFrame()}
    gates = pd.DataFrame([{"gate": "g", "rows": 3, "statistic": "max", "abs_err_pct": 30.0, "bound_pct": 20.0,
                           "holds": False}])  # fmt: skip
    monkeypatch.setattr(validation, "validation_report", lambda draws: report | {"gates": gates})
    monkeypatch.setattr(validation, "report_sections", lambda report: {})
    monkeypatch.setattr(validation, "validation_text", lambda sections, markdown: "")
    assert invoke("validate").exit_code == 0
    strict = invoke("validate", "--strict")
    assert strict.exit_code == 1 and "g max 30.0% > 20%" in strict.output
    monkeypatch.setattr(
        validation, "validation_report", lambda draws: report | {"gates": gates.assign(holds=True)}
    )
    assert invoke("validate", "--strict").exit_code == 0


def test_compare_names_each_design_by_what_differs():
    from commodel.report.compare import labels

    common = {"model": "llama3-70b", "gpus": 64}
    assert labels({**common, "tp": 8, "pp": 2}, {**common, "tp": 4, "pp": 2}) == {"a": "tp=8", "b": "tp=4"}
    assert labels({**common, "zero": 1}, common) == {"a": "zero=1", "b": "defaults"}
    assert labels(common, dict(common)) == {"a": "the same design", "b": "the same design"}
    result = invoke("compare", "--common", "model=llama3-8b,system=dgx-h100,gpus=8", "--a", "zero=1", "--b", "zero=3",
                    "--json")  # fmt: skip
    assert json.loads(result.output)["labels"] == {"a": "zero=1", "b": "zero=3"}


@pytest.mark.parametrize("command", ["train", "serve"])
def test_job_help_is_grouped_and_readable_at_80_columns(command, monkeypatch):
    """Every field of the job has a section, and the help shows each option's whole name within 80
    columns."""
    from typer.testing import CliRunner

    from commodel.cli.root import PANELS, app
    from commodel.pricing.serving_job import ServingJob
    from commodel.pricing.training_job import TrainingJob

    schema = TrainingJob if command == "train" else ServingJob
    assert set(schema.model_fields) <= set(PANELS)
    monkeypatch.setenv("COLUMNS", "80")
    text = CliRunner().invoke(app, [command, "--help"], terminal_width=80).output
    assert max(len(line) for line in text.splitlines()) <= 80
    for name in schema.model_fields:
        assert f"--{name.replace('_', '-')}" in text
    assert "Model and system:" in text and "Output and other options:" in text


def test_train_says_which_settings_its_other_settings_leave_nothing_to_act_on():
    """An FP8 option under BF16, userbuffers at tp 1: priced as they run (not at all: the step is the
    same without them) and said in a note, where they passed silently; none under FP8 and tp 2."""
    base = [
        "train",
        "--model",
        "llama3-8b",
        "--system",
        "dgx-h100",
        "--gpus",
        "8",
        "--recompute",
        "full",
        "--json",
    ]
    idle = json.loads(invoke(*base, "--fp8-activation-input", "--tp-overlap", "userbuffers").output)
    plain = json.loads(invoke(*base).output)
    assert idle["step_time_s"] == plain["step_time_s"] and not plain["notes"]
    assert any("--fp8-activation-input acts under an FP8 recipe" in n for n in idle["notes"])
    assert any("at tp 1 there are none" in n for n in idle["notes"])
    active = [
        "--dtype",
        "fp8",
        "--tp",
        "2",
        "--sequence-parallel",
        "--fp8-activation-input",
        "--tp-overlap",
        "userbuffers",
    ]
    assert not json.loads(invoke(*base, *active).output)["notes"]


@pytest.mark.parametrize(
    "args, command",
    [
        (["train", "--model", "x"], "train"),
        (["--hardware", "cal.toml", "train"], "train"),
        (["--hardware=cal.toml", "--hardware", "more.toml", "collective", "allreduce"], "collective"),
        (["--hardware", "train"], None),  # the overlay's path, then no command
        (["--help"], None),
        (["trian"], None),  # not a command: the whole app says which it meant
        ([], None),
    ],
)
def test_the_command_is_found_past_the_root_options(args, command):
    """Only the command's module loads (a command pays for its own imports), also where an overlay
    comes first; without a command (--help, a typo) the whole app answers."""
    from commodel.cli import command_of

    assert command_of(args) == command


@pytest.mark.parametrize("args", [["--help"], [], ["trian"], ["--hardware", "x.toml"]])
def test_with_no_command_to_run_the_listing_answers_as_the_whole_app(args):
    """Where no command runs (the root's help, no command, a misspelled one), a listing of stand-ins
    that carry each command's docstring answers, without importing the commands' modules: the same
    text, the same exit code."""
    from commodel.cli import listing_app

    whole, listing = (runner.invoke(a, args, terminal_width=100) for a in (app, listing_app()))
    assert listing.output == whole.output and listing.exit_code == whole.exit_code
    assert "sweep" in whole.output or "trian" in whole.output or "Missing command" in whole.output


def test_the_listing_reads_each_docstring_from_the_module_where_no_source_ships(monkeypatch):
    """An install without the commands' sources (zipped, compiled) lists the same docstrings: the
    listing imports the module for the one it cannot read."""
    import commodel.cli as cli
    from commodel.cli.root import GROUPS

    names = {name: module for name, module in cli.COMMANDS.items() if name not in GROUPS}
    from_source = {name: cli._docstring(module, name) for name, module in names.items()}
    monkeypatch.setattr(cli, "find_spec", lambda name: None)
    assert {name: cli._docstring(module, name) for name, module in names.items()} == from_source
    assert all(from_source.values())
