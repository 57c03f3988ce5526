"""Errors raised by the Stepwise client."""

from __future__ import annotations

from typing import Any


class StepwiseError(Exception):
    """The server answered with an error: `{"error": {"code", "message", "field"}}`.

    `status` is the HTTP status, `code` the server's error code (`invalid_request`, `conflict`,
    `not_found`, ...), `field` the request field it names (None when it names none).
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}" + (f" (field {field})" if field else ""))
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        #: The decoded error body (or the raw text when it was not the server's JSON shape).
        self.body = body

    @property
    def is_retryable(self) -> bool:
        """True for 502/503/504: a proxy or a server that is restarting or shutting down."""
        return self.status in (502, 503, 504)


class StepwiseFormatError(ValueError):
    """A batch body that does not follow docs/serving.md (bad zip, bad .npy, unknown dtype)."""


class StepwiseConnectionError(StepwiseError):
    """No answer came back: the connection failed, broke off or timed out (after any retries).

    `request_sent` is False when the connection could not even be opened (the server saw nothing);
    True when the request may have reached the server. For a lease that means a batch may have been
    leased to nobody: it goes back to the queue when its `ttl_ms` runs out.
    """

    def __init__(self, message: str, *, request_sent: bool) -> None:
        super().__init__(0, "connection_error", message)
        self.request_sent = request_sent

    @property
    def is_retryable(self) -> bool:
        return True
