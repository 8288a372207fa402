package bench;

import com.rabbitmq.stream.Environment;
import com.rabbitmq.stream.Producer;

/**
 * A bare RabbitMQ stream-client publish loop: up to `window` messages unconfirmed (a semaphore around send, and the
 * client's own maxUnconfirmedMessages), confirms counted as they come; single mode one in flight. Dynamic batching
 * only in single mode (--dynamic-batch overrides).
 *
 * usage: StreamPublish --host H --port P --stream S --mode max|single [--size 1024] [--seconds 5] [--warmup 1]
 *        [--window 1000] [--messages N] [--dynamic-batch true|false]
 */
public final class StreamPublish {
    public static void main(String[] args) throws Exception {
        String mode = Meter.arg(args, "mode", "max");
        int size = Integer.parseInt(Meter.arg(args, "size", "1024"));
        int window = mode.equals("single") ? 1 : Integer.parseInt(Meter.arg(args, "window", "1000"));
        byte[] body = Meter.payload(size);
        try (Environment environment = Environment.builder().host(Meter.arg(args, "host", "127.0.0.1"))
                .port(Integer.parseInt(Meter.arg(args, "port", null)))
                .username(Meter.arg(args, "username", "guest")).password(Meter.arg(args, "password", "guest"))
                .build()) {
            Producer producer = environment.producerBuilder().stream(Meter.arg(args, "stream", null))
                    .maxUnconfirmedMessages(window)
                    // max: the client's own batching (batches of 100, as stream-perf-test's default); measured here,
                    // dynamic batching at a window of 1,000 took a third less. single: dynamic batching, which sends
                    // the one message at once (a batch of 100 would wait batchPublishingDelay for the rest)
                    .dynamicBatch(Boolean.parseBoolean(Meter.arg(args, "dynamic-batch", String.valueOf(window == 1))))
                    .build();
            Meter meter = new Meter("rabbitmq-stream-java", mode, window, size,
                    Double.parseDouble(Meter.arg(args, "warmup", "1")),
                    Double.parseDouble(Meter.arg(args, "seconds", "5"))).limit(Meter.arg(args, "messages", "0"));
            long sentAt;
            while ((sentAt = meter.next()) >= 0) {
                final long at = sentAt;
                producer.send(producer.messageBuilder().addData(body).build(),
                        status -> meter.done(at, status.isConfirmed(), System.nanoTime()));
            }
            boolean drained = meter.drain(60);
            producer.close();
            System.out.println(meter.json(drained, "\"client\": \"stream-client " + Environment.class.getPackage()
                    .getImplementationVersion() + "\""));
        }
    }
}
