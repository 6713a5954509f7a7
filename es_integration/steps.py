"""Request logic written once for both clients: :class:`Call` steps run by :func:`run` (sync) or :func:`run_async`.

Design notes: docs/architecture.md#es_integrationsteps
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call:
    """One client call: ``path`` names the method (``"indices.create"``), ``kwargs`` its keyword arguments."""

    path: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def method(self, client: Any) -> Any:
        target = client
        for name in self.path.split("."):
            target = getattr(target, name)
        return target


#: What a steps generator is: yields calls, is sent their answers, returns ``T``.
Steps = Generator[Call, Any, T]


def run(client: Any, steps: Steps[T]) -> T:
    """Drive ``steps`` with a synchronous client; its result, or the exception it did not handle."""
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            call = steps.send(answer) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value
        try:
            answer, error = call.method(client)(**call.kwargs), None
        except Exception as exc:  # noqa: BLE001 - handed to the steps, which handle it or let it out
            answer, error = None, exc


async def run_async(client: Any, steps: Steps[T]) -> T:
    """Drive ``steps`` with an asynchronous client (the same steps as :func:`run`)."""
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            call = steps.send(answer) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value
        try:
            answer, error = await call.method(client)(**call.kwargs), None
        except Exception as exc:  # noqa: BLE001 - handed to the steps, which handle it or let it out
            answer, error = None, exc
