package bench;

import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;
import com.rabbitmq.client.AMQP;
import java.io.IOException;
import java.util.Map;

/**
 * A bare RabbitMQ amqp-client consume loop on a quorum queue with the worker's consumer settings
 * (brokers/rabbitmq_quorum/driver.py QuorumConsumer): basic.qos `prefetch` (rabbitmq_prefetch), basic.consume with
 * manual acknowledgements, one `multiple` ack every `ack-every` deliveries (the worker acks each poll's deliveries in
 * one; PerfTest's --multi-ack-every), and the rest when it stops. Prints "subscribed" once consuming, then one JSON
 * line when `idle` seconds pass with nothing after its first message (Reading).
 *
 * usage: AmqpConsume --host H --port P --queue Q [--prefetch 1000] [--ack-every 100] [--idle 3] [--limit 120]
 */
public final class AmqpConsume {
    public static void main(String[] args) throws Exception {
        String queue = Meter.arg(args, "queue", null);
        int ackEvery = Integer.parseInt(Meter.arg(args, "ack-every", "100"));
        ConnectionFactory factory = new ConnectionFactory();
        factory.setHost(Meter.arg(args, "host", "127.0.0.1"));
        factory.setPort(Integer.parseInt(Meter.arg(args, "port", null)));
        factory.setUsername(Meter.arg(args, "username", "guest"));
        factory.setPassword(Meter.arg(args, "password", "guest"));
        Reading reading = new Reading();
        try (Connection connection = factory.newConnection("brokerbench-tool-consume")) {
            Channel channel = connection.createChannel();
            channel.queueDeclare(queue, true, false, false, Map.of("x-queue-type", "quorum"));  // as declared already
            channel.basicQos(Integer.parseInt(Meter.arg(args, "prefetch", "1000")));
            long[] unacked = {0, 0};  // deliveries not acknowledged yet, the last one's tag (the dispatch thread's)
            channel.basicConsume(queue, false, new DefaultConsumer(channel) {
                @Override
                public void handleDelivery(String tag, Envelope envelope, AMQP.BasicProperties properties, byte[] body)
                        throws IOException {
                    reading.got(body.length);
                    unacked[1] = envelope.getDeliveryTag();
                    if (++unacked[0] >= ackEvery) {
                        channel.basicAck(unacked[1], true);
                        unacked[0] = 0;
                    }
                }
            });
            System.out.println("subscribed");
            System.out.flush();
            reading.await(Double.parseDouble(Meter.arg(args, "idle", "3")),
                    Double.parseDouble(Meter.arg(args, "limit", "120")));
            if (unacked[0] > 0) {  // nothing came for `idle` seconds: the dispatch thread is done with it
                channel.basicAck(unacked[1], true);
            }
            System.out.println(reading.json("rabbitmq-amqp-java-consume",
                    "amqp-client " + ConnectionFactory.class.getPackage().getImplementationVersion()));
        }
    }
}
