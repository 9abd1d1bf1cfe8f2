"""Reading one trainhook.io/ annotation's value: names, label keys, quantities, numbers and
choices, each refused in one line that names the key, the value and what is allowed."""

from __future__ import annotations

import re

from webhook.core import contract
from webhook.core.errors import InvalidSetting
from webhook.core.limits import MAX_INT32, whole_number

DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
QUANTITY = re.compile(
    r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)
RESOURCE_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
DNS_1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
BOOLEANS = ("true", "false")


def object_name(key: str, value: str | None) -> str | None:
    if value is not None and not (len(value) <= 253 and DNS_1123_SUBDOMAIN.match(value)):
        raise InvalidSetting(key, value, "an object name (a DNS-1123 subdomain)")
    return value


def label_key(key: str, value: str | None) -> str | None:
    """A Kubernetes label key: an optional DNS subdomain prefix and '/', then a name."""
    if value is None:
        return None
    prefix, slash, name = value.rpartition("/")
    if (
        len(name) > 63  # lengths first: a pattern's cost grows with the value
        or not LABEL_NAME.match(name)
        or (slash and (len(prefix) > 253 or not DNS_1123_SUBDOMAIN.match(prefix)))
    ):
        raise InvalidSetting(
            key,
            value,
            "a node label key such as topology.kubernetes.io/zone or cloud.example.com/rack",
        )
    return value


def allowed_list(values: tuple[str, ...]) -> str:
    return "one of " + ", ".join(values)


def choice(key: str, value: str | None, allowed: tuple[str, ...]) -> str | None:
    if value is None or value in allowed:
        return value
    raise InvalidSetting(key, value, allowed_list(allowed))


def boolean(key: str, value: str | None) -> bool | None:
    chosen = choice(key, value, BOOLEANS)
    return None if chosen is None else chosen == "true"


def integer(key: str, value: str | None, low: int, high: int | None, allowed: str) -> int | None:
    if value is None:
        return None
    number = whole_number(value, MAX_INT32 if high is None else high)
    if number is None or number < low:
        raise InvalidSetting(key, value, allowed)
    return number


def quantity(key: str, value: str | None) -> str | None:
    if value is None:
        return None
    if not QUANTITY.match(value) or not any(c in "123456789" for c in value.split("e")[0]):
        raise InvalidSetting(key, value, "a positive Kubernetes quantity such as 1Gi or 512Mi")
    return value


def placement_tier(value: str | None) -> str | None:
    if value is None:
        return None
    number = whole_number(value)
    if number is not None:
        if number < 1:
            raise InvalidSetting(contract.PLACEMENT_TIER, value, "a tier from 1, or a tier name")
        return str(number)
    if not (len(value) <= 253 and DNS_1123_SUBDOMAIN.match(value)):
        raise InvalidSetting(
            contract.PLACEMENT_TIER,
            value,
            "a HyperNode tier: a whole number from 1, or a tier name (a DNS-1123 subdomain)",
        )
    return value


def elastic_range(value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    allowed = "min:max nodes, whole numbers with 1 <= min <= max, e.g. 2:4"
    low_text, sep, high_text = value.partition(":")
    low, high = whole_number(low_text), whole_number(high_text)
    if not sep or low is None or high is None or not 1 <= low <= high:
        raise InvalidSetting(contract.ELASTIC, value, allowed)
    return low, high
