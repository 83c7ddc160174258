import shutil
from pathlib import Path

import pytest

from commodel.errors import CommodelError
from commodel.hardware import cluster, default_db, load_database
from commodel.resources import resource_dir

GPUS = [
    "a40",
    "a100-sxm-80gb",
    "h100-sxm",
    "h200-sxm",
    "b200-sxm",
    "b300-sxm",
    "mi250x",
    "mi250x-gcd",
    "mi300x",
]
SYSTEMS = [
    "dgx-a100",
    "dgx-h100",
    "hgx-h200",
    "dgx-b200",
    "dgx-b300",
    "mi300x-8",
    "frontier-node",
    "a40-pcie-8",
]
LINK_KINDS = {"nvlink", "xgmi", "pcie", "infiniband", "slingshot", "roce", "ethernet"}


def test_required_records_exist():
    db = default_db()
    assert set(GPUS) <= set(db.gpus)
    assert set(SYSTEMS) <= set(db.systems)
    assert {link.kind for link in db.links.values()} >= LINK_KINDS
    assert {
        "pcie4",
        "pcie5",
        "pcie6",
        "nvlink3",
        "nvlink4",
        "nvlink5",
        "ib-hdr",
        "ib-ndr",
        "ib-xdr",
    } <= set(db.links)


def test_vendor_numbers_match_spec_sheet():
    db = default_db()
    h100 = db.gpu("h100-sxm")
    assert h100.peak_flops["bf16"].value == pytest.approx(989e12)
    assert h100.memory_bandwidth.value == pytest.approx(3.35e12)
    assert h100.compute_units.value == 132
    nvlink4 = db.link("nvlink4")
    assert nvlink4.in_network_reduction and not db.link("nvlink3").in_network_reduction
    assert db.system("dgx-h100").scale_up.links_per_gpu.value * nvlink4.bandwidth.value == pytest.approx(
        450e9
    )
    assert db.link("ib-ndr").bandwidth.value == pytest.approx(50e9)


def test_every_number_has_a_source():
    db = default_db()
    for table in (db.gpus, db.links, db.systems):
        for record in table.values():
            for field in _sourced(record.model_dump()):
                assert field["source"].strip()


def _sourced(data):
    for value in data.values():
        if isinstance(value, dict) and "source" in value:
            yield value
        elif isinstance(value, dict):
            yield from _sourced(value)


def test_cluster_counts_gpus():
    c = cluster("frontier-node", nodes=4)
    assert c.total_gpus == 32 and c.gpu.compute_units.value == 110


def test_unknown_system_suggests_a_name():
    with pytest.raises(CommodelError, match="did you mean 'dgx-h100'"):
        cluster("dgx-h10")


@pytest.fixture
def db_copy(tmp_path: Path) -> Path:
    root = tmp_path / "hw"
    shutil.copytree(resource_dir("hardware_db"), root)
    return root


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(
    ("file", "old", "new", "message"),
    [
        (
            "gpus/h100-sxm.toml",
            "tdp =",
            "tdpp =",
            r"h100-sxm.toml: unknown key 'tdpp' \(did you mean 'tdp'\?\)",
        ),
        ("gpus/h100-sxm.toml", "tdp =", "tdpp =", r"h100-sxm.toml: .*; missing key 'tdp'"),
        (
            "gpus/h100-sxm-96gb.toml",
            'power_limit = { value = "500 W"',
            'power_limit = { value = "800 W"',
            r"h100-sxm-96gb.toml: field 'power_limit': 800 W is above the TDP 700 W: a limit lies above the idle power 142 W and at most the TDP 700 W",
        ),
        (
            "gpus/mi300x.toml",
            "gemm_tiles = { value = [[256, 256], ",
            "gemm_tiles = { value = [[256, 250], ",
            r"mi300x.toml: field 'gemm_tiles.value': .*tile sides must be positive multiples of 16",
        ),
        (
            "gpus/mi300x.toml",
            "gemm_tiles = { value = [[256, 256], [256, 224], [224, 256], [256, 192], [192, 256], [256, 160], [160, 256], [256, 128], [128, 256]], source = ",
            "gemm_tiles = [[256, 256]]\nx = { source = ",
            r"mi300x.toml: field 'gemm_tiles': .*expected a table \{value = \[\[rows, cols\], ...\], source",
        ),
        (
            "gpus/mi300x.toml",
            "gemm_tiles = { value = [[256, 256], [256, 224], [224, 256], [256, 192], [192, 256], [256, 160], [160, 256], [256, 128], [128, 256]], ",
            "gemm_tiles = { value = [], ",
            r"mi300x.toml: field 'gemm_tiles.value': .*needs at least one tile",
        ),
        (
            "gpus/h100-sxm.toml",
            '"3.35 TB/s"',
            '"3.35 TW"',
            r"field 'memory_bandwidth': cannot read '3.35 TW'",
        ),
        (
            "links/nvlink3.toml",
            '"25 GB/s"',
            '"-25 GB/s"',
            r"nvlink3.toml: field 'bandwidth.value': must be positive",
        ),
        (
            "links/ib-hdr.toml",
            '"200 Gbit/s"',
            '"0 Gbit/s"',
            r"ib-hdr.toml: field 'bandwidth.value': must be positive",
        ),
        (
            "systems/dgx-a100.toml",
            'gpu = "a100-sxm-80gb"',
            'gpu = "a100-sxm"',
            r"field 'gpu': unknown gpu 'a100-sxm'",
        ),
        (
            "links/pcie4.toml",
            "efficiency = { value = 0.848",
            "efficiency = { value = 1.5",
            r"must be at most 1",
        ),
        (
            "gpus/a40.toml",
            'source = "elprocus.com"',
            'source = ""',
            r"a40.toml: field 'compute_units.source'",
        ),
        (  # a generation NCCL's tables commodel carries do not cover is refused, not priced as another
            "gpus/h100-sxm.toml",
            'architecture = "hopper"',
            'architecture = "rubin"',
            r"h100-sxm.toml: field '\(top level\)': unknown architecture 'rubin' for an nvidia GPU; known: volta",
        ),
        (
            "gpus/mi300x.toml",
            'architecture = "cdna3"',
            'architecture = "cdna4"',
            r"mi300x.toml: .*'cdna4'.*\(did you mean 'cdna3'\?\)",
        ),
    ],
)
def test_strict_loading_names_file_and_field(db_copy, file, old, new, message):
    _edit(db_copy / file, old, new)
    with pytest.raises(CommodelError, match=message):
        load_database(db_copy)


def test_invalid_toml_names_the_file(db_copy):
    (db_copy / "gpus" / "broken.toml").write_text("tdp = {")
    with pytest.raises(CommodelError, match=r"broken\.toml: not valid TOML"):
        load_database(db_copy)


@pytest.mark.parametrize("system", sorted(default_db().systems))
def test_every_system_trains_and_serves_in_every_precision_its_gpu_has(system):
    """A record is usable end to end: one node (at least 8 GPUs) trains Llama 3 8B and one GPU serves it in each
    recipe whose tensor cores the GPU has (a precision with a peak but no efficiency, or a training
    step needing a peak the record lacks, fails here)."""
    from commodel.compute.precision import RECIPES, SERVING_RECIPES
    from commodel.pricing.run import serve, train

    db = default_db()
    node = db.system(system)
    gpu = db.gpu(node.gpu)
    arch_ok = {"mxfp8": gpu.architecture == "blackwell"}
    for dtype, recipe in RECIPES.items():
        if recipe.gemm in gpu.peak_flops and arch_ok.get(dtype, True):
            gpus = max(int(node.gpus_per_node.value), 8)  # at least 8 GPUs to shard the states over
            result = train(model="llama3-8b", system=system, gpus=gpus, dtype=dtype, zero=3, recompute="full")
            assert 0 < result["mfu"] < 1, (system, dtype)
    for dtype, recipe in SERVING_RECIPES.items():
        if recipe.gemm in gpu.peak_flops:
            assert serve(model="llama3-8b", system=system, dtype=dtype)["output_tokens_per_s"] > 0


def test_a_missing_precision_names_the_ones_the_gpu_has():
    from commodel.pricing.run import serve, train

    with pytest.raises(CommodelError, match=r"no fp8 tensor cores; use bf16$"):
        serve(model="llama3-8b", system="dgx-a100", dtype="fp8")
    with pytest.raises(CommodelError, match=r"no fp8 tensor cores; use bf16, fp16$"):
        train(model="llama3-8b", system="dgx-a100", gpus=8, dtype="fp8")


def test_the_hardware_cache_is_rebuilt_when_the_schema_that_reads_it_changes(tmp_path, monkeypatch):
    """The cached records hold the schema's defaults (an x86 host's op_dispatch is one): a commodel
    whose schema changed must not read records its predecessor cached from the same TOML files."""
    from pathlib import Path

    import commodel.hardware.schema as schema_module
    from commodel.hardware.loader import load_database
    from commodel.resources import resource_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    load_database(resource_dir("hardware_db"))
    changed = tmp_path / "schema.py"
    changed.write_text(Path(schema_module.__file__).read_text() + "\n# a default changed\n")
    monkeypatch.setattr(schema_module, "__file__", str(changed))
    load_database(resource_dir("hardware_db"))
    assert len(list((tmp_path / "commodel").glob("hardware-*.json"))) == 2


def test_the_cache_folder_keeps_the_most_recently_used_files_of_each_kind(tmp_path):
    """Every change to the records or the schema writes a cache file under a new digest: the folder
    keeps the KEPT_CACHE_FILES most recently used of a kind (the one just used among them), not all."""
    import os

    from commodel.io import KEPT_CACHE_FILES, prune_cache

    files = [tmp_path / f"hardware-{i:02d}.json" for i in range(KEPT_CACHE_FILES + 5)]
    for i, path in enumerate(files):
        path.write_text("{}")
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    other = tmp_path / "validation-00.parquet"
    other.write_text("")
    prune_cache(files[0])  # the oldest, used now
    kept = sorted(p.name for p in tmp_path.glob("hardware-*.json"))
    assert len(kept) == KEPT_CACHE_FILES and files[0].name in kept and files[-1].name in kept
    assert files[1].name not in kept and other.exists()
