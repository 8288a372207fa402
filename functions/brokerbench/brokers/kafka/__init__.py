"""Apache Kafka (KRaft): the confluent-kafka driver, a local single node or 3-node cluster, Amazon MSK in the cloud."""

from .. import Capabilities, Cloud, CloudFault, CloudQuota, Plugin, Settings
from . import cloud_access, settings
from .local import KafkaService

PLUGIN = Plugin(
    name="kafka",
    description="Apache Kafka (KRaft mode) through confluent-kafka (librdkafka)",
    family="kafka",
    driver="brokerbench.brokers.kafka.driver:KafkaDriver",
    settings=Settings(target=settings.TARGET, provision=settings.PROVISION, client=settings.CLIENT),
    capabilities=Capabilities(
        modes={"batch": "librdkafka batches per partition (linger_ms, batch_bytes); many messages in flight",
               "single": "one message in flight: each send waits for its acknowledgement (linger.ms 0)"},
        partitions="partitions of the cell's topic",
        persistence={"page-cache": "the log, acknowledged from the page cache, no fsync per message; replicated "
                                   "client.replication_factor times (default 3, or the broker count when fewer)"},
    ),
    environment="brokerbench.brokers.kafka.environment:settings_in_force",
    caption="brokerbench.brokers.kafka.environment:caption",
    durability="brokerbench.brokers.kafka.environment:durability",
    local=KafkaService(),
    # prices: brokers/kafka/prices.py; creation_s: a 3-broker cluster takes about 20 min (15 to 30) to create
    cloud=Cloud(service="Amazon MSK", factory="brokerbench.brokers.kafka.cloud:provider",
                prices="brokerbench.brokers.kafka.prices:price", creation_s=20 * 60,
                quota=CloudQuota(service_code="kafka", name="Number of brokers per account", code="L-EDD31C36",
                                 unit="brokers", client="kafka", need="brokerbench.brokers.kafka.cloud:quota_need",
                                 in_use="brokerbench.brokers.kafka.cloud:quota_in_use"),
                access=cloud_access.ACCESS,
                fault=CloudFault(call="kafka:RebootBroker", does="reboots one broker, which MSK brings back itself",
                                 hooks="brokerbench.brokers.kafka.cloud_faults",
                                 targets=("leader", "follower", "node"))),
    libraries=("confluent-kafka",),
    cluster="brokerbench.brokers.kafka.cluster",
)
