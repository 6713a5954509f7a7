"""The retry policy of Elasticsearch requests (es_integration.retry): what a failover answers is retried past the
retry count within the failover wait; an overloaded node (429), a refused bulk item and a wrong request are not.
No node is needed: the failures are the client's own exception objects, raised by the function retried."""

from __future__ import annotations

import asyncio
import time

import pytest
from elastic_transport import ApiResponseMeta, HttpHeaders, NodeConfig
from elasticsearch import ApiError

from es_integration.retry import NODE_LOSS_CAUSES, ItemsRefused, ShardsUnavailable, is_failover, retrying

RETRIES, BACKOFF = 2, 0.01


def api_error(status: int, cause: str = "unavailable_shards_exception") -> ApiError:
    meta = ApiResponseMeta(status=status, http_version="1.1", headers=HttpHeaders(), duration=0.0,
                           node=NodeConfig("http", "127.0.0.1", 9200))
    body = {"error": {"type": cause, "root_cause": [{"type": cause}]}, "status": status}
    return ApiError(cause, meta, body)


def attempts_until(failures: list[BaseException], failover: float) -> tuple[int, BaseException | None, float]:
    """Attempts made, the failure raised (None: the call succeeded once ``failures`` ran out) and seconds taken."""
    made = 0

    async def run() -> None:
        nonlocal made
        async for attempt in retrying(RETRIES, BACKOFF, failover=failover):
            with attempt:
                made += 1
                if made <= len(failures):
                    raise failures[made - 1]

    started = time.monotonic()
    try:
        asyncio.run(run())
    except BaseException as exc:  # noqa: BLE001 - returned to the test
        return made, exc, time.monotonic() - started
    return made, None, time.monotonic() - started


@pytest.mark.parametrize("failure", [api_error(503), api_error(500, "node_disconnected_exception"),
                                     ShardsUnavailable("the search reached 2 of 3 shard(s)")],
                         ids=["503", "500-node-lost", "shard-copy"])
def test_a_failover_is_retried_past_the_count_within_the_wait(failure: BaseException) -> None:
    assert is_failover(failure)
    made, error, _ = attempts_until([failure] * (RETRIES + 4), failover=30.0)
    assert error is None and made == RETRIES + 5


def test_a_failover_longer_than_the_wait_fails_with_its_last_error() -> None:
    failures: list[BaseException] = [api_error(503)] * 1000
    made, error, seconds = attempts_until(failures, failover=0.3)
    assert error is failures[0]
    # The count, then one try every backoff * 2**(retries - 1) seconds until the wait is over.
    assert made > RETRIES + 1 and 0.3 <= seconds < 1.0


def test_without_a_failover_wait_the_count_bounds_a_failover() -> None:
    made, error, _ = attempts_until([api_error(503)] * (RETRIES + 4), failover=0.0)
    assert error is not None and made == RETRIES + 1


@pytest.mark.parametrize("failure", [api_error(429, "es_rejected_execution_exception"),
                                     ItemsRefused("the bulk request refused 3 pending write(s)")],
                         ids=["429", "bulk-items"])
def test_an_overloaded_node_keeps_the_count(failure: BaseException) -> None:
    assert not is_failover(failure)
    made, error, _ = attempts_until([failure] * (RETRIES + 4), failover=30.0)
    assert error is failure and made == RETRIES + 1


@pytest.mark.parametrize("failure", [api_error(500, "null_pointer_exception"), api_error(400, "parsing_exception")],
                         ids=["500-node-bug", "400"])
def test_a_wrong_request_is_final_at_once(failure: BaseException) -> None:
    assert not is_failover(failure)
    made, error, _ = attempts_until([failure], failover=30.0)
    assert error is failure and made == 1


def test_every_node_loss_cause_is_a_failover() -> None:
    assert all(is_failover(api_error(500, cause)) for cause in sorted(NODE_LOSS_CAUSES))


@pytest.mark.parametrize(("status", "failover"), [(429, False), (503, True)])
def test_a_refused_search_of_a_multi_search_is_a_failover_only_when_not_a_429(status: int, failover: bool) -> None:
    from es_integration.backend.searches import Searches

    item = {"error": {"type": "some_exception", "reason": "refused"}, "status": status}
    with pytest.raises(ShardsUnavailable) as raised:
        Searches._checked(item)
    assert is_failover(raised.value) is failover
