"""Destinations: a webhook's origin or an exchange, the unit that shares a replica's slots."""

from __future__ import annotations

import pytest

from app.domain.destinations import MAX_DESTINATION, destination_of, webhook_destination
from app.domain.target import RabbitMQTarget, WebhookTarget


@pytest.mark.parametrize(
    ("url", "destination"),
    [
        ("http://127.0.0.1:8080/a", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/b?x=1#y", "http://127.0.0.1:8080"),
        ("HTTP://Receiver.Example/hooks", "http://receiver.example"),
        ("https://receiver.example:8443", "https://receiver.example:8443"),
        ("http://[::1]:9000/x", "http://[::1]:9000"),
        ("http://user:secret@receiver.example/x", "http://receiver.example"),
    ],
)
def test_a_webhook_delivers_to_its_origin(url: str, destination: str) -> None:
    assert destination_of(WebhookTarget(type="webhook", url=url)) == destination


def test_two_paths_of_one_receiver_are_one_destination() -> None:
    first = WebhookTarget(type="webhook", url="http://127.0.0.1:9/one")
    second = WebhookTarget(type="webhook", url="http://127.0.0.1:9/two")
    assert destination_of(first) == destination_of(second)


def test_an_exchange_is_a_destination_of_its_own() -> None:
    billing = RabbitMQTarget(type="rabbitmq", exchange="billing", routing_key="paid")
    default = RabbitMQTarget(type="rabbitmq", exchange="", routing_key="queue")
    assert destination_of(billing) == "amqp:billing"
    assert destination_of(default) == "amqp:"


def test_a_name_never_outgrows_its_column() -> None:
    exchange = RabbitMQTarget(type="rabbitmq", exchange="x" * 255, routing_key="k")
    assert len(destination_of(exchange)) <= MAX_DESTINATION
    assert len(webhook_destination("http://" + "a" * 400)) <= MAX_DESTINATION
    assert webhook_destination("no scheme at all") == "no scheme at all"
