"""Bad input, round four: the newest doors (model files, check files, software settings, calibrate logs,
sweep specifications) tried as a careless or hostile user would. Each case exits 2 with one ``error:``
line, no traceback; a case that writes an output leaves none behind."""

import json
from pathlib import Path

import pytest
from test_bad_input import assert_one_line_exit_2

from commodel.cli import main
from commodel.hardware.loader import OVERLAY_ENV

ROOT = Path(__file__).parents[1]
LLAMA = (ROOT / "workloads" / "llama3-8b.toml").read_text()
HF = json.loads((ROOT / "tests" / "data" / "hf" / "llama3-8b.json").read_text())
MOE = "[moe]\nexperts = 8\ntop_k = 2\nexpert_ffn_hidden = 10\n"


def _hf(**changes: object) -> str:
    return json.dumps({k: v for k, v in {**HF, **changes}.items() if v is not ...})


GPT_OSS = {"model_type": "gpt_oss", "num_local_experts": 8, "experts_per_token": 2}

#: Model files: exact types, sizes at least 1, finite values within bounds, nesting bounded.
MODEL_FILES = {
    "gated-str.toml": LLAMA.replace("gated_mlp = true", 'gated_mlp = "false"'),
    "vocab-true.toml": LLAMA.replace("vocab = 128256", "vocab = true"),
    "layers-huge.toml": LLAMA.replace("layers = 32", "layers = 1000000000000"),
    "layers-float.toml": LLAMA.replace("layers = 32", "layers = 32.0"),
    "heads-zero.toml": LLAMA.replace("heads = 32", "heads = 0"),
    "kv-float.toml": LLAMA.replace("kv_heads = 8", "kv_heads = 8.0"),
    "hidden-huge.toml": LLAMA.replace("hidden = 4096", "hidden = 4096000000"),
    "ffn-huge.toml": LLAMA.replace("ffn_hidden = 14336", "ffn_hidden = 99999999999999999"),
    "seq-huge.toml": LLAMA.replace("seq = 8192", "seq = 100000000000"),
    "vocab-neg.toml": LLAMA.replace("vocab = 128256", "vocab = -5"),
    "aliases-int.toml": LLAMA.replace('aliases = ["llama3.1-8b", "llama31-8b"]', "aliases = [1, 2]"),
    "clamp-inf.toml": LLAMA + "activation_clamp = inf\n",
    "clamp-nan.toml": LLAMA + "activation_clamp = nan\n",
    "clamp-zero.toml": LLAMA + "activation_clamp = 0.0\n",
    "dropout-int.toml": LLAMA + "dropout = 1\n",
    "activation-bad.toml": LLAMA + "activation = 'relu'\n",
    "unknown-key.toml": LLAMA + "layerz = 3\n",
    "window-zero.toml": LLAMA + "sliding_window = 0\nsliding_window_layers = 4\n",
    "window-layers-over.toml": LLAMA + "sliding_window = 128\nsliding_window_layers = 40\n",
    "moe-zero.toml": LLAMA + MOE.replace("experts = 8", "experts = 0"),
    "moe-string.toml": LLAMA + MOE.replace("experts = 8", "experts = '8'"),
    "moe-neg-shared.toml": LLAMA + MOE + "shared_experts = -1\n",
    "moe-neg-dense.toml": LLAMA + MOE + "dense_layers = -3\n",
    "moe-dense-over.toml": LLAMA + MOE + "dense_layers = 40\n",
    "moe-topk-over.toml": LLAMA + MOE.replace("top_k = 2", "top_k = 9"),
    "moe-list.toml": LLAMA + "moe = [1, 2]\n",
    "router-groups.toml": LLAMA + MOE + "router_groups = 3\nrouter_group_top_k = 1\n",
    "mla-zero.toml": LLAMA
    + "[mla]\nq_lora_rank = 0\nkv_lora_rank = 512\nqk_nope_head_dim = 128\nqk_rope_head_dim = 64\nv_head_dim = 128\n",
    "deep.toml": "a = " + "[" * 50_000 + "]" * 50_000 + "\n",
    "empty.toml": "",
    "hf-tie-str.json": _hf(tie_word_embeddings="false"),
    "hf-headdim0.json": _hf(head_dim=0),
    "hf-kv0.json": _hf(num_key_value_heads=0),
    "hf-experts0.json": _hf(model_type="qwen3_moe", num_experts=0, num_experts_per_tok=2),
    "hf-topk-over.json": _hf(model_type="qwen3_moe", num_experts=4, num_experts_per_tok=8),
    "hf-layers-huge.json": _hf(num_hidden_layers=10**12),
    "hf-layers-neg.json": _hf(num_hidden_layers=-2),
    "hf-hidden-bool.json": _hf(hidden_size=True),
    "hf-vocab-str.json": _hf(vocab_size="128256"),
    "hf-missing-layers.json": _hf(num_hidden_layers=...),
    "hf-kind.json": _hf(model_type="bert"),
    "hf-inf.json": _hf(**GPT_OSS, swiglu_limit=float("inf")),
    "hf-swiglu-str.json": _hf(**GPT_OSS, swiglu_limit="7"),
    "hf-window0.json": _hf(**GPT_OSS, sliding_window=0, layer_types=["sliding_attention"] * 4),
    "hf-window-missing.json": _hf(**GPT_OSS, sliding_window=None, layer_types=["sliding_attention"] * 2),
    "hf-layer-types-str.json": _hf(**GPT_OSS, layer_types="sliding_attention"),
    "hf-rope-list.json": _hf(rope_scaling=[1, 2]),
    "hf-nan.json": json.dumps(HF).replace('"hidden_size": 4096', '"hidden_size": NaN'),
    "hf-list.json": "[1, 2, 3]",
    "hf-deep.json": "[" * 50_000 + "]" * 50_000,
}

CHECK_BASE = '[designs.d]\nmodel = "llama3-8b"\nsystem = "dgx-h100"\nrecompute = "full"\n{inputs}\n[designs.d.expect]\n{expect}\n'
#: Check files: a bound of the output's kind, finite; one value per input, of the field's kind.
CHECK_FILES = {
    f"check-{i}.toml": CHECK_BASE.format(inputs=inputs, expect=expect)
    for i, (inputs, expect) in enumerate([
        ("", "problem = [0, 1]"), ("", 'mfu = "high"'), ("", "mfu = true"), ("", "mfu = [nan, 1]"),
        ("", "mfu = [0, inf]"), ("", "mfu = { value = 0.4, rel = inf }"), ("", "mfu = { value = nan, abs = 0.1 }"),
        ("gpus = true", "mfu = [0, 1]"), ("gpus = [8]", "mfu = [0, 1]"), ("gpus = { a = 1 }", "mfu = [0, 1]"),
        ("", "fits = 1"), ("", "recompute_used = true"), ("", "mfu = [0, 1, 2]"), ("", "mfu = { value = 0.4, rel = -1 }"),
        ("gpus = 8.5", "mfu = [0, 1]"), ("pue = nan", "mfu = [0, 1]"), ("", 'fits = "yes"'), ("pue = inf", "mfu = [0, 1]"),
    ])
}  # fmt: skip

SPEC = '[study]\nname="x"\nevaluate="training"\n{study}\n[fixed]\nmodel="llama3-8b"\nsystem="dgx-h100"\nrecompute="full"\n{fixed}\n[variables]\n{variables}\n[objectives]\n{objectives}\n'
#: Sweep specifications: finite choices, objectives on numbers, constraints some design meets.
SPECS = {
    f"spec-{i}.toml": SPEC.format(study=study, fixed=fixed, variables=variables, objectives=objectives)
    for i, (study, fixed, variables, objectives) in enumerate([
        ("", "", "pue={choice=[1.1, nan]}", 'step_time_s="min"'), ("", "", "tp={choice=[1, inf]}", 'step_time_s="min"'),
        ("", "", "tp={choice=[1,2]}", 'fits="max"'), ("", "", "tp={choice=[1,2]}", 'valid="max"'),
        ('constraints=["mfu >= 0.99"]', "", "tp={choice=[1,2]}", 'step_time_s="min"'),
        ('constraints=["fits == true", "step_time_s <= 0.000001"]', "", "tp={choice=[1,2]}", 'step_time_s="min"'),
        ("", "", "tp={choice=[1]}", 'step_time_s="min"'), ("", "pue=nan", "tp={choice=[1,2]}", 'step_time_s="min"'),
        ("", "", "recompute_used={choice=['none']}", 'step_time_s="min"'),
        # values an input cannot take, caught with the file and the field before any design is priced
        ("", "", "tp={choice=[1, 0]}", 'step_time_s="min"'), ("", "", "nodes={int=[1, 1000000000]}", 'step_time_s="min"'),
        ("", "", "tp={choice=[1, 2.5]}", 'step_time_s="min"'), ("", "", "overlap={choice=['serial', 'sometimes']}", 'step_time_s="min"'),
        ("", "zero=7", "tp={choice=[1,2]}", 'step_time_s="min"'),
    ])
}  # fmt: skip

FILES = MODEL_FILES | CHECK_FILES | SPECS
TRAIN = ["train", "--system", "dgx-h100", "--recompute", "full"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The files above, and nccl-tests logs: a valid one and its broken variants."""
    from test_calibrate import write_log

    from commodel.comm.calls import run
    from commodel.hardware import cluster

    root = tmp_path_factory.mktemp("round4")
    for name, text in FILES.items():
        (root / name).write_text(text)
    h100, sizes = cluster("dgx-h100"), [2**k for k in range(10, 30, 4)]
    good = write_log(root / "good.log", run("allreduce", h100, sizes, 8)).read_text()
    lines = good.splitlines()
    row = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    cells = lines[row].split()
    # and lines that contradict themselves: wrong results (#wrong), an algbw that is not size over time
    for name, (column, value) in {"zero-time": (5, "0.00"), "neg-time": (5, "-5.00"), "nan-bw": (7, "nan"),
                                  "inf-bw": (7, "inf"), "neg-bw": (6, "-1.00"), "wrong": (8, "12"),
                                  "algbw-off": (6, f"{2 * float(cells[6]) + 1:.2f}")}.items():  # fmt: skip
        broken = list(lines)
        broken[row] = " ".join([*cells[:column], value, *cells[column + 1 :]])
        (root / f"{name}.log").write_text("\n".join(broken) + "\n")
    other = write_log(
        root / "b16.log", run("allreduce", cluster("dgx-h100", 2), sizes, 16), ranks=16, hosts=2
    )
    (root / "concat.log").write_text(good + other.read_text())
    write_log(root / "a100.log", run("allreduce", h100, sizes, 8), device="NVIDIA A100-SXM4-80GB")
    (root / "graph0.log").write_text(
        good.replace("iters: 20", "iters: 20 agg iters: 1 validation: 1 graph: 0")
    )
    tripled = [
        " ".join([*c[:7], f"{3 * float(c[6]):.2f}", *c[8:]])
        if (c := line.split()) and not line.startswith("#")
        else line
        for line in lines
    ]  # busbw 3x algbw: no collective's factor, whatever the name
    (root / "all_reduce_perf.log").write_text("\n".join(tripled) + "\n")
    (root / "words.log").write_text("\n".join(" ".join(line.split()[:3]) if not line.startswith("#") else line
                                              for line in lines) + "\n")  # fmt: skip
    return root


CASES = (
    [["model", "show", "{" + name + "}"] for name in MODEL_FILES]
    + [[*TRAIN, "--model", "{" + name + "}"] for name in MODEL_FILES if name.endswith(".json")]
    + [[*TRAIN, "--model", "{" + name + "}"] for name in list(MODEL_FILES)[:12]]
    + [["check", "{" + name + "}"] for name in CHECK_FILES]
    + [["sweep", "{" + name + "}", "-o", "{out}", "--quiet"] for name in SPECS if name != "spec-6.toml"]
    + [["sensitivity", "{" + name + "}", "--samples", "8"] for name in ("spec-0.toml", "spec-6.toml")]
    + [["calibrate", "nccl-tests", "{" + log + "}", "--system", "dgx-h100", "-o", "{out}/c.toml"]
       for log in ("zero-time.log", "neg-time.log", "nan-bw.log", "inf-bw.log", "neg-bw.log", "concat.log",
                   "a100.log", "words.log", "all_reduce_perf.log", "wrong.log", "algbw-off.log")]
    + [["calibrate", "nccl-tests", "{good.log}", "--system", "dgx-h100", "-o", "{out}/c.toml", *extra]
       for extra in (["--gpus-per-process", "2"], ["--gpus-per-process", "3"], ["--launch", "pigeon"], ["--op", "alltoall"])]
    + [["calibrate", "nccl-tests", "{graph0.log}", "--system", "dgx-h100", "-o", "{out}/c.toml", "--launch", "graph"]]
)  # fmt: skip

#: Training and serving settings: contradictions and options the model does not run.
DENSE = ["train", "--model", "llama3-8b", "--system", "dgx-h100", "--recompute", "full"]
MOE_JOB = ["train", "--model", "qwen3-30b-a3b", "--system", "dgx-h100", "--ep", "8", "--recompute", "full"]
SETTINGS = (
    [[*DENSE, "--cuda-graphs", g] for g in ("attn,attn", "attn,,mlp", ",", "full_iteration,attn", "none,attn",
                                           "moe_router", "moe", "attn,moe_preprocess")]
    + [[*DENSE, *option] for option in (["--fp8-dispatch"], ["--ep-overlap", "1f1b"], ["--ep-overlap", "shared-experts"],
                                        ["--expert-load", "1.5"], ["--etp", "2"], ["--ep-sms", "24"], ["--permute-fusion"],
                                        ["--recompute-layers", "4", "--recompute", "none"], ["--offload", "optimizer,optimizer"],
                                        ["--offload", "weights,,optimizer"], ["--nics", "16"])]
    + [[*MOE_JOB, *option] for option in (["--expert-load", "9"], ["--ep-sms", "1000"], ["--cuda-graphs", "mlp"])]
    + [["train", "--model", "llama3-8b", "--system", "dgx-h100", "--recompute", "selective", "--recompute-layers", "3"]]
    # a sequence the ranks cannot split: 2 cp equal chunks, and with sequence parallelism tp equal shares
    + [[*DENSE, "--gpus", "16", "--tp", "8", "--cp", "2", "--seq", "8190"],
       [*DENSE, "--gpus", "8", "--tp", "8", "--seq", "8191", "--sequence-parallel"]]
    + [[*MOE_JOB, "--expert-load", "8.5"], [*MOE_JOB, "--ep-sms", "133"], [*DENSE, "--nics", "9"],
       [*DENSE, "--cuda-graphs", "mlp,mlp,attn"]]
    + [[*MOE_JOB, "--recompute-modules", listed] for listed in ("moe_act,moe_act", "moe_act,,layernorm", ",")]
    # a repetition that would unroll to a trillion layers is refused before it is built
    + [["train", "--model", "deepseek-v3", "--system", "gb200-nvl72", "--gpus", "256", "--pp", "8", "--ep", "32",
        "--pipeline-layout", layout] for layout in ("Et|(tt|)*999999999999L", "Et*99999999999|L")]
    + [["serve", "--model", "llama3-8b", "--system", "dgx-h100", *option]
       for option in (["--batch", "3000"], ["--batch", "64", "--max-num-tokens", "32"], ["--batch", "65", "--max-batch-size", "64"],
                      ["--power-limit", "800"], ["--power-limit", "-1"], ["--dispatcher", "nccl"])]
)  # fmt: skip


@pytest.mark.parametrize(
    ("name", "field"),
    [("spec-9.toml", "'variables.tp': 0"), ("spec-10.toml", "'variables.nodes': 1000000000"),
     ("spec-11.toml", "'variables.tp': 2.5"), ("spec-12.toml", "'variables.overlap': 'sometimes'"),
     ("spec-13.toml", "'fixed.zero': 7")],
)  # fmt: skip
def test_a_sweep_value_an_input_cannot_take_names_the_file_and_the_field(
    name, field, folder, tmp_path, capsys, monkeypatch
):
    """It had failed at pricing with the CLI option's words (``--tp: ...``), after a blank progress line."""
    monkeypatch.setattr(
        "sys.argv", ["commodel", "sweep", str(folder / name), "-o", str(tmp_path / "out"), "--quiet"]
    )
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    assert f"{name}: field {field}: " in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


ROLLOUT_SPEC = (
    '[study]\nname="r"\nevaluate="rollout"\nmethod="grid"\n[fixed]\npolicy="fixed"\nmedian_response={median}\n'
    '[variables]\ngroup={{choice=[8, 16]}}\n[objectives]\nstep_s="min"\n'
)


@pytest.mark.parametrize("median", ['"0.5"', "0.5", "1e-9"])
def test_a_rollout_of_less_than_a_token_is_refused_however_it_is_written(
    median, tmp_path, capsys, monkeypatch
):
    """A median response under one token, as a number or as text, crashed the rollout model (its
    lengths are whole tokens); it is refused with the file and the field."""
    spec = tmp_path / "rollout.toml"
    spec.write_text(ROLLOUT_SPEC.format(median=median))
    monkeypatch.setattr("sys.argv", ["commodel", "sweep", str(spec), "-o", str(tmp_path / "out"), "--quiet"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    assert "field 'fixed.median_response': " in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_number_written_as_text_in_a_sweep_file_is_read_as_the_number(tmp_path, monkeypatch):
    """``size_bytes = "16777216"`` (text) crashed the overlap model; it prices as the number does."""
    import pandas as pd

    results = []
    for size in ('"16777216"', "16777216"):
        spec = tmp_path / "overlap.toml"
        spec.write_text(
            f'[study]\nname="o"\nevaluate="overlap"\nmethod="grid"\n[fixed]\nsize_bytes={size}\n'
            '[variables]\nm={choice=[1024, 2048]}\n[objectives]\ntime_s="min"\n'
        )
        out = tmp_path / f"out-{len(results)}"
        monkeypatch.setattr("sys.argv", ["commodel", "sweep", str(spec), "-o", str(out), "--quiet"])
        main()
        results.append(pd.read_parquet(out / "results.parquet").time_s.tolist())
    assert results[0] == results[1] and all(t > 0 for t in results[0])


def test_round_four_has_at_least_150_cases():
    assert len(CASES) + len(SETTINGS) >= 150


@pytest.mark.parametrize("args", CASES, ids=lambda a: " ".join(a)[:90])
def test_a_bad_file_is_one_line_exit_2_and_writes_nothing(args, folder, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(OVERLAY_ENV, "")
    names = {name: str(folder / name) for name in [*FILES, *(p.name for p in folder.glob("*.log"))]}
    names["out"] = str(tmp_path / "out")

    def filled(arg: str) -> str:
        for name, path in names.items():
            arg = arg.replace("{" + name + "}", path)
        return arg

    assert_one_line_exit_2([*map(filled, args)], capsys, monkeypatch)
    assert not (tmp_path / "out" / "c.toml").exists()


@pytest.mark.parametrize("args", SETTINGS, ids=lambda a: " ".join(a)[:90])
def test_a_contradictory_setting_is_one_line_exit_2(args, capsys, monkeypatch):
    assert_one_line_exit_2(args, capsys, monkeypatch)


def test_settings_that_contradict_each_other_refuse_only_their_rows(tmp_path, monkeypatch):
    """A grid over two settings, each valid alone, whose combinations break a rule in some rows (an
    episode of several turns without a turn's length; an RL or serving pool smaller than one replica;
    a fixed batch beside an SLO; a pipeline layout
    on a pp its chunks do not divide into): those rows are invalid with the rule as their problem, the
    others priced as they are alone. The whole table, or the whole sweep, had been refused, naming
    neither the rows nor the file. A layout no job can read stays an error."""
    import pandas as pd

    from commodel.errors import CommodelError
    from commodel.pricing.evaluator import evaluator

    rollout = pd.DataFrame({"policy": "fixed", "max_turns": [1, 5, 5], "turn_tokens": [0, 0, 512]})
    table = evaluator("rollout")(rollout)
    assert table.valid.tolist() == [True, False, True]
    assert "turn_tokens" in table.problem[1] and table.step_s.isna()[1]
    alone = evaluator("rollout")(rollout.iloc[[0, 2]])
    assert table.step_s[[0, 2]].tolist() == alone.step_s.tolist()
    pools = pd.DataFrame({"policy": "elastic", "tp": 2, "rl_gpus": [32, 32, 1], "serve_gpus": [16, 1, 16]})
    table = evaluator("rollout")(pools)  # a pool of fewer GPUs than a replica had divided by zero
    assert table.valid.tolist() == [True, False, False]
    assert (
        table.problem[1] == "serve_gpus (1) hold no replica of tp (2) GPUs"
        and "rl_gpus (1)" in table.problem[2]
    )
    serving = pd.DataFrame({"model": "llama3-8b", "system": "dgx-h100", "batch": ["8", "max", "8"],
                            "slo_tpot": [None, 0.05, 0.05]})  # fmt: skip
    table = evaluator("serving")(serving)
    assert table.valid.tolist() == [True, True, False] and "SLO" in table.problem[2]
    layouts = pd.DataFrame({"model": "deepseek-v3", "system": "gb200-nvl72", "gpus": [256, 240], "ep": 32,
                            "pp": [8, 3], "pipeline_layout": "Et|(tt|)*30L"})  # fmt: skip
    table = evaluator("training")(layouts)
    assert table.valid.tolist() == [True, False] and "do not divide into pp stages" in table.problem[1]
    assert table.gpus.tolist()[0] == 256 and table.gpus.isna()[1]  # nothing resolved for a refused row
    with pytest.raises(CommodelError, match="cannot read 'x'"):  # no pp or model reads it: an error
        evaluator("training")(layouts.assign(pipeline_layout=["Et|(tt|)*30L", "Et|(tx|)*30L"]))
    spec = tmp_path / "turns.toml"
    spec.write_text(
        '[study]\nname="t"\nevaluate="rollout"\nmethod="grid"\n[fixed]\npolicy="fixed"\n'
        '[variables]\nmax_turns={choice=[1, 5]}\nturn_tokens={choice=[0, 512]}\n[objectives]\nstep_s="min"\n'
    )
    monkeypatch.setattr("sys.argv", ["commodel", "sweep", str(spec), "-o", str(tmp_path / "out"), "--quiet"])
    main()
    assert len(pd.read_parquet(tmp_path / "out" / "results.parquet")) == 3
