"""The event store on DynamoDB: one table, run id as partition key, the event's sort key as range key.

Writes are conditional (attribute_not_exists) inside TransactWriteItems batches, so a retried
or replayed event is skipped rather than written twice; items that failed only because another
item of their batch cancelled the transaction are sent again. The same code serves AWS and
DynamoDB Local; only the endpoint differs. The contract it shares with the memory store: events/memory.py.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from functools import cache

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

from ..settings import env
from . import AppendResult, StoreUnavailable, cell_count, decode_data, has_digest, run_listing_key, sort_key, validate

TRANSACTION_ITEMS = 25
TRANSACTION_BYTES = 3_000_000
RUNS_INDEX = "runs-by-time"
SUITES_INDEX = "runs-by-suite"
READ_THREADS = 4
CELLS_PER_READ = 25
KEYS_PER_GET = 100  # BatchGetItem's limit
UNREACHABLE = (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError)
# How long a call waits for an event store that does not answer (beyond the client's own retries), trying again
# with backoff: long enough to start a local one again (`brokerbench local up dynamodb`, about 5 s).
OUTAGE_S = float(os.environ.get("BROKERBENCH_STORE_OUTAGE_S", "60"))
# Asked again every second at most once it has failed a few times: a store back after a 10 s outage is found within
# a second. (Waits doubling to 8 s left a cell's writes waiting 6.4 s after DynamoDB Local answered again.)
BACKOFF_S = (0.25, 0.5, 1)
RETRYABLE = {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded"}


def from_environment() -> DynamoEventStore:
    """The store the settings name: BROKERBENCH_EVENTS_TABLE (default brokerbench-events), at
    BROKERBENCH_DYNAMODB_ENDPOINT when set (DynamoDB Local); one per table and endpoint."""
    return _store(env("BROKERBENCH_EVENTS_TABLE", "brokerbench-events"), os.environ.get("BROKERBENCH_DYNAMODB_ENDPOINT"))


@cache
def _store(table: str, endpoint: str | None) -> DynamoEventStore:
    # In Lambda the function's own region (AWS_REGION); DynamoDB Local takes any.
    return DynamoEventStore(table, endpoint_url=endpoint, region=os.environ.get("AWS_REGION", "us-east-1"))


class DynamoEventStore:
    def __init__(self, table: str, *, endpoint_url: str | None = None, region: str = "us-east-1", client=None,
                 outage_s: float | None = None) -> None:
        self.table = table
        self.outage_s = OUTAGE_S if outage_s is None else outage_s
        if client is None:
            # The client retries throttling and errors briefly; a store that does not answer is waited for in _call.
            kwargs = {"region_name": region, "config": Config(retries={"max_attempts": 4, "mode": "standard"})}
            if endpoint_url:  # DynamoDB Local accepts any credentials
                kwargs.update(endpoint_url=endpoint_url, aws_access_key_id="local", aws_secret_access_key="local")
            client = boto3.client("dynamodb", **kwargs)
        self.client = client

    def _call(self, operation: str, **kwargs):
        """One client call. An endpoint that does not answer, or answers with a server error (after the client's own
        few retries), is tried again with backoff for up to `outage_s`, then StoreUnavailable, naming it. A write is safe to repeat: every item is
        conditional, so one that did reach the table before the connection broke is skipped, never doubled."""
        give_up = time.monotonic() + self.outage_s
        for attempt in range(10**6):
            try:
                return getattr(self.client, operation)(**kwargs)
            except (*UNREACHABLE, ClientError) as exc:
                failing = isinstance(exc, ClientError)  # answers, with a server error (a full disk, locally)
                if failing and exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) < 500:
                    raise
                wait = BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
                if time.monotonic() + wait > give_up:
                    what = "fails every request" if failing else "does not answer"
                    raise StoreUnavailable(f"the event store ({self.client.meta.endpoint_url}, table {self.table}) "
                                           f"{what}: {exc}") from exc
                time.sleep(wait)

    def ensure_table(self) -> None:
        """Create the table and its indexes when missing (local runs; in AWS the CDK app owns it)."""
        try:
            self._call("describe_table", TableName=self.table)
            return
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceNotFoundException":
                raise
        keys = [("run_id", "S"), ("sk", "S"), ("entity", "S"), ("at", "S"), ("suite", "S")]
        self._call(
            "create_table",
            TableName=self.table,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": n, "AttributeType": t} for n, t in keys],
            KeySchema=[{"AttributeName": "run_id", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            GlobalSecondaryIndexes=[
                {"IndexName": RUNS_INDEX, "Projection": {"ProjectionType": "ALL"},
                 "KeySchema": [{"AttributeName": "entity", "KeyType": "HASH"}, {"AttributeName": "at", "KeyType": "RANGE"}]},
                {"IndexName": SUITES_INDEX, "Projection": {"ProjectionType": "ALL"},
                 "KeySchema": [{"AttributeName": "suite", "KeyType": "HASH"}, {"AttributeName": "at", "KeyType": "RANGE"}]},
            ],
        )
        self.client.get_waiter("table_exists").wait(TableName=self.table, WaiterConfig={"Delay": 1, "MaxAttempts": 60})

    @staticmethod
    def _item(event: dict) -> dict:
        data = event["data"]
        histograms = None
        if event["type"] == "IntervalMeasured":  # kept apart, so reads for reports can leave them out
            data = {k: v for k, v in data.items() if k != "histograms"}
            histograms = event["data"].get("histograms", {})
        item = {
            "run_id": {"S": event["run_id"]},
            "sk": {"S": event["sk"]},
            "event_id": {"S": event["event_id"]},
            "type": {"S": event["type"]},
            "at": {"S": event["at"]},
            "schema_version": {"N": str(event["schema_version"])},
            "data": {"S": json.dumps(data, separators=(",", ":"))},
        }
        if histograms is not None:
            item["histograms"] = {"S": json.dumps(histograms, separators=(",", ":"))}
        if event["type"] == "RunRequested":  # only run headers go into the listing indexes
            item["entity"] = {"S": "run"}
            item["suite"] = {"S": event["data"].get("suite") or event["data"]["spec"].get("name", "adhoc")}
        return item

    @staticmethod
    def _event(item: dict, histograms: bool = True) -> dict:
        """The stored item as an event, its data decoded through its type (events.decode_data); `histograms`: the
        read asked for an interval's histograms (stored apart, under their own attribute)."""
        event = {
            "run_id": item["run_id"]["S"],
            "sk": item["sk"]["S"],
            "event_id": item["event_id"]["S"],
            "type": item["type"]["S"],
            "at": item["at"]["S"],
            "schema_version": int(item["schema_version"]["N"]),
        }
        stored_apart = item.get("histograms", {}).get("S") if histograms else None
        data = decode_data(item["data"]["S"], event_type=event["type"], event_id=event["event_id"],
                           run_id=event["run_id"], version=event["schema_version"], histograms=histograms,
                           histograms_text=stored_apart)
        event["data"] = data
        return event

    def append(self, events: list[dict]) -> AppendResult:
        for event in events:  # all of them first: an invalid event leaves the whole append unwritten
            validate(event)
        result = AppendResult()
        batch: list[dict] = []
        size = 0
        keys: set[tuple[str, str]] = set()
        for event in events:
            if (event["run_id"], event["sk"]) in keys:  # a transaction cannot write one key twice: the first stays
                result.skipped += 1
                continue
            keys.add((event["run_id"], event["sk"]))
            item = self._item(event)
            item_size = len(item["data"]["S"]) + 200
            if batch and (len(batch) >= TRANSACTION_ITEMS or size + item_size > TRANSACTION_BYTES):
                result += self._write(batch)
                batch, size = [], 0
            batch.append(item)
            size += item_size
        if batch:
            result += self._write(batch)
        return result

    def _write(self, items: list[dict]) -> AppendResult:
        result = AppendResult()
        pending = items
        for attempt in range(12):
            try:
                self._call("transact_write_items", TransactItems=[
                    {"Put": {"TableName": self.table, "Item": item,
                             "ConditionExpression": "attribute_not_exists(run_id)"}}
                    for item in pending
                ])
                result.written += len(pending)
                return result
            except ClientError as exc:
                error = exc.response["Error"]
                if error["Code"] != "TransactionCanceledException":
                    if error["Code"] in RETRYABLE:
                        time.sleep(min(0.05 * 2**attempt, 2))
                        continue
                    raise
                reasons = exc.response.get("CancellationReasons") or _reasons_from_message(error.get("Message", ""), len(pending))
                codes = [r.get("Code", "None") for r in reasons]
                kept = []
                for item, code in zip(pending, codes):
                    if code == "ConditionalCheckFailed":
                        result.skipped += 1
                    elif code in ("None", "", None) or code in RETRYABLE:
                        kept.append(item)
                    else:
                        raise
                pending = kept
                if not pending:
                    return result
                if any(code in RETRYABLE for code in codes):
                    time.sleep(min(0.05 * 2**attempt, 2))
        raise RuntimeError(f"could not write {len(pending)} events after retries")

    def read(self, run_id: str, prefix: str | None = None, interval_histograms: bool = True,
             after: str | None = None, intervals: bool = True) -> list[dict]:
        """The run's events in order; only those whose sort key starts with `prefix` when given.

        interval_histograms=False leaves the per-interval histograms out (reports use the intervals'
        summaries and the cells' cumulative histograms), which makes large runs much cheaper to read.
        A whole run is read as several key ranges at once (run header, groups of cells, run end).
        `after` (a sort key, exclusive) reads only the events stored after it: what a follower that has
        read up to `after` has not seen yet (with `prefix`, inside that prefix).
        intervals=False (a whole run only) leaves out the intervals of every cell whose only attempt completed
        with a digest of them (events.has_digest), which a report reads instead: such a cell is read as its
        start and its end, by key, and every other cell whole.
        """
        if after is not None:
            if prefix:  # one key condition per query: the prefix, and the start key to resume after
                return self._query(run_id, "begins_with(sk, :p)", {":p": prefix}, interval_histograms,
                                   start_after=after)
            return self._query(run_id, "sk > :after", {":after": after}, interval_histograms)
        if prefix:
            return self._query(run_id, "begins_with(sk, :p)", {":p": prefix}, interval_histograms)
        header = self._query(run_id, "sk < :c", {":c": "10#"}, interval_histograms)
        requested = next((e for e in header if e["type"] == "RunRequested"), None)
        if requested is None:  # no header to say how many cells: one plain query
            return self._query(run_id, None, {}, interval_histograms)
        cells = cell_count(requested["data"])
        with ThreadPoolExecutor(READ_THREADS) as pool:
            tail = pool.submit(self._query, run_id, "sk >= :e", {":e": "11#"}, interval_histograms)
            if intervals:
                by_cell = self._cells(pool, run_id, range(cells), interval_histograms)
            else:
                by_cell = self._cells_by_digest(pool, run_id, cells, interval_histograms)
            return header + [e for index in sorted(by_cell) for e in by_cell[index]] + tail.result()

    def _cells(self, pool, run_id: str, indexes, interval_histograms: bool) -> dict[int, list[dict]]:
        """Every event of the given cells, per cell index: key ranges of up to CELLS_PER_READ adjacent cells."""
        ranges, indexes = [], sorted(indexes)
        for index in indexes:
            if ranges and index == ranges[-1][1] + 1 and index - ranges[-1][0] < CELLS_PER_READ:
                ranges[-1][1] = index
            else:
                ranges.append([index, index])
        parts = pool.map(lambda r: self._query(run_id, "sk BETWEEN :lo AND :hi",
                                               {":lo": f"10#c{r[0]:05d}#", ":hi": f"10#c{r[1]:05d}#~"},
                                               interval_histograms), ranges)
        out: dict[int, list[dict]] = {index: [] for index in indexes}
        for part in parts:
            for event in part:
                sk = event["sk"]  # 10#c<index>#...
                out[int(sk[4:sk.index("#", 4)])].append(event)
        return out

    def _cells_by_digest(self, pool, run_id: str, cells: int, interval_histograms: bool) -> dict[int, list[dict]]:
        """Cells without their intervals where a digest stands for them (see `read`), the others whole.

        The ends, the first attempts' starts and the keys a second attempt would start at are read by key;
        a cell that ended with a digest of its intervals after a single attempt is its start and its end.
        """
        keys = [sort_key(kind, index, attempt=attempt) for index in range(cells)
                for kind, attempt in (("CellStarted", 0), ("CellStarted", 1), ("CellCompleted", 0))]
        got: dict[str, dict] = {}
        for part in pool.map(lambda chunk: self._get(run_id, chunk),
                             [keys[i:i + KEYS_PER_GET] for i in range(0, len(keys), KEYS_PER_GET)]):
            got.update(part)
        out: dict[int, list[dict]] = {}
        whole = []
        for index in range(cells):
            start, retried, end = (got.get(sort_key(kind, index, attempt=attempt)) for kind, attempt in
                                   (("CellStarted", 0), ("CellStarted", 1), ("CellCompleted", 0)))
            if (start is not None and retried is None and end is not None and end["type"] == "CellCompleted"
                    and end["data"].get("attempt", 0) == 0 and has_digest(end["data"])):
                out[index] = [start, end]
            else:
                whole.append(index)
        if whole:
            out.update(self._cells(pool, run_id, whole, interval_histograms))
        return out

    def _get(self, run_id: str, sort_keys: list[str]) -> dict[str, dict]:
        """The events stored at these sort keys (strongly consistent), by sort key; missing keys are left out."""
        found: dict[str, dict] = {}
        request = {self.table: {"Keys": [{"run_id": {"S": run_id}, "sk": {"S": sk}} for sk in sort_keys],
                                "ConsistentRead": True}}
        for attempt in range(20):
            page = self._call("batch_get_item", RequestItems=request)
            for item in page["Responses"].get(self.table, []):
                event = self._event(item)
                found[event["sk"]] = event
            unprocessed = page.get("UnprocessedKeys") or {}
            if not unprocessed.get(self.table, {}).get("Keys"):
                return found
            request = unprocessed
            time.sleep(min(0.05 * 2**attempt, 2))
        raise RuntimeError(f"could not read {len(request[self.table]['Keys'])} events of run {run_id} after retries")

    def _query(self, run_id: str, sk_condition: str | None, values: dict[str, str],
               interval_histograms: bool, start_after: str | None = None) -> list[dict]:
        events = []
        condition = "run_id = :r" + (f" AND {sk_condition}" if sk_condition else "")
        kwargs = {"TableName": self.table, "KeyConditionExpression": condition,
                  "ExpressionAttributeValues": {":r": {"S": run_id}, **{k: {"S": v} for k, v in values.items()}},
                  "ConsistentRead": True}
        if start_after is not None:
            kwargs["ExclusiveStartKey"] = {"run_id": {"S": run_id}, "sk": {"S": start_after}}
        if not interval_histograms:
            kwargs["ProjectionExpression"] = "run_id, sk, event_id, #t, #a, schema_version, #d"
            kwargs["ExpressionAttributeNames"] = {"#t": "type", "#a": "at", "#d": "data"}
        while True:
            page = self._call("query", **kwargs)
            events.extend(self._event(item, interval_histograms) for item in page["Items"])
            if "LastEvaluatedKey" not in page:
                return events
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def list_runs(self, limit: int = 50, suite: str | None = None) -> list[dict]:
        """RunRequested events, newest first."""
        return self.runs_page(limit=limit, suite=suite)[0]

    def runs_page(self, *, limit: int = 50, suite: str | None = None, since: str | None = None,
                  start: dict | None = None) -> tuple[list[dict], dict | None]:
        """One page of RunRequested events, newest first, requested at or after `since` (ISO time) when given.

        Returns the events and, when more may follow, the key to pass as `start` for the next page.
        """
        if suite:
            condition, values, index = "suite = :s", {":s": {"S": suite}}, SUITES_INDEX
        else:
            condition, values, index = "entity = :e", {":e": {"S": "run"}}, RUNS_INDEX
        if since:
            condition += " AND #a >= :since"
            values[":since"] = {"S": since}
        kwargs = {"TableName": self.table, "IndexName": index, "KeyConditionExpression": condition,
                  "ExpressionAttributeValues": values, "ScanIndexForward": False, "Limit": limit}
        if since:
            kwargs["ExpressionAttributeNames"] = {"#a": "at"}
        if start:
            kwargs["ExclusiveStartKey"] = {k: {"S": v} for k, v in start.items()}
        page = self._call("query", **kwargs)
        last = page.get("LastEvaluatedKey")
        return [self._event(item) for item in page["Items"]], {k: v["S"] for k, v in last.items()} if last else None

    run_key = staticmethod(run_listing_key)

    def events_page(self, run_id: str, *, limit: int, after: str | None = None,
                    interval_histograms: bool = False) -> tuple[list[dict], str | None]:
        """Up to `limit` of the run's events in order, after the sort key `after`; and the sort key to resume
        after when more may follow."""
        kwargs = {"TableName": self.table, "KeyConditionExpression": "run_id = :r",
                  "ExpressionAttributeValues": {":r": {"S": run_id}}, "ConsistentRead": True, "Limit": limit}
        if after is not None:
            kwargs["ExclusiveStartKey"] = {"run_id": {"S": run_id}, "sk": {"S": after}}
        if not interval_histograms:
            kwargs["ProjectionExpression"] = "run_id, sk, event_id, #t, #a, schema_version, #d"
            kwargs["ExpressionAttributeNames"] = {"#t": "type", "#a": "at", "#d": "data"}
        page = self._call("query", **kwargs)
        events = [self._event(item, interval_histograms) for item in page["Items"]]
        return events, (events[-1]["sk"] if events and "LastEvaluatedKey" in page else None)


def _reasons_from_message(message: str, count: int) -> list[dict]:
    """Some endpoints put the reasons only in the message: '... reasons [ConditionalCheckFailed, None]'."""
    start, end = message.find("["), message.rfind("]")
    if start < 0 or end < 0:
        return [{"Code": "None"}] * count
    return [{"Code": part.strip()} for part in message[start + 1:end].split(",")]
