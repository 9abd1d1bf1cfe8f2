"""Quantities added up as Kubernetes reads them, written back the way people write them."""

from fractions import Fraction

import pytest

from webhook.core.shape.requests import parse_quantity, pod_requests, sum_requests


@pytest.mark.parametrize(
    ("written", "amount"),
    [
        ("2", Fraction(2)),
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        ("16Gi", Fraction(16 * 2**30)),
        ("4G", Fraction(4 * 10**9)),
        ("1e3", Fraction(1000)),
        ("250n", Fraction(250, 10**9)),
        (8, Fraction(8)),
    ],
)
def test_a_quantity_is_read_exactly(written: object, amount: Fraction) -> None:
    assert parse_quantity(written) == amount


@pytest.mark.parametrize("written", ["lots", "1Gb", "", True])
def test_what_is_not_a_quantity_is_refused(written: object) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(written)


def test_sums_keep_cores_plain_or_in_millis_and_bytes_in_binary_units() -> None:
    pod = pod_requests(
        {
            "containers": [
                {"resources": {"requests": {"cpu": "1500m", "memory": "3Gi"}}},
                {
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "4G", "hugepages-2Mi": "1Gi"}
                    }
                },
            ]
        }
    )
    assert sum_requests([(pod, 2)]) == {
        "cpu": "3200m",
        "hugepages-2Mi": "2Gi",
        "memory": "14103956Ki",  # 2 x (3Gi + 4G) bytes
    }
    assert sum_requests([(pod_requests({"containers": [{}]}), 3)]) == {}


def test_pod_level_requests_replace_the_containers_sum_and_overhead_is_added() -> None:
    spec = {
        "resources": {"requests": {"cpu": "4"}},
        "overhead": {"cpu": "250m"},
        "containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
    }
    assert sum_requests([(pod_requests(spec), 1)]) == {"cpu": "4250m", "memory": "1Gi"}
