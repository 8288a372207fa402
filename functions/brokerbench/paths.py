"""Where the project's data files live (schemas, suites), in a checkout and in a Lambda bundle."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
# In a checkout the schemas sit at the repository root; a Lambda bundle sets BROKERBENCH_SCHEMAS.
SCHEMAS_DIR = Path(os.environ.get("BROKERBENCH_SCHEMAS", PACKAGE_DIR.parent.parent / "schemas"))
SUITES_DIR = PACKAGE_DIR / "suites"
RECORD_AVRO_SCHEMA = SCHEMAS_DIR / "records" / "telemetry.avsc"
