"""RabbitMQ: Amazon MQ for RabbitMQ as its cloud provider (cloud.py, prices.py, prices.json).

Not a plug-in by itself (no PLUGIN here): the RabbitMQ plug-ins name this provider in their Plugin, e.g.
    cloud=Cloud(service="Amazon MQ for RabbitMQ", factory="brokerbench.brokers.rabbitmq.cloud:provider",
                prices="brokerbench.brokers.rabbitmq.prices:price", creation_s=20 * 60)
and put cloud.PROVISION_PROPERTIES in their provision schema. The endpoint it hands over is the AMQP one over TLS
(host, amqp_port 5671, tls, username, password_secret_arn: the driver fetches the password from Secrets Manager).
"""
