package bench;

import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.ProducerBuilder;
import org.apache.pulsar.client.api.PulsarClient;

/**
 * A bare Pulsar Java client publish loop with the worker's producer settings (brokers/pulsar/driver.py
 * producer_settings): batch mode batches (delay, bytes, messages as the cell's client settings say), up to `window`
 * pending (maxPendingMessages, blockIfQueueFull) and a semaphore of the same size around sendAsync; single mode no
 * batching and a synchronous send per message.
 *
 * usage: PulsarPublish --url pulsar://H:P --topic persistent://public/default/T-partition-0 --mode max|single
 *        [--size 1024] [--seconds 5] [--warmup 1] [--window 10000] [--batch-delay-ms 5] [--batch-bytes 1048576]
 *        [--batch-messages 1000] [--messages N]
 */
public final class PulsarPublish {
    public static void main(String[] args) throws Exception {
        String mode = Meter.arg(args, "mode", "max");
        boolean single = mode.equals("single");
        int size = Integer.parseInt(Meter.arg(args, "size", "1024"));
        int window = single ? 1 : Integer.parseInt(Meter.arg(args, "window", "10000"));
        byte[] body = Meter.payload(size);
        try (PulsarClient client = PulsarClient.builder().serviceUrl(Meter.arg(args, "url", null))
                .operationTimeout(30, TimeUnit.SECONDS).build()) {
            ProducerBuilder<byte[]> builder = client.newProducer().topic(Meter.arg(args, "topic", null))
                    .blockIfQueueFull(true).maxPendingMessages(Math.max(window, 1)).sendTimeout(30, TimeUnit.SECONDS)
                    .enableBatching(!single);
            if (!single) {
                builder.batchingMaxPublishDelay(Long.parseLong(Meter.arg(args, "batch-delay-ms", "5")),
                                TimeUnit.MILLISECONDS)
                        .batchingMaxBytes(Integer.parseInt(Meter.arg(args, "batch-bytes", "1048576")))
                        .batchingMaxMessages(Integer.parseInt(Meter.arg(args, "batch-messages", "1000")));
            }
            try (Producer<byte[]> producer = builder.create()) {
                Meter meter = new Meter("pulsar-java", mode, window, size,
                        Double.parseDouble(Meter.arg(args, "warmup", "1")),
                        Double.parseDouble(Meter.arg(args, "seconds", "5"))).limit(Meter.arg(args, "messages", "0"));
                long sentAt;
                while ((sentAt = meter.next()) >= 0) {
                    if (single) {
                        boolean ok = true;
                        try {
                            producer.send(body);
                        } catch (Exception e) {
                            ok = false;
                        }
                        meter.done(sentAt, ok, System.nanoTime());
                    } else {
                        final long at = sentAt;
                        producer.sendAsync(body).whenComplete((id, error) -> meter.done(at, error == null,
                                System.nanoTime()));
                    }
                }
                boolean drained = meter.drain(60);
                System.out.println(meter.json(drained, "\"client\": \"pulsar-client " + PulsarClient.class
                        .getPackage().getImplementationVersion() + "\""));
            }
        }
    }
}
