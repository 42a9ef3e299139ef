"""The asyncio client's errors reach the components as the synchronous client's ApiException, the one
type they catch, with the apiserver's message intact."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes.aio.client.rest import ApiException as AsyncApiException
from kubernetes.client.exceptions import ApiException

from raftset.operator.io.kube import KubeClient, api_error_message

pytestmark = pytest.mark.unit


def _rejected(body: Any) -> AsyncApiException:
    return AsyncApiException(status=422, reason="Unprocessable Entity", body=body)


def _raised(error: Exception) -> BaseException:
    async def failing() -> None:
        raise error

    async def scenario() -> BaseException:
        kube = KubeClient(api=None, dynamic=None)  # type: ignore[arg-type]  # _call touches neither
        with pytest.raises(BaseException) as caught:
            await kube._call(failing())
        return caught.value

    return asyncio.run(scenario())


def test_an_api_error_becomes_the_synchronous_clients_type_with_its_message() -> None:
    message = 'spec.replicas: Invalid value: -1: must be greater than or equal to 0'
    raised = _raised(_rejected(json.dumps({"kind": "Status", "message": message})))
    assert type(raised) is ApiException and raised.status == 422
    assert api_error_message(raised) == message


def test_a_body_in_bytes_is_read_as_text() -> None:
    raised = _raised(_rejected(json.dumps({"message": "quota exceeded"}).encode()))
    assert isinstance(raised, ApiException) and api_error_message(raised) == "quota exceeded"


def test_without_a_body_the_reason_is_the_message() -> None:
    raised = _raised(_rejected(None))
    assert isinstance(raised, ApiException) and api_error_message(raised) == "Unprocessable Entity"


def test_other_errors_pass_unchanged() -> None:
    assert type(_raised(ConnectionResetError("reset"))) is ConnectionResetError
