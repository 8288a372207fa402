"""The old home of the settings and the composition root, kept while callers move: settings now live in
brokerbench.settings (a leaf every layer may import), the adapters they choose in brokerbench.workflow.wiring."""

from .settings import *  # noqa: F403
from .settings import HEARTBEAT_INTERVAL_S, PASS_TO_WORKERS  # noqa: F401
from .workflow.wiring import *  # noqa: F403
