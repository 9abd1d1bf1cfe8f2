from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.support.emulator import EmulatorThread
from webhook.kube.client import Kube, api_client_for


@pytest.fixture
def emulator() -> Iterator[EmulatorThread]:
    served = EmulatorThread()
    served.url = served.start()
    try:
        yield served
    finally:
        served.stop()


def kube_for(url: str) -> Kube:
    configuration = client.Configuration()
    configuration.host = url
    return Kube(api_client_for(configuration), timeout=5.0)


@pytest.fixture
def kube(emulator: EmulatorThread) -> Kube:
    """A client of the emulator, for tests playing the other controllers of the cluster."""
    return kube_for(emulator.url)
