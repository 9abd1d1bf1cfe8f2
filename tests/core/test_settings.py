"""Settings are parsed once per distinct set of annotations and found again by value."""

from __future__ import annotations

import pytest

from webhook.core import contract
from webhook.core.errors import InvalidSetting
from webhook.core.frameworks import FRAMEWORKS
from webhook.core.job.settings import SETTING_KEYS, Settings, _parse, read_settings


class Recording(dict[str, str]):
    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.read.add(key)
        return super().get(key, default)


def test_settings_are_found_again_only_by_the_annotations_they_are_read_from() -> None:
    annotations = Recording()

    _parse(annotations, FRAMEWORKS["pytorch"])

    assert annotations.read == set(SETTING_KEYS)


def test_pods_with_the_same_annotations_get_the_same_settings() -> None:
    first = read_settings({contract.GPUS: "8", contract.SHM_SIZE: "16Gi"}, FRAMEWORKS["pytorch"])
    second = read_settings(
        {contract.GPUS: "8", contract.SHM_SIZE: "16Gi", contract.TOPOLOGY: "{}"},
        FRAMEWORKS["pytorch"],
    )

    assert second is first
    assert (second.gpus, second.shm_size) == (8, "16Gi")


def test_a_changed_value_is_read_afresh() -> None:
    read_settings({contract.GPUS: "8"}, FRAMEWORKS["pytorch"])

    assert read_settings({contract.GPUS: "4"}, FRAMEWORKS["pytorch"]) == Settings(gpus=4)
    assert read_settings({}, FRAMEWORKS["pytorch"]) == Settings()


def test_the_framework_is_part_of_what_is_found_again() -> None:
    elastic = {contract.ELASTIC: "2:4"}
    assert read_settings(elastic, FRAMEWORKS["pytorch"]).elastic == (2, 4)

    with pytest.raises(
        InvalidSetting, match="elastic training is not available for tensorflow jobs"
    ):
        read_settings(elastic, FRAMEWORKS["tensorflow"])


def test_an_invalid_value_is_refused_each_time_it_comes() -> None:
    for _ in range(2):
        with pytest.raises(InvalidSetting) as refused:
            read_settings({contract.GPUS: "eight"}, FRAMEWORKS["pytorch"])
        assert str(refused.value) == (
            "trainhook.io/gpus: invalid value 'eight': a whole number, 0 or more"
        )
