"""Imported last by the worker's fork server: the worker's main module, once for every process it forks
(brokerbench.worker.processes.start_fork_server says why)."""

from .processes import prepare_fork_server

prepare_fork_server()
