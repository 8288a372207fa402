"""Apache Kafka in ZooKeeper mode (Kafka 3.9 and its ZooKeeper), locally, beside KRaft Kafka as its own row.

It speaks Kafka's protocol, so the kafka broker's driver, settings, environment description and captions
serve it as they are. Its family is "kafka", but named targets with driver "kafka" keep the kafka plug-in
(the one named like its family). No cloud provider: the Amazon MSK provider (brokers/kafka/cloud.py) offers
no choice of metadata mode, so in AWS mode give its endpoint in targets.kafka-zookeeper.
"""

from .. import Plugin, Settings
from ..kafka import PLUGIN as KAFKA
from . import settings
from .local import KafkaZooKeeperService

PLUGIN = Plugin(
    name="kafka-zookeeper",
    description="Apache Kafka 3.9 in ZooKeeper mode (a standalone ZooKeeper) through confluent-kafka (librdkafka)",
    family=KAFKA.family,
    driver=KAFKA.driver,
    settings=Settings(target=settings.TARGET, provision=settings.PROVISION, client=settings.CLIENT),
    capabilities=KAFKA.capabilities,
    environment=KAFKA.environment,
    caption=KAFKA.caption,
    durability=KAFKA.durability,
    local=KafkaZooKeeperService(),
    libraries=KAFKA.libraries,
)
