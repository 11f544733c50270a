import pytest

from gpulint.hardware import SPARSE_TO_DENSE, table
from gpulint.runtime.roofline import RooflineRefused, lookup, render, table_name_for


def test_h200_bf16_from_the_table():
    roof = lookup("H200", "bf16")
    assert roof.peak_tflops == 989
    assert roof.memory_tbps == 4.8
    assert "datasheet" in roof.source
    assert roof.ridge_flop_per_byte == pytest.approx(989 / 4.8)
    assert not roof.peak_is_estimate
    text = render(roof)
    assert "989.0 TFLOP/s" in text and "4.8 TB/s" in text and "source" in text


@pytest.mark.parametrize(
    "reported, name",
    [("NVIDIA H200", "H200"), ("H200 SXM", "H200"), ("NVIDIA H100 PCIe", "H100 PCIe"),
     ("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA H100 NVL", None), ("Tesla T4", None)],
)  # fmt: skip
def test_driver_names_match_exactly_or_not_at_all(reported, name):
    assert table_name_for(reported) == name


def test_the_same_table_as_the_targets():
    for dtype, peak in table().gpu("H200").peak_tflops.items():
        assert lookup("NVIDIA H200", dtype).peak_tflops == peak


def test_unknown_device_is_refused_with_the_known_ones():
    with pytest.raises(RooflineRefused) as exc:
        lookup("NVIDIA H100 NVL", "bf16")
    assert "H200" in str(exc.value) and "--peak" in str(exc.value)


def test_unknown_dtype_is_refused():
    with pytest.raises(RooflineRefused, match="unknown dtype 'fp4'"):
        lookup("H200", "fp4")


def test_unpublished_peak_is_refused_not_guessed():
    with pytest.raises(RooflineRefused, match="unpublished estimate"):
        lookup("GB10", "bf16")
    with pytest.raises(RooflineRefused, match="not in the table"):
        lookup("B200", "fp32")


def test_estimates_are_flagged():
    roof = lookup("RTX PRO 6000", "bf16")
    assert roof.peak_is_estimate
    assert "ESTIMATE" in render(roof)


def test_user_peak_needs_a_source():
    with pytest.raises(ValueError, match="--source"):
        lookup("GB10", "bf16", peak=125.0)
    with pytest.raises(ValueError, match="positive"):
        lookup("GB10", "bf16", peak=-1.0, source="x")


def test_user_peak_with_source_is_used_and_labelled():
    roof = lookup("GB10", "bf16", peak=212.9, source="community measurement, 2026")
    assert roof.peak_tflops == 212.9 and roof.user_supplied
    assert roof.source.startswith("user: ")
    assert roof.memory_tbps == 0.273  # bandwidth still from the table
    custom = lookup("Mystery GPU", "fp4", peak=100.0, source="vendor sheet", bandwidth=1.0)
    assert custom.ridge_flop_per_byte == 100.0


def test_a_sparse_figure_passed_as_peak_is_refused():
    with pytest.raises(RooflineRefused, match="2:4-sparse"):
        lookup("H200", "bf16", peak=1979.0, source="marketing sheet")


def test_dense_ladder_tripwire():
    """Each GPU's peaks step by 2x (tf32 -> bf16 -> fp8); a sparse figure entered as dense
    would break the ladder. fp16 equals bf16."""
    for gpu in table().gpus.values():
        p = gpu.peak_tflops
        if "bf16" in p and "fp16" in p:
            assert p["bf16"] == p["fp16"], gpu.name
        if "bf16" in p and "fp8" in p:
            assert p["fp8"] == pytest.approx(SPARSE_TO_DENSE * p["bf16"], rel=0.01), gpu.name
        if "bf16" in p and "tf32" in p:
            assert p["bf16"] == pytest.approx(SPARSE_TO_DENSE * p["tf32"], rel=0.03), gpu.name
        if "fp32" in p and "tf32" in p:
            assert p["fp32"] < p["tf32"], gpu.name
