package bench;

import com.rabbitmq.stream.Consumer;
import com.rabbitmq.stream.Environment;
import com.rabbitmq.stream.OffsetSpecification;

/**
 * A bare RabbitMQ stream-client consume loop with the worker's consumer settings (brokers/rabbitmq_streams/driver.py
 * StreamsConsumer): one subscription from the first offset, an initial credit of `credit` chunks (rabbitmq_prefetch;
 * the client's default flow strategy grants a chunk back as each is handed over), no offset tracking (the worker
 * stores its offset once a second: one request, nothing per message). Prints "subscribed" once subscribed, then one
 * JSON line when `idle` seconds pass with nothing after its first message (Reading).
 *
 * usage: StreamConsume --host H --port P --stream S [--credit 1000] [--idle 3] [--limit 120]
 */
public final class StreamConsume {
    public static void main(String[] args) throws Exception {
        Reading reading = new Reading();
        try (Environment environment = Environment.builder().host(Meter.arg(args, "host", "127.0.0.1"))
                .port(Integer.parseInt(Meter.arg(args, "port", null)))
                .username(Meter.arg(args, "username", "guest")).password(Meter.arg(args, "password", "guest"))
                .build()) {
            Consumer consumer = environment.consumerBuilder().stream(Meter.arg(args, "stream", null))
                    .offset(OffsetSpecification.first()).noTrackingStrategy()
                    .flow().initialCredits(Integer.parseInt(Meter.arg(args, "credit", "1000"))).builder()
                    .messageHandler((context, message) -> reading.got(message.getBodyAsBinary().length))
                    .build();
            System.out.println("subscribed");
            System.out.flush();
            reading.await(Double.parseDouble(Meter.arg(args, "idle", "3")),
                    Double.parseDouble(Meter.arg(args, "limit", "120")));
            consumer.close();
            System.out.println(reading.json("rabbitmq-stream-java-consume",
                    "stream-client " + Environment.class.getPackage().getImplementationVersion()));
        }
    }
}
