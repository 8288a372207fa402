package bench;

import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;

/**
 * A bare Pulsar Java client consume loop with the worker's consumer settings (brokers/pulsar/driver.py consumer):
 * an Exclusive subscription from the earliest message, `receiver-queue` messages prefetched, polls of up to
 * `ack-every` messages (the first waited for, then those already there), a cumulative acknowledgement per poll. It reads
 * until `idle` seconds pass with nothing after its first message (or `limit` seconds in all), and prints one JSON
 * line: what it received, and its msgs/s from its first message to its last.
 *
 * usage: PulsarConsume --url pulsar://H:P --topic persistent://public/default/T-partition-0 --subscription S
 *        [--receiver-queue 10000] [--ack-every 1000] [--idle 3] [--limit 120]
 */
public final class PulsarConsume {
    public static void main(String[] args) throws Exception {
        int ackEvery = Integer.parseInt(Meter.arg(args, "ack-every", "1000"));
        long idleMs = (long) (Double.parseDouble(Meter.arg(args, "idle", "3")) * 1000);
        long limitNs = (long) (Double.parseDouble(Meter.arg(args, "limit", "120")) * 1e9);
        try (PulsarClient client = PulsarClient.builder().serviceUrl(Meter.arg(args, "url", null))
                .operationTimeout(30, TimeUnit.SECONDS).build();
             Consumer<byte[]> consumer = client.newConsumer().topic(Meter.arg(args, "topic", null))
                     .subscriptionName(Meter.arg(args, "subscription", null))
                     .subscriptionType(SubscriptionType.Exclusive)
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                     .receiverQueueSize(Integer.parseInt(Meter.arg(args, "receiver-queue", "10000"))).subscribe()) {
            System.out.println("subscribed");
            System.out.flush();
            long start = System.nanoTime(), first = 0, last = 0, received = 0, bytes = 0;
            while (System.nanoTime() - start < limitNs) {
                // A poll as the worker's: the first message waited for, then what is there, up to ack-every of
                // them; then one cumulative acknowledgement for the poll.
                Message<byte[]> message = consumer.receive(received == 0 ? 1000 : (int) idleMs, TimeUnit.MILLISECONDS);
                if (message == null) {
                    if (received > 0) {
                        break;
                    }
                    continue;
                }
                Message<byte[]> polled = message;
                for (int n = 0; polled != null && n < ackEvery; n++) {
                    message = polled;
                    last = System.nanoTime();
                    if (received == 0) {
                        first = last;
                    }
                    received++;
                    bytes += message.getData().length;
                    polled = n + 1 < ackEvery ? consumer.receive(0, TimeUnit.MILLISECONDS) : null;
                }
                consumer.acknowledgeCumulativeAsync(message);
            }
            double windowS = (last - first) / 1e9;
            System.out.printf("{\"tool\": \"pulsar-java-consume\", \"received\": %d, \"bytes\": %d, \"window_s\": %.3f,"
                    + " \"msgs_per_s\": %s, \"client\": \"pulsar-client %s\"}%n", received, bytes, windowS,
                    received > 1 && windowS > 0 ? String.format("%.3f", (received - 1) / windowS) : "null",
                    PulsarClient.class.getPackage().getImplementationVersion());
        }
    }
}
