package bench;

import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.AppInfoParser;

/**
 * A bare Kafka Java client publish loop with the worker's producer settings (brokers/kafka/driver.py
 * producer_config): acks, compression, batch.size, linger.ms in batch mode (0 in single mode, as the worker's),
 * enable.idempotence as the worker's (the Java client's default would turn it on under acks=all, librdkafka's does
 * not), the worker's requests in flight per connection (5) and buffer (32 MB), both the Java client's defaults
 * too. Single mode waits for each message's acknowledgement (send(record).get()), as ProducerPerformance
 * cannot; max keeps up to `window` unacknowledged under a semaphore.
 *
 * usage: KafkaPublish --bootstrap H:P --topic T --mode max|single [--size 1024] [--seconds 5] [--warmup 1]
 *        [--window 32768] [--acks all] [--linger-ms 5] [--batch-bytes 1048576] [--compression none]
 *        [--idempotence false] [--buffer-bytes 33554432] [--requests-in-flight 5] [--messages N]
 */
public final class KafkaPublish {
    public static void main(String[] args) throws Exception {
        String mode = Meter.arg(args, "mode", "max");
        boolean single = mode.equals("single");
        int size = Integer.parseInt(Meter.arg(args, "size", "1024"));
        int window = single ? 1 : Integer.parseInt(Meter.arg(args, "window", "32768"));
        String topic = Meter.arg(args, "topic", null);
        Properties config = new Properties();
        config.put("bootstrap.servers", Meter.arg(args, "bootstrap", null));
        config.put("acks", Meter.arg(args, "acks", "all"));
        config.put("linger.ms", single ? "0" : Meter.arg(args, "linger-ms", "5"));
        config.put("batch.size", Meter.arg(args, "batch-bytes", "1048576"));
        config.put("compression.type", Meter.arg(args, "compression", "none"));
        config.put("enable.idempotence", Meter.arg(args, "idempotence", "false"));
        config.put("buffer.memory", Meter.arg(args, "buffer-bytes", "33554432"));
        config.put("max.in.flight.requests.per.connection", Meter.arg(args, "requests-in-flight", "5"));
        config.put("max.request.size", Integer.toString(16 * 1024 * 1024));
        config.put("key.serializer", ByteArraySerializer.class.getName());
        config.put("value.serializer", ByteArraySerializer.class.getName());
        ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(topic, 0, null, Meter.payload(size));
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(config)) {
            producer.partitionsFor(topic);  // the topic's metadata before the clock starts
            Meter meter = new Meter("kafka-java", mode, window, size,
                    Double.parseDouble(Meter.arg(args, "warmup", "1")),
                    Double.parseDouble(Meter.arg(args, "seconds", "5"))).limit(Meter.arg(args, "messages", "0"));
            long sentAt;
            while ((sentAt = meter.next()) >= 0) {
                if (single) {
                    boolean ok = true;
                    try {
                        producer.send(record).get();
                    } catch (Exception e) {
                        ok = false;
                    }
                    meter.done(sentAt, ok, System.nanoTime());
                } else {
                    final long at = sentAt;
                    producer.send(record, (metadata, error) -> meter.done(at, error == null, System.nanoTime()));
                }
            }
            boolean drained = meter.drain(60);
            System.out.println(meter.json(drained, "\"client\": \"kafka-clients " + AppInfoParser.getVersion()
                    + "\""));
        }
    }
}
