import numpy as np
import pytest

from commodel.errors import CommodelError
from commodel.units import KNOWN_UNITS, SI_UNITS, _registry, format_bytes, parse_quantity, parse_sizes


def test_doubling_range_matches_nccl_tests():
    sizes = parse_sizes("8B:8GiB")
    assert sizes[0] == 8 and sizes[-1] == 8 * 2**30
    assert len(sizes) == 31
    assert np.all(sizes[1:] / sizes[:-1] == 2)


def test_list_and_single_sizes():
    assert parse_sizes("4096").tolist() == [4096]
    assert parse_sizes("8,1MiB,1GiB").tolist() == [8, 2**20, 2**30]
    assert parse_sizes("1 kB").tolist() == [1000]
    assert parse_sizes("8:128M").tolist()[-1] == 128 * 2**20  # nccl-tests shorthand is binary


@pytest.mark.parametrize("bad", ["12XB", "0", "-4", "1.5", "3 s", "", "8GiB:8B"])
def test_malformed_sizes_are_rejected(bad):
    with pytest.raises(CommodelError):
        parse_sizes(bad)


def test_quantities_convert_to_si():
    assert parse_quantity("400 Gbit/s", "bandwidth") == 50e9
    assert parse_quantity("3.35 TB/s", "bandwidth") == pytest.approx(3.35e12)
    assert parse_quantity("0.6 us", "time") == pytest.approx(0.6e-6)
    assert parse_quantity("989 TFLOP/s", "flop_rate") == pytest.approx(989e12)
    assert parse_quantity("80 GB", "bytes") == 80e9


@pytest.mark.parametrize(("text", "kind"), [("3 TW", "bandwidth"), ("5 GB", "time"), ("fast", "power")])
def test_wrong_units_name_the_kind(text, kind):
    with pytest.raises(CommodelError, match="expected a"):
        parse_quantity(text, kind)


def test_format_bytes():
    assert format_bytes(2**30) == "1 GiB"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(8) == "8 B"


@pytest.mark.parametrize(
    "kind, unit", [(kind, unit) for kind, units in KNOWN_UNITS.items() for unit in units]
)
def test_the_units_read_without_pint_are_pints_own(kind, unit):
    """A record's or a size's unit is read from a table, not pint (whose import costs 0.2 s): each
    entry is what pint converts it to."""
    assert KNOWN_UNITS[kind][unit] == pytest.approx(
        _registry().Quantity(1.0, unit).to(SI_UNITS[kind]).magnitude, rel=1e-15
    )
    assert parse_quantity(f"3 {unit}", kind) == 3 * KNOWN_UNITS[kind][unit]
