"""Apache Pulsar: the pulsar-client driver and a local standalone broker; no cloud provider (give an endpoint)."""

from .. import Capabilities, Plugin, Settings
from . import settings
from .local import PulsarService

PLUGIN = Plugin(
    name="pulsar",
    description="Apache Pulsar (standalone locally) through pulsar-client (the C++ client)",
    family="pulsar",
    driver="brokerbench.brokers.pulsar.driver:PulsarDriver",
    settings=Settings(target=settings.TARGET, provision=settings.PROVISION, client=settings.CLIENT),
    capabilities=Capabilities(
        modes={"batch": "client batching per partition (pulsar_batch_delay_ms, pulsar_batch_bytes, "
                        "pulsar_batch_messages); many messages in flight",
               "single": "no batching, one message in flight: each send waits for its receipt"},
        partitions="partitions of the cell's partitioned topic",
        persistence={"persistent": "persistent topics (pulsar_topic_type): written to BookKeeper before the send "
                                   "receipt; the local standalone's bookie does not fsync each entry",
                     "non-persistent": "non-persistent topics (pulsar_topic_type: non-persistent): never stored, "
                                       "dropped when no consumer can take them"},
    ),
    environment="brokerbench.brokers.pulsar.environment:settings_in_force",
    caption="brokerbench.brokers.pulsar.environment:caption",
    durability="brokerbench.brokers.pulsar.environment:durability",
    local=PulsarService(),
    libraries=("pulsar-client",),
)
