"""RabbitMQ quorum queues over AMQP 0-9-1 (spoken by the driver itself to publish and consume; pika declares and
counts the queues), on the local RabbitMQ node that rabbitmq-streams shares, or on Amazon MQ for RabbitMQ in the
cloud (AMQP over TLS)."""

from .. import Capabilities, Cloud, CloudFault, CloudQuota, Plugin, Settings
from ..rabbitmq import cloud_access, settings
from ..rabbitmq.local import SERVICE

PLUGIN = Plugin(
    name="rabbitmq-quorum",
    description="RabbitMQ quorum queues over AMQP 0-9-1: publisher confirms, consumer acks",
    family="rabbitmq-amqp",  # a named target with "driver": "rabbitmq-amqp" is served by quorum queues
    driver="brokerbench.brokers.rabbitmq_quorum.driver:RabbitMQQuorumDriver",
    settings=Settings(target=settings.TARGET, provision=settings.PROVISION, client=settings.CLIENT),
    capabilities=Capabilities(
        modes={"batch": "up to rabbitmq_in_flight messages published and not yet confirmed",
               "single": "one message in flight: each publish waits for its confirm"},
        partitions="a quorum queue <topic>-<n> each",
        persistence={"quorum-fsync": "always: each write is fsynced to the Raft log of a majority of the queue's "
                                     "members before the confirm (one member on the local node)"},
    ),
    environment="brokerbench.brokers.rabbitmq_quorum.environment:settings_in_force",
    caption="brokerbench.brokers.rabbitmq_quorum.environment:caption",
    durability="brokerbench.brokers.rabbitmq_quorum.environment:durability",
    local=SERVICE,
    # prices: brokers/rabbitmq/prices.py; creation_s: an Amazon MQ broker takes about 20 min to create
    cloud=Cloud(service="Amazon MQ for RabbitMQ", factory="brokerbench.brokers.rabbitmq.cloud:provider",
                prices="brokerbench.brokers.rabbitmq.prices:price", creation_s=20 * 60,
                quota=CloudQuota(service_code="mq", name="Number of brokers per region", code="L-4D525FD5",
                                 unit="brokers", client="mq", need="brokerbench.brokers.rabbitmq.cloud:quota_need",
                                 in_use="brokerbench.brokers.rabbitmq.cloud:quota_in_use"),
                access=cloud_access.ACCESS,
                fault=CloudFault(call="mq:RebootBroker", does="restarts the whole broker, every node of a cluster",
                                 hooks="brokerbench.brokers.rabbitmq.cloud_faults", targets=())),
    libraries=("pika",),
    cluster="brokerbench.brokers.rabbitmq.faults",
)
