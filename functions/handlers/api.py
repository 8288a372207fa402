"""Lambda entry point of the HTTP API (API Gateway REST proxy integration)."""

from brokerbench.api import build_app
from brokerbench.api.deps import from_environment
from brokerbench.observability import lambda_entry

deps = from_environment()
app = build_app(deps)


@lambda_entry(correlation_id_path=None)
def lambda_handler(event, context):
    return app.resolve(event, context)
