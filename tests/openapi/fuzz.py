"""Property-based requests from a service's own OpenAPI document, sent to the live service.

Every answer must be no 5xx and conform to the document: a documented status code, content type
and headers, and a body its schema accepts. Bounded (a few examples per operation, no shrinking)
and derandomized, so CI sees the same requests every run. Failures are collected, not raised at
the first one, so a run names every operation that is wrong.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
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


@dataclass
class Run:
    """What a run found: its failures, and the answers it saw by operation and status."""

    failures: list[str] = field(default_factory=list)
    answers: Counter[tuple[str, int]] = field(default_factory=Counter)

    def __iadd__(self, other: Run) -> Run:
        self.failures += other.failures
        self.answers += other.answers
        return self

    def statuses(self, operation: str) -> set[int]:
        return {status for (label, status) in self.answers if label == operation}

    def report(self) -> str:
        return f"{len(self.failures)} non-conforming answers:\n" + "\n".join(self.failures[:20])


def fuzz(base_url: str, *, max_examples: int, headers: dict[str, str] | None = None,
         path_parameters: dict[str, Any] | None = None, only: Callable[[str], bool] = lambda path: True,
         send: Sender | None = None, negative: bool = False) -> Run:
    """Run every operation of the live document at ``base_url`` whose path ``only`` accepts;
    ``negative``: requests the document says are invalid (they must be a documented 4xx)."""
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    found = Run()
    for result in schema.get_all_operations():
        operation = result.ok()
        if not only(operation.path):
            continue
        params = {k: v for k, v in (path_parameters or {}).items()
                  if any(p.name == k for p in operation.path_parameters)}
        mode = schemathesis.GenerationMode.NEGATIVE if negative else schemathesis.GenerationMode.POSITIVE
        strategy = operation.as_strategy(mode, path_parameters=params or None)

        @settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
                  phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def run(case: schemathesis.Case) -> None:
            try:
                if send is None:
                    response = case.call(base_url=base_url, headers=headers, timeout=30)
                    found.answers[(case.operation.label, response.status_code)] += 1
                    case.validate_response(response, checks=CHECKS, headers=headers)
                else:
                    answer = send(case, base_url)
                    found.answers[(case.operation.label, answer.status_code)] += 1
                    case.validate_response(answer, checks=CHECKS)
            except (Exception, FailureGroup) as exc:  # every failure is reported, not only the first
                found.failures.append(f"{case.operation.label}: {type(exc).__name__}: {exc}\n"
                                f"  {case.as_curl_command()}")

        try:
            run()
        except Unsatisfiable:
            if not negative:
                raise
            # Nothing in this operation can be made invalid (no parameters, no body): nothing to send.
    return found
