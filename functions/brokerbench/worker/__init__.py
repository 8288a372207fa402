"""The measurement worker: one cell, open-loop producers and consumers in their own processes.

`run_cell(run_id, cell, endpoint, store)` is a plain function, so the same code runs in-process,
in a Lambda handler and in a process on an EC2 host.
"""

from .cell import CellOutcome, run_cell

__all__ = ["CellOutcome", "run_cell"]
