package bench;

/**
 * What a bench/tools consume loop read: deliveries counted as its client hands them over (on the client's one
 * delivery thread), the first and last stamped, until `idle` seconds pass with nothing after the first message (or
 * `limit` seconds in all). Its JSON line has PulsarConsume's fields: received, bytes, window_s (first message to
 * last), msgs_per_s (the messages after the first over that window).
 */
final class Reading {
    private volatile long received;
    private volatile long bytes;
    private volatile long first;
    private volatile long last;

    /** One delivery of `length` bytes (called from one thread at a time). */
    void got(int length) {
        long now = System.nanoTime();
        if (received == 0) {
            first = now;
        }
        last = now;
        bytes += length;
        received++;
    }

    long received() {
        return received;
    }

    /** Returns once `idleS` seconds passed with nothing new after the first message, or `limitS` in all. */
    void await(double idleS, double limitS) throws InterruptedException {
        long start = System.nanoTime(), idleNs = (long) (idleS * 1e9), limitNs = (long) (limitS * 1e9);
        while (System.nanoTime() - start < limitNs) {
            Thread.sleep(50);
            if (received > 0 && System.nanoTime() - last >= idleNs) {
                return;
            }
        }
    }

    String json(String tool, String client) {
        long n = received;
        double windowS = (last - first) / 1e9;
        String rate = n > 1 && windowS > 0 ? String.format("%.3f", (n - 1) / windowS) : "null";
        return String.format("{\"tool\": \"%s\", \"received\": %d, \"bytes\": %d, \"window_s\": %.3f, \"msgs_per_s\": %s,"
                + " \"client\": \"%s\"}", tool, n, bytes, windowS, rate, client);
    }
}
