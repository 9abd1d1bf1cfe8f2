"""The profiles this process knows: the reference ones, and those the server read at start.

`use_profiles` is called once, before the first admission (by `trainhook serve` from its
`--fabric-profiles` file, by `trainhook render` from its own); a profile of a reference profile's
name takes its place.
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook.core import contract
from webhook.core.errors import InvalidSetting
from webhook.core.fabrics.reference import REFERENCE
from webhook.core.fabrics.schema import Profile, parse_profiles

BUILT_IN: dict[str, Profile] = parse_profiles(REFERENCE, "reference profiles")
_known: dict[str, Profile] = dict(BUILT_IN)
_version: list[int] = [0]


def use_profiles(custom: Mapping[str, Profile]) -> None:
    """Know the reference profiles and `custom` (which wins where a name is in both)."""
    _known.clear()
    _known.update(BUILT_IN)
    _known.update(custom)
    _version[0] += 1


def profile_named(name: str) -> Profile | None:
    return _known.get(name)


def profile_for(name: str) -> Profile:
    """The profile `name`; raises InvalidSetting naming the known ones."""
    profile = _known.get(name)
    if profile is None:
        raise InvalidSetting(
            contract.FABRIC, name, f"no such fabric profile; the profiles are {', '.join(names())}"
        )
    return profile


def names() -> list[str]:
    return sorted(_known)


def version() -> int:
    """Changes whenever the known profiles do: what was read with others is read again."""
    return _version[0]
