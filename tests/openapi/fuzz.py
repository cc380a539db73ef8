"""Property-based requests from a service's own OpenAPI document, sent to the live service.

Every answer must be no 5xx and conform to the document: a documented status code, content type
and headers, and a body its schema accepts. Bounded (a few examples per operation, no shrinking)
and derandomized, so CI sees the same requests every run. Failures are collected, not raised at
the first one, so a run names every operation that is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]
# Sends a case its own way (a signature over the exact bytes) and returns the response.
Sender = Callable[[schemathesis.Case, str], httpx.Response]


def fuzz(base_url: str, *, max_examples: int, headers: dict[str, str] | None = None,
         path_parameters: dict[str, Any] | None = None, only: Callable[[str], bool] = lambda path: True,
         send: Sender | None = None) -> list[str]:
    """Run every operation of the live document at ``base_url`` whose path ``only`` accepts;
    returns what failed (empty when every answer conformed)."""
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if not only(operation.path):
            continue
        params = {k: v for k, v in (path_parameters or {}).items()
                  if any(p.name == k for p in operation.path_parameters)}
        strategy = operation.as_strategy(path_parameters=params or None)

        @settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
                  phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def run(case: schemathesis.Case) -> None:
            try:
                if send is None:
                    case.call_and_validate(base_url=base_url, headers=headers, checks=CHECKS, timeout=30)
                else:
                    case.validate_response(send(case, base_url), checks=CHECKS)
            except Exception as exc:  # every failure is reported, not only the first
                failures.append(f"{case.operation.label}: {type(exc).__name__}: {exc}\n  {case.as_curl_command()}")

        run()
    return failures
