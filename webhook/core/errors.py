"""Errors the core raises; the admission server maps them to status codes."""

from webhook.core.limits import shown


class TrainhookError(Exception):
    """Input Trainhook cannot act on. The message is shown to the user as it is."""

    status_code = 400


class InvalidSetting(TrainhookError):
    """A trainhook.io/ label or annotation holds a value outside what is allowed."""

    def __init__(self, key: str, value: object, allowed: str) -> None:
        self.key = key
        self.value = value
        self.allowed = allowed
        super().__init__(f"{key}: invalid value {shown(value)}: {allowed}")


class Refused(TrainhookError):
    """A well-formed object that Trainhook refuses by policy (e.g. a non-Indexed Job)."""

    status_code = 403


class InvalidName(TrainhookError):
    """A name Trainhook would build from the user's names is not one Kubernetes accepts."""
