"""Where the app finds the project's files (all relative to the repository root, wherever cdk runs from)."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FUNCTIONS = REPO / "functions"
HANDLERS = FUNCTIONS / "handlers"
SCHEMAS = REPO / "schemas"
REQUIREMENTS = REPO / "requirements.txt"
LAMBDA_LOCK = REPO / "requirements-lambda.txt"  # the layer's lock (cdk/bundling.py)
STATE_MACHINE = REPO / "statemachines" / "benchmark_run.asl.json"
TEARDOWN_MACHINE = REPO / "statemachines" / "teardown_run.asl.json"  # the run workflow's teardown states alone
SCHEDULES = FUNCTIONS / "brokerbench" / "schedules.json"
PRICING = FUNCTIONS / "brokerbench" / "pricing.json"  # the cost estimate's prices: the allowed worker instance types

# Left out of every code asset: caches, packaging metadata, and the native send loop built for this
# machine's CPython and glibc (it is optional; the worker falls back to its Python loop).
CODE_EXCLUDES = ["**/__pycache__", "**/*.pyc", "*.egg-info", "**/*.so", "**/.pytest_cache"]
