"""The API process's answer at GET /metrics, with its delivery processes' metrics.

Where the replica's delivery loop runs in processes of its own (`chronoq serve`), `DELIVERY`
adds their metrics to the API process's answer, each of their series labelled with its
`process`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator

from prometheus_client import Metric, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from app.telemetry import metrics


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class _DeliveryProcesses:
    """The metrics of the replica's delivery processes, merged into this process's.

    `read` returns each delivery process's exposition text (None for one that did not
    answer: its series are then missing from that scrape, as a restarted replica's counters
    start again). Every series of delivery process K is labelled `process="delivery"` (with
    one process) or `process="delivery-K"`, so none can collide with this process's
    series of the same name (the `process_*` and `python_*` ones, the counters registered in
    both); a family both expose is written once, with the series of both.
    """

    def __init__(self) -> None:
        self._read: Callable[[], Awaitable[list[str | None]]] | None = None

    def watch(self, read: Callable[[], Awaitable[list[str | None]]]) -> None:
        self._read = read

    def forget(self) -> None:
        self._read = None

    async def exposition(self) -> bytes:
        """This process's metrics in the text format, with the delivery processes'."""
        own = metrics.exposition()
        if self._read is None:
            return own
        texts = await self._read()
        families = {family.name: family for family in text_string_to_metric_families(own.decode())}
        for index, text in enumerate(texts, start=1):
            if text is None:
                continue
            process = "delivery" if len(texts) == 1 else f"delivery-{index}"
            for family in text_string_to_metric_families(text):
                samples = [
                    sample._replace(labels={**sample.labels, "process": process})
                    for sample in family.samples
                ]
                mine = families.get(family.name)
                if mine is None:
                    family.samples = samples
                    families[family.name] = family
                elif mine.type == family.type:
                    mine.samples.extend(samples)
        return generate_latest(_Families(list(families.values())))


DELIVERY = _DeliveryProcesses()
