"""A user's own model: a commodel TOML or a Hugging Face config.json, read like the shipped ones."""

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from commodel.cli import app, main
from commodel.errors import CommodelError
from commodel.pricing.run import train
from commodel.workloads.model.catalog import model
from commodel.workloads.model.files import MAX_BYTES, load_model_file
from commodel.workloads.model.transformer import model_flops_per_token, parameters

HF = Path(__file__).parent / "data" / "hf"
SHIPPED = Path(__file__).parents[1] / "workloads"


@pytest.mark.parametrize("name", sorted(p.stem for p in HF.glob("*.json")))
def test_a_hugging_face_config_is_the_shipped_model_of_that_name(name):
    shipped, loaded = model(name), load_model_file(HF / f"{name}.json")
    assert parameters(loaded) == parameters(shipped)
    assert loaded.activation == shipped.activation  # gpt-oss's quick-GeGLU, SwiGLU elsewhere
    assert loaded.fp4_scope == shipped.fp4_scope  # gpt-oss's MXFP4 experts, every linear layer elsewhere
    assert float(model_flops_per_token(loaded, shipped.seq)) == float(
        model_flops_per_token(shipped, shipped.seq)
    )


def test_every_listed_architecture_has_a_config_in_the_tests():
    from commodel.workloads.model.files import ARCHITECTURES

    kinds = {json.loads(p.read_text())["model_type"] for p in HF.glob("*.json")}
    assert kinds == set(ARCHITECTURES)


def test_a_job_names_a_model_file_and_prices_as_the_shipped_model(tmp_path):
    own = tmp_path / "mine.toml"
    shutil.copy(SHIPPED / "llama3-8b.toml", own)
    with_bom = tmp_path / "windows.toml"  # a byte-order mark, as some Windows editors save
    with_bom.write_bytes(b"\xef\xbb\xbf" + own.read_bytes())
    job = {"system": "dgx-h100", "gpus": 8, "recompute": "full"}
    shipped = train(model="llama3-8b", **job)["step_time_s"]
    for path in (own, with_bom, HF / "llama3-8b.json"):
        assert train(model=str(path), **job)["step_time_s"] == pytest.approx(shipped)


def _config(tmp_path, **changes):
    config = json.loads((HF / "llama3-8b.json").read_text()) | changes
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return path


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model_type": "bert"}, r"model_type 'bert' is not one commodel translates; supported: llama"),
        ({"hidden_size": None}, r"missing 'hidden_size'"),
        ({"num_attention_heads": 7}, r"config.json: .*hidden \(4096\)"),
        # a mixture-of-experts architecture without its experts is not a dense model
        ({"model_type": "qwen3_moe"}, r"missing 'num_experts' \(a qwen3_moe config needs it\)"),
        ({"model_type": "deepseek_v3"}, r"missing 'n_routed_experts'"),
    ],
)
def test_a_config_commodel_cannot_read_names_the_file_and_field(tmp_path, changes, message):
    with pytest.raises(CommodelError, match=message):
        load_model_file(_config(tmp_path, **changes))


@pytest.mark.parametrize(
    ("name", "changes", "dense", "banded"),
    [
        ("qwen3-30b-a3b", {}, 0, 0),
        ("qwen3-30b-a3b", {"mlp_only_layers": [0, 5, 47]}, 3, 0),
        ("qwen3-30b-a3b", {"decoder_sparse_step": 2}, 24, 0),  # MoE where (i + 1) % 2 == 0
        ("qwen3-30b-a3b", {"decoder_sparse_step": 2, "mlp_only_layers": [1, 2]}, 25, 0),
        ("deepseek-v3", {}, 3, 0),
        ("deepseek-v3", {"moe_layer_freq": 2}, 32, 0),  # after the first 3, MoE where i % 2 == 0
        ("qwen3-8b", {"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 30}, 0, 6),
        ("qwen3-8b", {"use_sliding_window": False, "sliding_window": 4096}, 0, 0),
        ("qwen3-8b", {"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": None}, 0, 8),
        ("mixtral-8x7b", {"sliding_window": 4096}, 0, 32),  # Mixtral bands every layer where it is set
        ("mixtral-8x7b", {}, 0, 0),
    ],
)
def test_a_config_chooses_its_dense_and_banded_layers_as_hugging_face_does(
    tmp_path, name, changes, dense, banded
):
    """Which layers keep a dense MLP and which attend in a band are read as transformers' modeling code
    reads them, not only from the fields the shipped configs set."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(json.loads((HF / f"{name}.json").read_text()) | changes))
    loaded = load_model_file(path)
    assert (0 if loaded.moe is None else loaded.moe.dense_layers) == dense
    assert (loaded.sliding_window_layers or 0) == banded


@pytest.mark.parametrize(
    ("name", "changes", "message"),
    [
        (
            "qwen3-30b-a3b",
            {"mlp_only_layers": [48]},
            r"'mlp_only_layers' names layer 48; the model's layers are 0 to 47",
        ),
        ("qwen3-30b-a3b", {"decoder_sparse_step": 0}, r"'decoder_sparse_step' must be at least 1"),
        ("deepseek-v3", {"moe_layer_freq": 0}, r"'moe_layer_freq' must be at least 1"),
        (
            "gpt-oss-120b",
            {"layer_types": ["full_attention"]},
            r"'layer_types' lists 1 layers; the model has 36",
        ),
        ("qwen3-8b", {"use_sliding_window": "yes"}, r"'use_sliding_window' must be true or false"),
        (
            "llama3-8b",
            {"hidden_act": "swishy"},
            r"'hidden_act': unknown activation 'swishy' \(did you mean 'swish'",
        ),
    ],
)
def test_a_layer_choice_the_model_cannot_have_names_the_field(tmp_path, name, changes, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(json.loads((HF / f"{name}.json").read_text()) | changes))
    with pytest.raises(CommodelError, match=message):
        load_model_file(path)


def test_unreadable_model_files_are_one_line_errors(tmp_path):
    binary = tmp_path / "bad.json"
    binary.write_bytes(b"\xff\xfe\x00")
    folder = tmp_path / "folder.json"
    folder.mkdir()
    huge = tmp_path / "huge.json"
    huge.write_text(" " * (MAX_BYTES + 1))
    wrong = tmp_path / "model.yaml"
    wrong.write_text("layers: 2")
    for path, message in ((binary, "a binary file, not a model"), (folder, "is a folder, not a model file"), (huge, "too large"),
                          (wrong, "a model file is a commodel .toml"), (tmp_path / "none.json", "no such model file")):  # fmt: skip
        with pytest.raises(CommodelError, match=message) as caught:
            load_model_file(path)
        assert "\n" not in str(caught.value)


def test_the_cli_takes_a_model_file_and_refuses_a_bad_one_with_exit_2(tmp_path, capsys, monkeypatch):
    args = ["train", "--model", str(HF / "qwen3-8b.json"), "--system", "dgx-h100", "--gpus", "8"]
    ok = CliRunner().invoke(app, args)
    assert ok.exit_code == 0 and "qwen3-8b.json on 8 GPUs" in ok.output
    bad = _config(tmp_path, model_type="t5")
    monkeypatch.setattr("sys.argv", ["commodel", "train", "--model", str(bad), "--system", "dgx-h100"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "not one commodel translates" in err and err.count("\n") == 1


def test_model_list_and_show():
    runner = CliRunner()
    listed = json.loads(runner.invoke(app, ["model", "list", "--json"]).output)
    assert {"llama3-8b", "deepseek-v3"} <= {row["name"] for row in listed}
    shown = json.loads(runner.invoke(app, ["model", "show", str(HF / "deepseek-v3.json"), "--json"]).output)
    assert shown["parameters_B"] == pytest.approx(671.0, rel=0.001) and shown["experts"] == 256
    assert shown["active_parameters_B"] == pytest.approx(37.6, rel=0.01)  # DeepSeek-V3 report: 37B active
    # the fields that shape its kernels, where a model sets them: gpt-oss's, none of Llama's beyond gating
    oss = json.loads(runner.invoke(app, ["model", "show", str(HF / "gpt-oss-120b.json"), "--json"]).output)
    assert (oss["activation_clamp"], oss["expert_bias"], oss["rotary_scaling"], oss["sliding_window"]) == (
        7.0,
        True,
        "yarn",
        128,
    )
    llama = json.loads(runner.invoke(app, ["model", "show", "llama3-8b", "--json"]).output)
    assert llama["gated_mlp"] and not {"activation_clamp", "expert_bias", "qk_norm"} & set(llama)


def _without(shipped: Path, field: str, folder: Path) -> Path:
    """A copy of the shipped model file ``shipped`` without its ``field`` line (the field's default)."""
    copy = folder / f"{shipped.stem}-without-{field}.toml"
    copy.write_text(
        "\n".join(line for line in shipped.read_text().splitlines() if not line.startswith(field))
    )
    return copy


@pytest.mark.parametrize("glue", ["activation_clamp", "expert_bias", "rotary_scaling"])
def test_megatrons_eager_glue_for_gpt_oss_slows_training_not_serving(glue, tmp_path):
    """Megatron-Core runs eager kernels around its fused ones for gpt-oss: it clamps the gated MLP's
    halves and concatenates them before the fused activation (``swiglu_limit`` 7), adds each
    expert's second bias weighted by the routing probabilities, and rotates queries and keys by YaRN
    unfused; the training step pays them, a serving engine's fused kernels do not."""
    from commodel.pricing.run import serve, train

    shipped = SHIPPED / "gpt-oss-120b.toml"
    hf = load_model_file(HF / "gpt-oss-120b.json")
    assert getattr(model("gpt-oss-120b"), glue) == getattr(hf, glue) and getattr(hf, glue)
    without = _without(shipped, glue, tmp_path)
    job = {"system": "gb200-nvl72", "gpus": 64, "ep": 64, "global_batch": 256, "seq": 8192}
    assert (
        train(model=str(shipped), **job)["step_time_s"]
        > 1.015 * train(model=str(without), **job)["step_time_s"]
    )
    served = {"system": "gb200-nvl72", "gpus": 4, "tp": 4, "prompt": 1024, "output": 1024}
    assert serve(model=str(shipped), **served)["tpot_s"] == serve(model=str(without), **served)["tpot_s"]


def test_a_model_that_normalizes_its_queries_and_keys_pays_their_norms(tmp_path):
    """Qwen3 passes each head's queries and keys through an RMSNorm (``q_norm``, ``k_norm``): the
    Hugging Face config's architecture says so, and the layer runs one more norm pass over them."""
    from commodel.pricing.run import train

    shipped = SHIPPED / "qwen3-8b.toml"
    assert model("qwen3-8b").qk_norm and load_model_file(HF / "qwen3-8b.json").qk_norm
    assert not load_model_file(HF / "qwen2-7b.json").qk_norm
    without = _without(shipped, "qk_norm", tmp_path)
    job = {"system": "dgx-h100", "gpus": 8, "global_batch": 64, "seq": 4096, "recompute": "full"}
    assert train(model=str(shipped), **job)["step_time_s"] > train(model=str(without), **job)["step_time_s"]


@st.composite
def _model_records(draw):
    """Model records anywhere in the schema's bounds, dense or MoE, with or without a window or MLA."""
    heads = draw(st.sampled_from([1, 2, 8, 32, 128]))
    record = {
        "description": "random", "source": "hypothesis", "layers": draw(st.integers(1, 200)),
        "hidden": heads * draw(st.sampled_from([8, 64, 128])), "heads": heads,
        "kv_heads": draw(st.sampled_from([h for h in (1, 2, 8, 32, 128) if heads % h == 0])),
        "ffn_hidden": draw(st.integers(1, 2**16)), "gated_mlp": draw(st.booleans()),
        "vocab": draw(st.integers(1, 2**18)), "seq": draw(st.sampled_from([1, 128, 4096, 131072])),
        "tied_embeddings": draw(st.booleans()),
    }  # fmt: skip
    if draw(st.booleans()):
        experts = draw(st.integers(1, 256))
        record["moe"] = {
            "experts": experts, "top_k": draw(st.integers(1, experts)), "expert_ffn_hidden": draw(st.integers(1, 8192)),
            "shared_experts": draw(st.integers(0, 2)), "dense_layers": draw(st.integers(0, record["layers"] - 1)),
        }  # fmt: skip
    if draw(st.booleans()):
        record |= {
            "sliding_window": draw(st.integers(1, 8192)),
            "sliding_window_layers": record["layers"] // 2,
        }
    return record


@settings(max_examples=80, deadline=None)
@given(_model_records())
def test_no_model_file_gives_a_negative_quantity(tmp_path_factory, record):
    """Over random model files inside the schema's bounds: parameters, FLOPs per token, and a training
    job's and a serving deployment's memory and times are finite and never negative (a negative one
    means a check was missed)."""
    import numpy as np
    import tomli_w

    from commodel.pricing.run import serve

    path = tmp_path_factory.mktemp("models") / "random.toml"
    path.write_text(tomli_w.dumps(record))
    net = load_model_file(path)
    values = [*parameters(net).values(), float(model_flops_per_token(net, net.seq))]
    assert all(np.isfinite(v) and v >= 0 for v in values), values
    for price in (
        lambda: train(model=str(path), system="dgx-h100", gpus=8, global_batch=8, seq=min(net.seq, 4096)),
        lambda: serve(model=str(path), system="dgx-h100", prompt=256, output=64),
    ):
        try:
            result = price()
        except CommodelError:  # a layout or replica the model cannot take: refused, not priced
            continue
        numbers = [v for v in result.values() if isinstance(v, float)]
        assert all(np.isfinite(v) and v >= 0 for v in numbers), result


@pytest.mark.parametrize(
    ("changes", "context"),
    [
        ({}, 8192),  # Llama 3's own checkpoint: max_position_embeddings
        ({"rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768}}, 131072),  # YaRN
        ({"rope_scaling": {"factor": 0.5, "original_max_position_embeddings": 8192}}, 8192),  # shorter
        ({"rope_scaling": {"factor": "4", "original_max_position_embeddings": 32768}}, 8192),  # not a number
        ({"max_position_embeddings": None}, None),  # not stated: no limit
    ],
)
def test_a_configs_context_is_its_positions_or_the_longer_rope_scaling_one(tmp_path, changes, context):
    assert load_model_file(_config(tmp_path, **changes)).context == context
