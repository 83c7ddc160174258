"""Megatron-Core's pipeline layout strings: parsed as it parses them, checked as it checks them, and
priced as the first, middle and last stages they give."""

import numpy as np
import pytest

from commodel.errors import CommodelError
from commodel.pricing.run import train
from commodel.pricing.table import job_columns
from commodel.pricing.training import price_training
from commodel.pricing.training_job import training_job
from commodel.workloads.parallel.pipeline_layout import StageSplit, layout_chunks, stage_split

#: DeepSeek-V3 (61 layers) on 256 GB200, as Megatron-Bridge's pp 4 x vp 4 recipe runs it.
DSV3 = dict(
    model="deepseek-v3",
    system="gb200-nvl72",
    gpus=256,
    pp=4,
    ep=64,
    etp=1,
    global_batch=4096,
    recompute="full",
)


def test_a_layout_unrolls_its_repetitions_as_megatron_core_does():
    assert layout_chunks("Et*2|(tt|)*2,m|L") == ["Ett", "tt", "tt", "m", "L"]
    assert len(layout_chunks("Et*4|(t*4|)*14tmL")) == 16


@pytest.mark.parametrize(
    ("text", "pp", "split"),
    [
        (
            "Et*4|(t*4|)*14tmL",
            4,
            StageSplit(vpp=4, first=16, middle=16, last=13, mtp=1),
        ),  # chunk i on rank i mod pp
        ("Et|(tt|)*30mL", 8, StageSplit(vpp=4, first=7, middle=8, last=6, mtp=1)),
        ("Et*8|(t*8|)*6t*5mL", 2, StageSplit(vpp=4, first=32, middle=0, last=29, mtp=1)),
        ("Et*61L", 1, StageSplit(vpp=1, first=0, middle=0, last=0, mtp=0)),
    ],
)
def test_a_layout_gives_the_layers_of_each_stage(text, pp, split):
    assert stage_split(text, pp, 61) == split


@pytest.mark.parametrize(
    ("text", "pp", "message"),
    [
        ("Et*4|(t*4|)*14tmL", 3, "its 16 chunks do not divide into pp stages"),
        ("Et*4|(t*4|)*14L", 4, "it holds 60 decoder layers, the model 61"),
        ("t*4|E(t*4|)*14tmL", 4, "the embedding must come first"),
        ("Et*4|(t*4|)*13t*5m|L", 4, "in the last chunk"),
        ("Et*4|(t*4|)*14mtL", 4, "after every decoder layer"),
        ("Et*4|t*5|t*3|(t*4|)*12tmL", 4, "its middle stages hold different numbers of layers"),
        ("Et*4|(t*4|)*14txL", 4, "cannot read 'x'"),
    ],
)
def test_a_layout_megatron_core_would_refuse_or_the_model_cannot_price_says_why(text, pp, message):
    with pytest.raises(CommodelError, match=message.replace("(", r"\(")):
        stage_split(text, pp, 61)


def test_a_job_with_a_layout_takes_its_split_and_refuses_a_second_one():
    """The layout sets vpp, the stages' layers and the prediction module; Megatron-Bridge's layout
    (16 layers on three stages, 13 and the module on the last) is the even split of 61 layers with the
    module on the last stage, so both price the same step."""
    job = train(**DSV3, pipeline_layout="Et*4|(t*4|)*14tmL")
    assert (job["layout"]["vpp"], job["stage_layers"]) == (4, "16,16,16,13")
    even = train(**DSV3, vpp=4, mtp_layers=1)
    assert even["stage_layers"] == "16,16,16,13" and job["step_time_s"] == pytest.approx(even["step_time_s"])
    assert training_job(**DSV3, pipeline_layout="Et*4|(t*4|)*14tmL").vpp == 4
    with pytest.raises(CommodelError, match="--pp: Input should be greater than or equal to 1"):
        train(**DSV3 | {"pp": 0}, pipeline_layout="Et*4|(t*4|)*14tmL")  # pp's own check, not the layout's
    for clash in ({"last_stage_layers": 13}, {"vpp": 2}, {"mtp_layers": 2}, {"ends_as_layers": True}):
        with pytest.raises(CommodelError, match="a pipeline layout states the pipeline split itself"):
            train(**DSV3, pipeline_layout="Et*4|(t*4|)*14tmL", **clash)


def test_a_sweep_that_varies_the_layout_prices_each_row_as_its_job():
    """A study may vary the layout as a column; each row must be priced as the job that states it."""
    layouts = ["", "Et*4|(t*4|)*14tmL", "Et*16|t*16|t*16|t*13mL"]
    columns = job_columns(training_job(**DSV3), len(layouts))
    columns["pipeline_layout"] = np.array(layouts, dtype=object)
    table = price_training(columns)
    alone = [train(**DSV3, pipeline_layout=text) for text in layouts]
    assert list(table["stage_layers"]) == [job["stage_layers"] for job in alone]
    assert table["tokens_per_s"] == pytest.approx([job["tokens_per_s"] for job in alone])
