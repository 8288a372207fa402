package bench;

import java.util.Arrays;
import java.util.Locale;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

/**
 * What every tool counts, as the worker counts a publish-only cell: the messages sent after a warm-up (the measured
 * ones), their acknowledgements over the time from the first measured send to the last measured acknowledgement,
 * and in single mode each measured message's publish latency (send to acknowledgement).
 */
final class Meter {
    final String tool;
    final String mode;
    final int window;
    final int size;
    final long measureStart;
    final long end;
    final Semaphore room;
    private long firstMeasuredSend = -1;
    private long sent;
    private long measuredSent;
    private final LongAdder acked = new LongAdder();
    private final LongAdder failed = new LongAdder();
    private final AtomicLong lastAck = new AtomicLong(Long.MIN_VALUE);
    private long limit = Long.MAX_VALUE;  // --messages: a backlog of this many is made, then the loop stops
    private long[] latencies = new long[1 << 16];
    private int latencyCount;

    Meter(String tool, String mode, int window, int size, double warmupS, double seconds) {
        this.tool = tool;
        this.mode = mode;
        this.window = window;
        this.size = size;
        long begin = System.nanoTime();
        this.measureStart = begin + (long) (warmupS * 1e9);
        this.end = measureStart + (long) (seconds * 1e9);
        this.room = new Semaphore(window);
    }

    /** Options "--name value" of a tool's command line. */
    static String arg(String[] args, String name, String fallback) {
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals("--" + name)) {
                return args[i + 1];
            }
        }
        if (fallback == null) {
            throw new IllegalArgumentException("--" + name + " is required");
        }
        return fallback;
    }

    static byte[] payload(int size) {
        byte[] body = new byte[size];
        for (int i = 0; i < size; i++) {
            body[i] = (byte) ('a' + i % 26);
        }
        return body;
    }

    /** Stops after `messages` sends (0: none), as a backlog of that many is made (broker_tools.py --drain). */
    Meter limit(String messages) {
        long n = Long.parseLong(messages);
        limit = n > 0 ? n : Long.MAX_VALUE;
        return this;
    }

    /** Takes a place in the window, then the send time; false once the measured time is over (or the limit sent). */
    long next() throws InterruptedException {
        room.acquire();
        long now = System.nanoTime();
        if (now >= end || sent >= limit) {
            room.release();
            return -1;
        }
        sent++;
        if (now >= measureStart) {
            measuredSent++;
            if (firstMeasuredSend < 0) {
                firstMeasuredSend = now;
            }
        }
        return now;
    }

    boolean measured(long sentAt) {
        return sentAt >= measureStart;
    }

    /** An acknowledgement (ok) or a refusal of the message sent at sentAt, arrived at `at`; frees its place. */
    void done(long sentAt, boolean ok, long at) {
        if (sentAt >= measureStart) {
            if (ok) {
                acked.increment();
                lastAck.accumulateAndGet(at, Math::max);
                if (window == 1) {
                    latency(at - sentAt);
                }
            } else {
                failed.increment();
            }
        }
        room.release();
    }

    private synchronized void latency(long ns) {
        if (latencyCount == latencies.length) {
            latencies = Arrays.copyOf(latencies, latencyCount * 2);
        }
        latencies[latencyCount++] = ns;
    }

    /** Waits for every place of the window to be free again: all sent messages answered. */
    boolean drain(double timeoutS) throws InterruptedException {
        if (!room.tryAcquire(window, (long) (timeoutS * 1000), TimeUnit.MILLISECONDS)) {
            return false;
        }
        room.release(window);
        return true;
    }

    private synchronized double percentileUs(double q) {
        if (latencyCount == 0) {
            return Double.NaN;
        }
        long[] sorted = Arrays.copyOf(latencies, latencyCount);
        Arrays.sort(sorted);
        int index = (int) Math.min(latencyCount - 1, Math.max(0, Math.ceil(q * latencyCount) - 1));
        return sorted[index] / 1000.0;
    }

    private static String number(double x) {
        return Double.isNaN(x) ? "null" : String.format(Locale.ROOT, "%.3f", x);
    }

    /** The one JSON line broker_tools.py reads. */
    String json(boolean drained, String extra) {
        long ok = acked.sum();
        double windowS = lastAck.get() > firstMeasuredSend && firstMeasuredSend >= 0
                ? (lastAck.get() - firstMeasuredSend) / 1e9 : Double.NaN;
        double rate = Double.isNaN(windowS) ? Double.NaN : ok / windowS;
        return "{\"tool\": \"" + tool + "\", \"mode\": \"" + mode + "\", \"window\": " + window + ", \"size\": " + size
                + ", \"sent\": " + sent + ", \"measured_sent\": " + measuredSent + ", \"acked\": " + ok
                + ", \"failed\": " + failed.sum() + ", \"drained\": " + drained + ", \"window_s\": " + number(windowS)
                + ", \"msgs_per_s\": " + number(rate) + ", \"publish_p50_us\": " + number(percentileUs(0.5))
                + ", \"publish_p99_us\": " + number(percentileUs(0.99)) + (extra.isEmpty() ? "" : ", " + extra) + "}";
    }
}
