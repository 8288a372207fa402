package bench;

import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import java.util.Map;
import java.util.concurrent.ConcurrentNavigableMap;
import java.util.concurrent.ConcurrentSkipListMap;

/**
 * A bare RabbitMQ amqp-client publish loop to a quorum queue with publisher confirms: up to `window` unconfirmed
 * (as the worker's driver, brokers/rabbitmq_quorum/driver.py), confirms (single or `multiple`) counted as they come;
 * single mode publishes one message and waits for its confirm (waitForConfirmsOrDie) before the next.
 *
 * usage: AmqpPublish --host H --port P --queue Q --mode max|single [--size 1024] [--seconds 5] [--warmup 1]
 *        [--window 1000] [--messages N]
 */
public final class AmqpPublish {
    public static void main(String[] args) throws Exception {
        String mode = Meter.arg(args, "mode", "max");
        boolean single = mode.equals("single");
        int size = Integer.parseInt(Meter.arg(args, "size", "1024"));
        int window = single ? 1 : Integer.parseInt(Meter.arg(args, "window", "1000"));
        String queue = Meter.arg(args, "queue", null);
        byte[] body = Meter.payload(size);
        ConnectionFactory factory = new ConnectionFactory();
        factory.setHost(Meter.arg(args, "host", "127.0.0.1"));
        factory.setPort(Integer.parseInt(Meter.arg(args, "port", null)));
        factory.setUsername(Meter.arg(args, "username", "guest"));
        factory.setPassword(Meter.arg(args, "password", "guest"));
        try (Connection connection = factory.newConnection("brokerbench-tool")) {
            Channel channel = connection.createChannel();
            channel.queueDeclare(queue, true, false, false, Map.of("x-queue-type", "quorum"));  // as declared already
            channel.confirmSelect();
            ConcurrentNavigableMap<Long, Long> outstanding = new ConcurrentSkipListMap<>();  // tag -> send time
            Meter meter = new Meter("rabbitmq-amqp-java", mode, window, size,
                    Double.parseDouble(Meter.arg(args, "warmup", "1")),
                    Double.parseDouble(Meter.arg(args, "seconds", "5"))).limit(Meter.arg(args, "messages", "0"));
            if (!single) {
                channel.addConfirmListener((tag, multiple) -> confirmed(outstanding, meter, tag, multiple, true),
                        (tag, multiple) -> confirmed(outstanding, meter, tag, multiple, false));
            }
            long sentAt;
            while ((sentAt = meter.next()) >= 0) {
                if (single) {
                    channel.basicPublish("", queue, null, body);
                    boolean ok = true;
                    try {
                        channel.waitForConfirmsOrDie(30_000);
                    } catch (Exception e) {
                        ok = false;
                    }
                    meter.done(sentAt, ok, System.nanoTime());
                } else {
                    outstanding.put(channel.getNextPublishSeqNo(), sentAt);
                    channel.basicPublish("", queue, null, body);
                }
            }
            boolean drained = meter.drain(60);
            System.out.println(meter.json(drained, "\"client\": \"amqp-client " + ConnectionFactory.class.getPackage()
                    .getImplementationVersion() + "\""));
        }
    }

    private static void confirmed(ConcurrentNavigableMap<Long, Long> outstanding, Meter meter, long tag,
                                  boolean multiple, boolean ok) {
        long at = System.nanoTime();
        if (multiple) {
            ConcurrentNavigableMap<Long, Long> head = outstanding.headMap(tag, true);
            for (Long sentAt : head.values()) {
                meter.done(sentAt, ok, at);
            }
            head.clear();
        } else {
            Long sentAt = outstanding.remove(tag);
            if (sentAt != null) {
                meter.done(sentAt, ok, at);
            }
        }
    }
}
