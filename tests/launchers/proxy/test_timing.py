"""Round metrics from per-replay times: the measured compute, the exposed communication, the
collectives alone, scaling of a layer subset."""

from __future__ import annotations

import pytest

from launchers.proxy.geometry import Geometry
from launchers.proxy.shapes import Shape, load_shape
from launchers.proxy.timing import GRAPHS, ROUND_METRICS, summarize


def geo(name: str = "tiny", **kw: int) -> Geometry:
    return Geometry(Shape.from_config(load_shape(name), name), **kw)


def samples(pass_ms: float, compute: float, head: float = 1.0, compute_head: float = 0.8,
            allreduce: float = 2.0, allgather: float = 0.5) -> dict[str, list[float]]:
    return {"pass": [pass_ms * f for f in (0.9, 1.0, 1.1)], "compute": [compute] * 3,
            "head": [head] * 3, "compute_head": [compute_head] * 3,
            "allreduce": [allreduce] * 3, "allgather": [allgather] * 3}


def test_the_six_graphs() -> None:
    assert set(GRAPHS) == set(samples(1.0, 1.0))


def test_summarize_unscaled() -> None:
    g = geo(batch=2, draft_tokens=4)  # tiny: 4 layers, 8 all-reduces
    m = summarize(samples(10.0, 8.5), g, accept_length=3.0, draft_ms=2.0, draft_steps=3,
                  bandwidth=1e12)
    assert m["verify_ms"] == pytest.approx(10.0)
    assert m["verify_p10_ms"] == pytest.approx(9.2) and m["verify_p90_ms"] == pytest.approx(10.8)
    assert m["compute_ms"] == pytest.approx(8.5)  # measured, not verify - comm alone
    assert m["exposed_comm_ms"] == pytest.approx(1.5)
    assert m["exposed_comm_share"] == pytest.approx(0.15)
    assert m["exposed_per_allreduce_us"] == pytest.approx((1.5 - 0.5) / 8 * 1000)
    assert m["comm_alone_ms"] == pytest.approx(2.5)
    assert m["comm_alone_per_allreduce_us"] == pytest.approx(2.0 / 8 * 1000)
    assert m["allgather_alone_ms"] == pytest.approx(0.5)
    assert m["est_tok_s"] == pytest.approx(2 * 3.0 / (12.0 / 1000))
    assert m["assumed_draft_ms"] == 2.0 and m["draft_ms_source"] == "given"
    assert m["bytes_per_pass"] == g.bytes_per_pass()["total"]
    assert m["hbm_floor_ms"] == pytest.approx(m["bytes_per_pass"] / 1e12 * 1000)
    assert m["scaled"] is False
    for gone in ("allreduce_ms", "allreduce_share", "per_allreduce_us"):
        assert gone not in m


def test_summarize_scales_layers_not_the_head() -> None:
    g = geo(layers=1, draft_tokens=4)  # 1 of 4 layers
    m = summarize(samples(3.0, 2.5, head=1.0, compute_head=0.9), g, accept_length=9.0,
                  draft_ms=None, draft_steps=2, bandwidth=1e12)
    assert m["scaled"] is True
    assert m["verify_ms"] == pytest.approx(1.0 + 2.0 * 4)
    assert m["compute_ms"] == pytest.approx(0.9 + 1.6 * 4)
    assert m["exposed_comm_ms"] == pytest.approx(9.0 - 7.3)
    layer = (m["verify_ms"] - 1.0) / 4
    assert m["assumed_draft_ms"] == pytest.approx(2 * (layer + 1.0))
    assert m["draft_ms_source"].startswith("estimated: 2 steps")
    assert m["est_accept_length"] == 4.0  # at most the draft tokens


def test_exposed_can_be_below_zero_and_is_kept() -> None:
    """One rank: the collectives cost nothing, the two passes differ by noise only; the sign
    is kept rather than hidden."""
    m = summarize(samples(10.0, 10.2), geo(), accept_length=3.0, draft_ms=1.0, draft_steps=1,
                  bandwidth=1e12)
    assert m["exposed_comm_ms"] == pytest.approx(-0.2)


def test_round_metrics_name_every_number_and_the_accept_length_says_its_source() -> None:
    m = summarize(samples(10.0, 8.5), geo(draft_tokens=4), accept_length=2.5, draft_ms=1.0,
                  draft_steps=1, bandwidth=1e12, accept_source="measured")
    numbers = {k for k, v in m.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert numbers == set(ROUND_METRICS)
    assert (m["est_accept_length"], m["accept_length_source"]) == (2.5, "measured")
    assumed = summarize(samples(10.0, 8.5), geo(), accept_length=2.5, draft_ms=1.0,
                        draft_steps=1, bandwidth=1e12)
    assert assumed["accept_length_source"] == "assumed"
