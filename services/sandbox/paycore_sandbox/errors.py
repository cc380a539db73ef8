"""Contract-shaped error bodies and the orjson response class.

Every error is ``{"error": {"type", "code", "message", "param"?}}``; raising
:class:`ApiError` anywhere below a handler turns into exactly that.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from starlette.responses import Response


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error_body(type_: str, code: str, message: str, param: str | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"type": type_, "code": code, "message": message}
    if param is not None:
        error["param"] = param
    return {"error": error}


class ApiError(Exception):
    """An error answer; carries everything needed to render it."""

    def __init__(self, status: int, type_: str, code: str, message: str, *,
                 param: str | None = None, headers: Mapping[str, str] | None = None,
                 extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.code = code
        self.message = message
        self.param = param
        self.headers = dict(headers or {})
        # Further fields of the error object a dialect documents (Stripe's
        # ``decline_code``, ``payment_intent``, ...).
        self.extra = dict(extra or {})

    def body(self) -> bytes:
        body = error_body(self.type, self.code, self.message, self.param)
        body["error"].update(self.extra)
        return orjson.dumps(body)

    def response(self) -> Response:
        return Response(self.body(), status_code=self.status, headers=self.headers,
                        media_type="application/json")


def invalid_param(param: str | None, message: str) -> ApiError:
    return ApiError(400, "invalid_request", "parameter_invalid", message, param=param)


def unauthorized(message: str) -> ApiError:
    return ApiError(401, "authentication_error", "invalid_api_key", message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, "permission_error", "account_mismatch", message)


def not_found(message: str) -> ApiError:
    return ApiError(404, "invalid_request", "resource_missing", message)


def rate_limited(retry_after_s: int) -> ApiError:
    return ApiError(429, "rate_limit_error", "rate_limited", "Too many requests; slow down.",
                    headers={"Retry-After": str(max(1, retry_after_s))})


def not_processed() -> ApiError:
    return ApiError(503, "api_error", "not_processed",
                    "The request was not processed; it is safe to retry.",
                    headers={"Retry-After": "1"})


def internal() -> ApiError:
    return ApiError(500, "api_error", "internal",
                    "An internal error occurred; the payment may or may not exist.")


class ErrorAnswer(Protocol):
    """An error a dialect answers: :class:`ApiError`, or a dialect's own (Adyen's)."""

    def response(self) -> Response: ...


def replayed_header(response: Response) -> bool:
    """Cardco and Stripe mark a replayed stored answer ``Idempotent-Replayed``."""
    return "idempotent-replayed" in response.headers


@dataclass(frozen=True)
class FaultAnswers:
    """The errors a dialect answers for the sandbox's own conditions (faults,
    rate limit): the same condition, in each provider's documented shape; and
    how to tell its replayed answers (the capture log's ``replayed``)."""

    not_processed: Callable[[], ErrorAnswer]
    rate_limited: Callable[[int], ErrorAnswer]  # the argument: Retry-After seconds
    internal: Callable[[], ErrorAnswer]
    # Adyen's wire does not mark replays: its dialect recognises its own.
    replayed: Callable[[Response], bool] = replayed_header


CARDCO_ANSWERS = FaultAnswers(not_processed, rate_limited, internal)
