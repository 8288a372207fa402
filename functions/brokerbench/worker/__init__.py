"""The measurement worker: one cell, open-loop producers and consumers in their own processes.

`cell.run_cell(run_id, cell, endpoint, store)` is a plain function, so the same code runs in-process, in a Lambda
handler and in a process on an EC2 host. This package re-exports nothing: a module that needs one of its parts
(the local stack needs only `processes`' process-group helpers) imports that part alone, not the whole worker.
"""
