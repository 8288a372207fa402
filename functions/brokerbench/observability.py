"""Structured logs, traces and metrics of the Lambda handlers (Powertools), in AWS and in the local workflow.

In AWS, JSON log lines and EMF metric blobs go to stdout, where CloudWatch takes them. The local workflow
runs the same handlers inside the CLI process, whose stdout draws progress bars: in local mode
(BROKERBENCH_MODE=local) they are appended to files instead, functions.log and metrics.jsonl in
BROKERBENCH_LOG_DIR, else BROKERBENCH_STATE_DIR, else ./.brokerbench. The choice is made at each write,
because the local workflow sets the environment after the handlers are imported.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import threading
from pathlib import Path

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.lambda_context import build_lambda_context_model
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.metrics.functions import is_metrics_disabled
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import AmazonCloudWatchEMFProvider
from aws_lambda_powertools.utilities import jmespath_utils

from . import settings

SERVICE = "brokerbench"
NAMESPACE = "brokerbench"
LOG_FILE = "functions.log"
METRICS_FILE = "metrics.jsonl"

_appending = threading.Lock()  # handlers run in threads locally: one line is written whole, never interleaved


def sink_dir() -> Path:
    """Where local logs and metrics go."""
    where = os.environ.get("BROKERBENCH_LOG_DIR") or os.environ.get("BROKERBENCH_STATE_DIR")
    return Path(where) if where else Path.cwd() / ".brokerbench"


def _emit(file_name: str, line: str) -> None:
    if settings.local():
        with _appending:
            folder = sink_dir()
            folder.mkdir(parents=True, exist_ok=True)
            with open(folder / file_name, "a", encoding="utf-8") as out:
                out.write(line + "\n")
    else:
        sys.stdout.write(line + "\n")  # looked up now: the Lambda runtime's (or a test's) stdout
        sys.stdout.flush()


class _SinkHandler(logging.Handler):
    """Powertools' JSON formatter is set on it like on its default stream handler."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            _emit(LOG_FILE, self.format(record))
        except Exception:
            self.handleError(record)


class _EmfProvider(AmazonCloudWatchEMFProvider):
    """CloudWatch EMF through the sink.

    One metric set serves every invocation of the process; locally invocations overlap in threads,
    so adding and flushing are serialized: a blob may then carry another invocation's counts, but no
    count is lost or published twice (they share namespace and dimensions).
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._lock = threading.RLock()

    def add_metric(self, *args, **kwargs) -> None:
        with self._lock:
            super().add_metric(*args, **kwargs)

    def flush_metrics(self, raise_on_empty_metrics: bool = False) -> None:
        with self._lock:
            if not self.metric_set and not raise_on_empty_metrics:
                return  # most steps count nothing: nothing to publish, nothing to warn about
            if is_metrics_disabled():
                self.clear_metrics()
                return
            blob = self.serialize_metric_set()  # raises when empty and raise_on_empty_metrics
            self.clear_metrics()
        _emit(METRICS_FILE, json.dumps(blob, separators=(",", ":")))


logger = Logger(service=SERVICE, logger_handler=_SinkHandler())
tracer = Tracer(service=SERVICE)  # disables itself outside Lambda (no LAMBDA_TASK_ROOT): no X-Ray daemon needed
metrics = Metrics(namespace=NAMESPACE, service=SERVICE, provider=_EmfProvider(namespace=NAMESPACE, service=SERVICE))


def count(name: str, value: float = 1, **dimensions) -> None:
    """A Count metric, published with the invocation's others; with dimensions, published at once on its own
    so the dimensions apply to it alone."""
    if not dimensions:
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
        return
    single = _EmfProvider(namespace=NAMESPACE, service=SERVICE)
    single.add_metric(name=name, unit=MetricUnit.Count, value=value)
    for key, dimension in dimensions.items():
        single.add_dimension(name=key, value=str(dimension))
    single.flush_metrics()


def set_run(run_id: str | None) -> None:
    """The run id as the correlation id of the rest of this invocation's log lines."""
    logger.set_correlation_id(run_id)
    logger.thread_safe_append_keys(correlation_id=run_id)


def lambda_entry(handler=None, *, correlation_id_path: str | None = "run_id"):
    """Logger (Lambda context, the run id as correlation id), Tracer and Metrics around a Lambda handler.

    `correlation_id_path` is a JMESPath into the event; None when the event has no run id (call set_run).
    The handler's result and exceptions pass through unchanged: the workflow matches errors by class name.
    """
    if handler is None:
        return functools.partial(lambda_entry, correlation_id_path=correlation_id_path)
    invoke = _own_keys(handler, correlation_id_path)
    traced = tracer.capture_lambda_handler(metrics.log_metrics(invoke))
    return logger.inject_lambda_context(traced, correlation_id_path=correlation_id_path, clear_state=True)


def _own_keys(handler, correlation_id_path: str | None):
    """inject_lambda_context keeps the invocation's keys on the logger, shared by all threads. In Lambda one
    invocation runs at a time; locally several run in threads at once, so each also holds its keys
    thread-locally (those win in the formatter), and a failure is logged with them before it propagates."""

    @functools.wraps(handler)
    def invoke(event, context):
        run_id = jmespath_utils.query(data=event, envelope=correlation_id_path) if correlation_id_path else None
        logger.thread_safe_append_keys(correlation_id=run_id, **vars(build_lambda_context_model(context)))
        try:
            return handler(event, context)
        except Exception:
            logger.exception("invocation failed")
            raise
        finally:
            logger.thread_safe_clear_keys()

    return invoke
