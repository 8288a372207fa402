"""Brokers as plug-ins, one package each; the interface they implement and the registry that finds them
live in brokerbench.registry.

A broker is one package under brokerbench/brokers/ whose `__init__` exposes `PLUGIN` (a Plugin):
its driver (the Driver interface in brokerbench.drivers), its local service (install, start,
readiness; the local stack records and stops its processes), its cloud provider or none, the
run-request settings it reads (the schema's broker parts are generated from them by
brokerbench.schema), and what it records about a run's settings. The registry finds the packages
with pkgutil, so adding a broker adds a folder here and changes no core module.

Anything that imports a client library (the driver, the cloud provider, the environment description)
is named as "module:attribute" and imported on first use: listing the registry (the CLI, the API,
the reports) imports no broker client. A plug-in package's `__init__` imports only the standard
library and brokerbench's own helpers.
"""

from ..registry import (  # noqa: F401 (a plug-in's `from .. import Plugin`, and the old import paths)
    ANY_RESOURCE,
    Capabilities,
    Cloud,
    CloudAccess,
    CloudFault,
    CloudQuota,
    LocalService,
    Log,
    Plugin,
    Port,
    Settings,
    Started,
    UnknownBroker,
    families,
    for_target,
    get_driver,
    Grant,
    load,
    local_services,
    plugin,
    plugins,
)
