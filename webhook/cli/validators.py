"""Argument types shared by every subcommand: each turns a string into a value or says why not."""

from __future__ import annotations

import argparse
import os
import re
import sys

from webhook.logs import LEVELS

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def positive_int(value: str) -> int:
    """A whole number >= 1."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number >= 1")
    return number


def positive_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"invalid value {value!r}: a number of seconds above 0")
    return seconds


def seconds_up_to_a_minute(value: str) -> float:
    """A number of seconds, 0 included (at most a minute)."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 60:
        raise argparse.ArgumentTypeError(
            f"invalid value {value!r}: a number of seconds from 0 to 60"
        )
    return seconds


def whole_seconds(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"invalid value {value!r}: a whole number of seconds >= 1")
    return int(value)


def positive_days(value: str) -> int:
    try:
        days = int(value)
    except ValueError:
        days = 0
    if days < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive number of days")
    return days


def log_level(value: str) -> str:
    if value.lower() not in LEVELS:
        raise argparse.ArgumentTypeError(f"invalid value {value!r}: one of {', '.join(LEVELS)}")
    return value.lower()


def dns_label(value: str) -> str:
    if not DNS_LABEL.match(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a DNS label: lower-case letters, digits and '-', "
            "at most 63, starting and ending with a letter or digit"
        )
    return value


def scheduler_name(value: str) -> str:
    """A pod's schedulerName: Kubernetes requires a DNS-1123 subdomain."""
    if not DNS_SUBDOMAIN.match(value) or len(value) > 253:
        raise argparse.ArgumentTypeError(
            f"invalid value {value!r}: a scheduler name (a DNS-1123 subdomain, e.g. "
            "scheduler-plugins-scheduler)"
        )
    return value


def boolean_env(command: str, variable: str, *, default: bool) -> bool:
    """A boolean environment variable; exits with status 2 and one line when it is not one."""
    value = os.environ.get(variable)
    if value is None or value == "":
        return default
    if value.lower() in TRUE:
        return True
    if value.lower() in FALSE:
        return False
    print(
        f"trainhook {command}: {variable}={value!r} is not a boolean (true or false)",
        file=sys.stderr,
    )
    raise SystemExit(2)
