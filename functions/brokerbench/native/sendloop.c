/*
 * The producer's send loop in C: the open-loop schedule, the 20-byte framing header, the two
 * timestamps per message and the acknowledgement records, with no interpreter work per message.
 *
 * The loop is the same as the Python one in brokerbench/worker/producer.py (which stays as the
 * fallback): message `seq` is due when the schedule says (brokerbench/worker/schedule.py: a backlog
 * phase, then cycles of `period` ns whose messages are due at the given offsets; a constant rate is one
 * message per cycle at offset 0, i.e. base + seq * period); the loop waits for it (serving
 * acknowledgements while it waits), takes it up (t0), encodes it, hands it over (t1) and sends
 * it with the header (producer id, seq, intended ns) as its Kafka key, its Redis field, or at the start of the
 * body (NATS, Pulsar, RabbitMQ: as their Python drivers send it). A call of
 * `send_until` stops at an interval boundary, at the end of the run or at a message limit, and
 * `take()` hands the interval's raw timestamps and acknowledgements to Python, which derives
 * every figure from them in bulk.
 *
 * Waits block rather than spin (see wait_until), so a producer ahead of schedule leaves the cores to
 * the broker and the consumer. Every acknowledgement is stamped when it arrives, never when the loop
 * next wakes: a Redis, NATS or RabbitMQ loop waits on its socket (ppoll until the next message is due)
 * and stamps each reply as it is read (conn_read); Kafka's delivery reports are served by a thread waiting
 * in rd_kafka_poll (batch mode) or by rd_kafka_flush/rd_kafka_poll on the loop's own thread (single mode),
 * and stamped in the callback; Pulsar's receipts are stamped in the C client's callback, on its thread.
 *
 * Kafka goes through librdkafka and Pulsar through libpulsar's C API, each resolved at run time from the
 * library the Python client loaded, so the native loop and the Python client use one build. Redis, NATS
 * JetStream and RabbitMQ go through a plain connection of the loop's own, speaking RESP (XADD), NATS's text
 * protocol (PUB with a reply subject per message; the PubAck comes back to it), AMQP 0-9-1 (a channel in
 * confirm mode) or RabbitMQ's stream protocol (a publisher per lane): messages are written as they fall due
 * and their answers read as they come, with at most the window of them unanswered (a sliding window, not
 * stop-and-wait).
 *
 * With raw payloads (no encode callable) a call runs without the GIL; with an encode callable it
 * holds the GIL while it encodes and lets go of it while it waits or polls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#define POLL_EVERY 64
#define HEADER_BYTES 20
#define SPIN_NS 2000 /* waits shorter than this spin on the clock */
#define STOP_BOUNDARY 0
#define STOP_END 1
#define STOP_LIMIT 2
#define RECONNECT_NS 500000000LL     /* NATS: a lost connection is made again this long after */
#define NATS_SERVERS 8               /* NATS: most servers of a cluster a sender moves between */
#define ACK_TIMEOUT_NS 5000000000LL /* NATS: a PubAck not come within this is no longer waited for (driver.py's ACK_TIMEOUT_S) */

/* ---- librdkafka, resolved from the library confluent-kafka loaded ---------------------------- */
static struct {
    int loaded;
    char version[64];
    __typeof__(&rd_kafka_conf_new) conf_new;
    __typeof__(&rd_kafka_conf_set) conf_set;
    __typeof__(&rd_kafka_conf_set_dr_msg_cb) conf_set_dr_msg_cb;
    __typeof__(&rd_kafka_conf_set_opaque) conf_set_opaque;
    __typeof__(&rd_kafka_conf_set_log_cb) conf_set_log_cb;
    __typeof__(&rd_kafka_opaque) opaque;
    __typeof__(&rd_kafka_conf_destroy) conf_destroy;
    __typeof__(&rd_kafka_new) new_;
    __typeof__(&rd_kafka_destroy) destroy;
    __typeof__(&rd_kafka_topic_new) topic_new;
    __typeof__(&rd_kafka_topic_destroy) topic_destroy;
    __typeof__(&rd_kafka_produce) produce;
    __typeof__(&rd_kafka_poll) poll;
    __typeof__(&rd_kafka_flush) flush;
    __typeof__(&rd_kafka_outq_len) outq_len;
    __typeof__(&rd_kafka_last_error) last_error;
    __typeof__(&rd_kafka_err2str) err2str;
    __typeof__(&rd_kafka_version_str) version_str;
    /* optional: without them a report is stamped when it is served (on_delivery) */
    __typeof__(&rd_kafka_conf_interceptor_add_on_new) conf_interceptor_add_on_new;
    __typeof__(&rd_kafka_interceptor_add_on_acknowledgement) interceptor_add_on_acknowledgement;
    /* optional, for the Python loop's plugin (AckStamps, conf_init): without them its producer is made without it */
    __typeof__(&rd_kafka_conf_interceptor_add_on_conf_set) conf_interceptor_add_on_conf_set;
    __typeof__(&rd_kafka_conf_interceptor_add_on_conf_destroy) conf_interceptor_add_on_conf_destroy;
    __typeof__(&rd_kafka_interceptor_add_on_response_received) interceptor_add_on_response_received; /* FetchStamps */
} rk;

static int hook_rdkafka_reads(void *lib);
static int rdkafka_reads_hooked;

static PyObject *rdkafka_reads_hooked_py(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyLong_FromLong(rdkafka_reads_hooked);
}

static PyObject *load_rdkafka(PyObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    if (rk.loaded) return PyUnicode_FromString(rk.version);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        PyErr_Format(PyExc_ImportError, "cannot load librdkafka from %s: %s", path, dlerror());
        return NULL;
    }
#define RESOLVE(field, name)                                                                      \
    if (!(*(void **)&rk.field = dlsym(lib, name))) {                                              \
        PyErr_Format(PyExc_ImportError, "%s has no %s", path, name);                              \
        return NULL;                                                                              \
    }
    RESOLVE(conf_new, "rd_kafka_conf_new");
    RESOLVE(conf_set, "rd_kafka_conf_set");
    RESOLVE(conf_set_dr_msg_cb, "rd_kafka_conf_set_dr_msg_cb");
    RESOLVE(conf_set_opaque, "rd_kafka_conf_set_opaque");
    RESOLVE(conf_set_log_cb, "rd_kafka_conf_set_log_cb");
    RESOLVE(opaque, "rd_kafka_opaque");
    RESOLVE(conf_destroy, "rd_kafka_conf_destroy");
    RESOLVE(new_, "rd_kafka_new");
    RESOLVE(destroy, "rd_kafka_destroy");
    RESOLVE(topic_new, "rd_kafka_topic_new");
    RESOLVE(topic_destroy, "rd_kafka_topic_destroy");
    RESOLVE(produce, "rd_kafka_produce");
    RESOLVE(poll, "rd_kafka_poll");
    RESOLVE(flush, "rd_kafka_flush");
    RESOLVE(outq_len, "rd_kafka_outq_len");
    RESOLVE(last_error, "rd_kafka_last_error");
    RESOLVE(err2str, "rd_kafka_err2str");
    RESOLVE(version_str, "rd_kafka_version_str");
#undef RESOLVE
    *(void **)&rk.conf_interceptor_add_on_new = dlsym(lib, "rd_kafka_conf_interceptor_add_on_new");
    *(void **)&rk.interceptor_add_on_acknowledgement = dlsym(lib, "rd_kafka_interceptor_add_on_acknowledgement");
    *(void **)&rk.conf_interceptor_add_on_conf_set = dlsym(lib, "rd_kafka_conf_interceptor_add_on_conf_set");
    *(void **)&rk.conf_interceptor_add_on_conf_destroy = dlsym(lib, "rd_kafka_conf_interceptor_add_on_conf_destroy");
    *(void **)&rk.interceptor_add_on_response_received = dlsym(lib, "rd_kafka_interceptor_add_on_response_received");
    snprintf(rk.version, sizeof rk.version, "%s", rk.version_str());
    rdkafka_reads_hooked = hook_rdkafka_reads(lib); /* GOT slots of librdkafka moved to rdkafka_recvmsg, rdkafka_read */
    rk.loaded = 1;
    return PyUnicode_FromString(rk.version);
}

/* ---- Pulsar's C API, resolved from the libpulsar that pulsar-client loaded ------------------------- */
typedef struct pl_client pl_client;
typedef struct pl_client_conf pl_client_conf;
typedef struct pl_producer pl_producer;
typedef struct pl_producer_conf pl_producer_conf;
typedef struct pl_message pl_message;
typedef struct pl_message_id pl_message_id;
typedef void (*pl_send_cb)(int result, pl_message_id *id, void *ctx);
typedef void (*pl_logger)(int level, const char *file, int line, const char *message, void *ctx);
static struct {
    int loaded;
    pl_client_conf *(*client_conf_create)(void);
    void (*client_conf_free)(pl_client_conf *);
    void (*client_conf_set_timeout)(pl_client_conf *, int);
    void (*client_conf_set_listener)(pl_client_conf *, const char *);
    void (*client_conf_set_logger)(pl_client_conf *, pl_logger, void *);
    void (*client_conf_set_stats_interval)(pl_client_conf *, unsigned int);
    pl_client *(*client_create)(const char *, const pl_client_conf *);
    int (*client_create_producer)(pl_client *, const char *, const pl_producer_conf *, pl_producer **);
    int (*client_close)(pl_client *);
    void (*client_free)(pl_client *);
    pl_producer_conf *(*producer_conf_create)(void);
    void (*producer_conf_free)(pl_producer_conf *);
    void (*set_send_timeout)(pl_producer_conf *, int);
    void (*set_max_pending)(pl_producer_conf *, int);
    void (*set_block_if_queue_full)(pl_producer_conf *, int);
    void (*set_batching_enabled)(pl_producer_conf *, int);
    void (*set_batching_max_messages)(pl_producer_conf *, unsigned int);
    void (*set_batching_max_bytes)(pl_producer_conf *, unsigned long);
    void (*set_batching_max_delay_ms)(pl_producer_conf *, unsigned long);
    pl_message *(*message_create)(void);
    void (*message_free)(pl_message *);
    void (*message_set_content)(pl_message *, const void *, size_t);
    void (*message_set_allocated_content)(pl_message *, void *, size_t);
    void (*message_id_free)(pl_message_id *);
    void (*producer_send_async)(pl_producer *, pl_message *, pl_send_cb, void *);
    int (*producer_close)(pl_producer *);
    void (*producer_free)(pl_producer *);
    const char *(*result_str)(int);
} pl;

static PyObject *load_pulsar(PyObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    if (pl.loaded) Py_RETURN_NONE;
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) return PyErr_Format(PyExc_ImportError, "cannot load libpulsar from %s: %s", path, dlerror());
#define RESOLVE(field, name)                                                                      \
    if (!(*(void **)&pl.field = dlsym(lib, name))) return PyErr_Format(PyExc_ImportError, "%s has no %s", path, name);
    RESOLVE(client_conf_create, "pulsar_client_configuration_create");
    RESOLVE(client_conf_free, "pulsar_client_configuration_free");
    RESOLVE(client_conf_set_timeout, "pulsar_client_configuration_set_operation_timeout_seconds");
    RESOLVE(client_conf_set_listener, "pulsar_client_configuration_set_listener_name");
    RESOLVE(client_conf_set_logger, "pulsar_client_configuration_set_logger");
    RESOLVE(client_conf_set_stats_interval, "pulsar_client_configuration_set_stats_interval_in_seconds");
    RESOLVE(client_create, "pulsar_client_create");
    RESOLVE(client_create_producer, "pulsar_client_create_producer");
    RESOLVE(client_close, "pulsar_client_close");
    RESOLVE(client_free, "pulsar_client_free");
    RESOLVE(producer_conf_create, "pulsar_producer_configuration_create");
    RESOLVE(producer_conf_free, "pulsar_producer_configuration_free");
    RESOLVE(set_send_timeout, "pulsar_producer_configuration_set_send_timeout");
    RESOLVE(set_max_pending, "pulsar_producer_configuration_set_max_pending_messages");
    RESOLVE(set_block_if_queue_full, "pulsar_producer_configuration_set_block_if_queue_full");
    RESOLVE(set_batching_enabled, "pulsar_producer_configuration_set_batching_enabled");
    RESOLVE(set_batching_max_messages, "pulsar_producer_configuration_set_batching_max_messages");
    RESOLVE(set_batching_max_bytes, "pulsar_producer_configuration_set_batching_max_allowed_size_in_bytes");
    RESOLVE(set_batching_max_delay_ms, "pulsar_producer_configuration_set_batching_max_publish_delay_ms");
    RESOLVE(message_create, "pulsar_message_create");
    RESOLVE(message_free, "pulsar_message_free");
    RESOLVE(message_set_content, "pulsar_message_set_content");
    RESOLVE(message_set_allocated_content, "pulsar_message_set_allocated_content");
    RESOLVE(message_id_free, "pulsar_message_id_free");
    RESOLVE(producer_send_async, "pulsar_producer_send_async");
    RESOLVE(producer_close, "pulsar_producer_close");
    RESOLVE(producer_free, "pulsar_producer_free");
    RESOLVE(result_str, "pulsar_result_str");
#undef RESOLVE
    pl.loaded = 1;
    Py_RETURN_NONE;
}

/* ---- small helpers --------------------------------------------------------------------------- */
static inline int64_t now_ns(void) { /* the clock of time.monotonic_ns() */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#ifndef SO_TIMESTAMPNS
#define SO_TIMESTAMPNS 35
#endif
/* A kernel stamp further back than this is not taken (see brokers/socket_buffer.py STAMP_AGE_MAX_NS). */
#define STAMP_AGE_MAX_NS 60000000000LL
/* The offset between the clocks: a real-time reading between two monotonic ones at most this far apart, read again
   up to CLOCK_PAIR_TRIES times (see brokers/socket_buffer.py CLOCK_PAIR_NS). */
#define CLOCK_PAIR_NS 20000
#define CLOCK_PAIR_TRIES 3

/* The arrival of what a recvmsg() with a control buffer returned, in *arrived (see recv_stamped); 1 where the kernel
   stamped it, 0 where it did not (the socket without SO_TIMESTAMPNS, a stamp too old): then the read's return. */
static int arrival_of(struct msghdr *msg, int64_t *arrived) {
    int64_t returned = now_ns(), before = returned, after = returned;
    *arrived = returned;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SO_TIMESTAMPNS) continue;
        struct timespec real, at;
        for (int i = 0; i < CLOCK_PAIR_TRIES; i++) { /* the real-time clock between two monotonic readings close together */
            clock_gettime(CLOCK_REALTIME, &real);
            after = now_ns();
            if (after - before <= CLOCK_PAIR_NS) break;
            before = after;
        }
        memcpy(&at, CMSG_DATA(c), sizeof at);
        int64_t age = ((int64_t)real.tv_sec - (int64_t)at.tv_sec) * 1000000000LL + (real.tv_nsec - at.tv_nsec);
        if (age <= STAMP_AGE_MAX_NS) {
            int64_t stamp = after - (age > 0 ? age : 0);
            *arrived = stamp < returned ? stamp : returned;
            return 1;
        }
    }
    return 0;
}

/* recv(), and in *arrived when what it returned arrived: the kernel's receive time of its last segment
   (SO_TIMESTAMPNS, set by tcp_connect), moved from CLOCK_REALTIME to the monotonic clock by the offset between the
   clocks read right after the read (real time first: the conversion errs late by the tens of ns between the two
   reads, never early), and never later than the read's return. The loop reads late whenever it is busy sending or
   waking from a wait; the kernel's stamp is the same however late. Without a stamp, the read's return. As
   brokers/socket_buffer.py recv_stamped does for the Python loop. */
static ssize_t recv_stamped_by(ssize_t (*receive)(int, struct msghdr *, int), int fd, void *buf, size_t len,
                               int flags, int64_t *arrived, int *kernel) {
    union {
        char buf[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {buf, len};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    ssize_t n = receive(fd, &msg, flags);
    if (n > 0) *kernel = arrival_of(&msg, arrived);
    return n;
}

static ssize_t recv_stamped(int fd, void *buf, size_t len, int flags, int64_t *arrived) {
    int kernel;
    return recv_stamped_by(recvmsg, fd, buf, len, flags, arrived, &kernel);
}

/* ---- the kernel's receive time of librdkafka's reads ------------------------------------------------------------
   librdkafka owns its sockets and reads a response with recvmsg() on its broker thread, with no control buffer
   (rd_kafka_transport_socket_recvmsg), so the kernel's receive time of what it read is dropped. The broker thread
   comes to read only after it wakes from its poll (tens of µs on a quiet host, more when it waits for a core:
   bench/client_stamp_lag.py), so a stamp taken there (an interceptor's) counts its wake. hook_rdkafka_reads points
   librdkafka's own reference to recvmsg (its GOT slot, found through its dynamic relocations: a JUMP_SLOT, or a
   GLOB_DAT where it was built without a PLT) at rdkafka_recvmsg, which reads with a control buffer as recv_stamped
   does, notes in a thread-local the arrival of the latest read that returned data, and sets SO_TIMESTAMPNS on a
   socket whose read came without a stamp (a connection's first responses, ApiVersions and Metadata, come before any
   Produce or Fetch response). A response is read in reads bounded by its own frame (its 4-byte length, then exactly
   its payload: rd_kafka_transport_framed_recv), so the latest read before on_response_received is the one that
   completed that response: take_read_arrival gives its arrival, once. Over TLS the socket is read by OpenSSL, which
   confluent-kafka's librdkafka holds within itself and which reads with read(): its slot is moved too (rdkafka_read),
   and OpenSSL reads a record's header, then exactly its body, so the latest read before a response is handled brought
   its last record. Only librdkafka's references are moved. A response that finds no read noted (none since the last
   response was taken) is stamped as the interceptor runs, and says so (kernel 0). */
static ssize_t (*libc_recvmsg)(int, struct msghdr *, int);
static ssize_t (*libc_read)(int, void *, size_t);
static __thread struct {
    int64_t at;  /* the arrival of the latest read through rdkafka_recvmsg or rdkafka_read that returned data; 0: taken since */
    int kernel;  /* whether the kernel stamped it */
} last_read;

/* A read of librdkafka's that returned data: its arrival noted for the response it completes (take_read_arrival), and
   SO_TIMESTAMPNS set on a socket whose read came without the kernel's stamp, for its next reads. */
static void note_read(int fd, int64_t at, int kernel) {
    last_read.at = at, last_read.kernel = kernel;
    static const int one = 1;
    if (!kernel) setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
}

static ssize_t rdkafka_recvmsg(int fd, struct msghdr *msg, int flags) {
    if (msg->msg_control || msg->msg_controllen) return libc_recvmsg(fd, msg, flags); /* the caller's own */
    union {
        char buf[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } control;
    msg->msg_control = control.buf;
    msg->msg_controllen = sizeof control.buf;
    ssize_t n = libc_recvmsg(fd, msg, flags);
    int saved = errno;
    if (n > 0) {
        int64_t at;
        int kernel = arrival_of(msg, &at);
        note_read(fd, at, kernel);
    }
    msg->msg_control = NULL;
    msg->msg_controllen = 0;
    errno = saved;
    return n;
}

/* librdkafka's read(): OpenSSL's, of a TLS connection's records (its socket BIO reads with read(), and the wheel's
   librdkafka holds OpenSSL within itself), and of librdkafka's wake-up descriptors. A socket is read with recvmsg()
   and a control buffer, and the read noted as rdkafka_recvmsg's are (OpenSSL reads a record's header, then exactly
   its body, so the latest read before a response is handled brought the end of its last record); anything else
   (ENOTSOCK) is read as it was. */
static ssize_t rdkafka_read(int fd, void *buf, size_t count) {
    int64_t at;
    int kernel = 0;
    ssize_t n = recv_stamped_by(libc_recvmsg, fd, buf, count, 0, &at, &kernel);
    if (n < 0 && errno == ENOTSOCK) return libc_read(fd, buf, count);
    int saved = errno;
    if (n > 0) note_read(fd, at, kernel);
    errno = saved;
    return n;
}

/* The arrival of the read that completed the response this broker thread is about to handle (see above), taken once;
   *kernel whether the kernel stamped it. Without a read noted since the last take: now, not the kernel's. */
static int64_t take_read_arrival(int *kernel) {
    int64_t at = last_read.at;
    *kernel = at ? last_read.kernel : 0;
    last_read.at = 0;
    return at ? at : now_ns();
}

/* The kernel stamps a received packet only while some socket asks for it, and turning that on when none did is
   deferred to a work queue (net_enable_timestamp): a packet that comes in meanwhile carries no time, and a read of it
   none (arrival_of: 0). So when librdkafka is resolved the process asks for it on a socket it keeps (before any of
   librdkafka's connections, which ask for it only after their first read), and waits until a segment over a
   loopback connection of its own comes stamped (at most TIMESTAMPING_WAIT_MS). Returns whether it did. */
#define TIMESTAMPING_WAIT_MS 200
static void sleep_ns(int64_t ns);
static int timestamping_kept = -1; /* the socket that keeps the kernel stamping, for the process's life */

static int keep_timestamping(void) {
    static const int one = 1;
    if (timestamping_kept < 0 && (timestamping_kept = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) >= 0)
        setsockopt(timestamping_kept, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof at;
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), out = -1, in = -1, stamped = 0;
    if (listener >= 0 && !bind(listener, (struct sockaddr *)&at, len) && !listen(listener, 1) &&
        !getsockname(listener, (struct sockaddr *)&at, &len) &&
        (out = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 && !connect(out, (struct sockaddr *)&at, len) &&
        (in = accept(listener, NULL, NULL)) >= 0 &&
        !setsockopt(in, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one))
        for (int waited = 0; !stamped && waited <= TIMESTAMPING_WAIT_MS; waited++) {
            char byte = 0;
            int64_t arrived;
            if (send(out, &byte, 1, 0) != 1 || recv_stamped_by(recvmsg, in, &byte, 1, 0, &arrived, &stamped) != 1)
                break;
            if (!stamped) sleep_ns(1000000);
        }
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    if (listener >= 0) close(listener);
    return stamped;
}

/* The protection of the page holding `address` (PROT_*), from /proc/self/maps; -1 where not found. */
static int page_protection(uintptr_t address) {
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps) return -1;
    char line[512], perms[8];
    unsigned long start, end;
    int found = -1;
    while (found < 0 && fgets(line, sizeof line, maps))
        if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) == 3 && address >= start && address < end)
            found = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
                    (perms[2] == 'x' ? PROT_EXEC : 0);
    fclose(maps);
    return found;
}

/* Points each of `lib`'s (librdkafka's, loaded) relocations of recvmsg and read at rdkafka_recvmsg and rdkafka_read;
   the number moved. */
static int hook_rdkafka_reads(void *lib) {
    struct link_map *map = NULL;
    if (dlinfo(lib, RTLD_DI_LINKMAP, &map) || !map || !map->l_ld) return 0;
    if (!libc_recvmsg && !(*(void **)&libc_recvmsg = dlsym(RTLD_DEFAULT, "recvmsg"))) return 0;
    if (!libc_read && !(*(void **)&libc_read = dlsym(RTLD_DEFAULT, "read"))) return 0;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) *tables[2] = {NULL, NULL};
    size_t sizes[2] = {0, 0};
    for (const ElfW(Dyn) *d = map->l_ld; d->d_tag != DT_NULL; d++) {
        /* the loader has moved these to their addresses on most targets; where it did not, they are offsets */
        uintptr_t at = d->d_un.d_ptr < map->l_addr ? map->l_addr + d->d_un.d_ptr : d->d_un.d_ptr;
        switch (d->d_tag) {
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)at; break;
        case DT_STRTAB: strtab = (const char *)at; break;
        case DT_JMPREL: tables[0] = (const ElfW(Rela) *)at; break;
        case DT_PLTRELSZ: sizes[0] = d->d_un.d_val; break;
        case DT_RELA: tables[1] = (const ElfW(Rela) *)at; break;
        case DT_RELASZ: sizes[1] = d->d_un.d_val; break;
        }
    }
    if (!symtab || !strtab) return 0;
    keep_timestamping();
    long page = sysconf(_SC_PAGESIZE);
    int moved = 0;
    for (int t = 0; t < 2; t++)
        for (size_t i = 0; tables[t] && i < sizes[t] / sizeof(ElfW(Rela)); i++) {
            const ElfW(Rela) *r = &tables[t][i];
            unsigned type = ELF64_R_TYPE(r->r_info), sym = ELF64_R_SYM(r->r_info);
            const char *name = sym ? strtab + symtab[sym].st_name : "";
            void *to = !strcmp(name, "recvmsg") ? (void *)rdkafka_recvmsg : !strcmp(name, "read") ? (void *)rdkafka_read
                                                                                                 : NULL;
            if ((type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT && type != R_AARCH64_JUMP_SLOT &&
                 type != R_AARCH64_GLOB_DAT) || !to)
                continue;
            void **slot = (void **)(map->l_addr + r->r_offset);
            uintptr_t start = (uintptr_t)slot & ~(uintptr_t)(page - 1);
            int protection = page_protection((uintptr_t)slot);
            if (protection < 0) continue;
            if (!(protection & PROT_WRITE) && mprotect((void *)start, page, protection | PROT_WRITE)) continue;
            __atomic_store_n(slot, to, __ATOMIC_SEQ_CST);
            if (!(protection & PROT_WRITE)) mprotect((void *)start, page, protection); /* RELRO again */
            moved++;
        }
    return moved;
}

static void sleep_ns(int64_t ns) {
    struct timespec ts = {ns / 1000000000LL, ns % 1000000000LL};
    nanosleep(&ts, NULL);
}

typedef struct {
    int64_t *data;
    Py_ssize_t len, cap;
} i64buf;

static int buf_push(i64buf *b, int64_t v) {
    if (b->len == b->cap) {
        Py_ssize_t cap = b->cap ? b->cap * 2 : 65536;
        int64_t *data = realloc(b->data, (size_t)cap * sizeof(int64_t));
        if (!data) return -1;
        b->data = data;
        b->cap = cap;
    }
    b->data[b->len++] = v;
    return 0;
}

static PyObject *buf_take(i64buf *b) { /* the values as bytes (int64, native order); empties b */
    PyObject *out = PyBytes_FromStringAndSize((const char *)b->data, b->len * (Py_ssize_t)sizeof(int64_t));
    b->len = 0;
    return out;
}

static inline void put_header(char *out, uint32_t producer, int64_t seq, int64_t intended) {
    /* struct "<IQQ": little-endian producer id, sequence, intended send time */
    uint64_t s = (uint64_t)seq, t = (uint64_t)intended;
    for (int i = 0; i < 4; i++) out[i] = (char)(producer >> (8 * i));
    for (int i = 0; i < 8; i++) out[4 + i] = (char)(s >> (8 * i));
    for (int i = 0; i < 8; i++) out[12 + i] = (char)(t >> (8 * i));
}

/* ---- the sender object ----------------------------------------------------------------------- */
enum { KIND_KAFKA = 1, KIND_REDIS = 2, KIND_NATS = 3, KIND_PULSAR = 4, KIND_AMQP = 5, KIND_STREAM = 6, KIND_PWIRE = 7 };
#define ON_ITS_SOCKET(s) ((s)->kind == KIND_REDIS || WINDOWED(s))
#define WINDOWED(s) ((s)->kind == KIND_NATS || (s)->kind == KIND_AMQP || (s)->kind == KIND_STREAM || (s)->kind == KIND_PWIRE) /* [win_low, win_next) */

/* RabbitMQ streams: a lane's publishes staged for its next Publish frame. */
typedef struct {
    char *data;
    size_t len, cap;
    int32_t count;
} lane_buf;

/* NATS: a publish awaiting its PubAck, by sequence number (a ring of the window's size). */
typedef struct {
    int64_t sent_ns; /* when it was buffered for writing */
    char pending;    /* 1 until its PubAck (or an error reply) came, it expired, or the connection was lost */
} window_slot;

typedef struct {
    PyObject_HEAD int kind;
    int partitions;
    int single; /* Kafka: wait for each message's acknowledgement before the next */
    /* Kafka */
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt;
    /* Batch mode: an acknowledgement thread serves librdkafka's delivery reports, so a burst of
       thousands of them never stalls the send loop. It records into `stage`, then moves that into
       ack_seq/ack_ns under ack_lock; take() empties those under the same lock. */
    pthread_t acker;
    int acker_running;
    volatile int acker_stop;
    pthread_mutex_t ack_lock;
    i64buf stage_seq, stage_ns;
    i64buf stage_failed;
    /* Each acknowledgement's stamp as librdkafka's broker thread handles the produce response (on_acknowledgement),
       by seq modulo KAFKA_STAMPS, read back when its delivery report is served (on_delivery); NULL: stamped there */
    struct kafka_stamp *kafka_stamps;
    int64_t handled_stamps; /* acknowledgements stamped so (the others: as served) */
    int64_t arrival_stamps; /* of them, at the kernel's receive time of their response (rdkafka_recvmsg) */
    int64_t served_stamps;  /* acknowledgements stamped as their report was served */
    /* Redis and NATS: one TCP connection, written and read by this loop */
    int fd;
    int depth;
    char **prefix; /* per partition: "*7 XADD <key> * h $20" up to the header bytes; NATS "PUB <subject> <inbox>." */
    size_t *prefix_len;
    char *out;
    size_t out_len, out_cap;
    char *in;
    size_t in_len, in_pos, in_cap;
    i64buf pending; /* seqs of the XADDs in flight (buffered or written, not yet answered), from pending_head */
    Py_ssize_t pending_head;
    /* NATS: publishes in flight are the seqs [win_low, win_next) whose slot is pending; the window is counted
       from the oldest one still awaited (JetStream answers a connection's publishes to one stream in order). */
    window_slot *ring;
    int64_t win_low, win_next;
    int win_started;
    char *inbox; /* "_INBOX.<random>": each publish's reply subject is inbox.<seq> */
    size_t inbox_len;
    char *host;
    int port;
    double timeout_s;
    int64_t reconnect_at; /* a lost connection is made again from then on (0: none lost) */
    int64_t arrived_ns;   /* when what the last read brought arrived (recv_stamped): the stamp of its replies */
    /* NATS: a cluster's servers, [0] the one the sender was made with (host, port); a lost connection, or one
       that could not be made, is made next to the following one, round the list */
    char server_host[NATS_SERVERS][256];
    int server_port[NATS_SERVERS];
    int servers, server_at;
    /* Pulsar: the client, a producer per lane, the messages handed over and not answered yet (under ack_lock;
       `acked` is signalled with each answer), and the buffer a message's body is put together in */
    pl_client *pclient;
    pl_producer **producers;
    int64_t pl_in_flight;
    pthread_cond_t acked;
    int pl_waiting; /* a thread waits on `acked` */
    struct pl_block *pl_free;
    size_t pl_pool_bytes;
    char *scratch;
    size_t scratch_cap;
    /* AMQP: the channel's delivery tags count its publishes from 1: tag t confirms seq amqp_seq0 + t - 1 */
    int64_t amqp_seq0, amqp_published;
    int frame_max;
    int amqp_closing_channel;
    /* RabbitMQ streams: each lane's staged publishes, and their bytes in all */
    lane_buf *lanes;
    size_t staged;
    /* Pulsar's binary protocol: each lane's batch (its first and last seq, when it is due to go out at the latest)
       and its producer's name as the broker gave it; how batches are bounded; 0 batching: one message a frame */
    int64_t *pw_first, *pw_last, *pw_due;
    char **pw_name;
    size_t *pw_name_len;
    int pw_batching;
    long pw_max_messages, pw_max_bytes;
    int64_t pw_delay_ns;
    /* the payloads */
    PyObject *objects; /* list: bytes (raw) or records for `encode` */
    PyObject *encode;  /* callable or NULL */
    const char **payload;
    Py_ssize_t *payload_len;
    Py_ssize_t pool;
    uint32_t producer_id;
    int64_t base;
    double period; /* ns of one cycle (of one message at a constant rate); 0 = as fast as possible */
    int64_t *cycle_offsets; /* when each message of a cycle is due, from the cycle's start */
    int64_t cycle_len;
    int64_t backlog;        /* messages of the backlog phase, before the first cycle */
    double backlog_period;  /* ns between backlog messages */
    /* what `take()` hands over */
    i64buf started, handed, ack_seq, ack_ns;
    i64buf failed; /* the seqs of failed sends */
    /* Kafka: librdkafka's own log lines ("level\tfacility\ttext\n", under ack_lock), handed over by logs(), and
       how many a full buffer dropped since */
    char *log_text;
    size_t log_len;
    int64_t log_dropped;
    int oom;
    char error[512];
} Sender;

static PyTypeObject SenderType;

/* librdkafka's log callback (its own threads, or the one that destroys the producer): the line kept for logs(), which
   hands it to Python's logging, instead of librdkafka's default print to stderr. A full buffer drops, and counts. */
#define LOG_BYTES 65536
static void on_log(const rd_kafka_t *r, int level, const char *fac, const char *buf) {
    Sender *s = rk.opaque(r);
    if (!s) return;
    char line[1024];
    int n = snprintf(line, sizeof line, "%d\t%s\t%s\n", level, fac, buf);
    if (n < 0) return;
    if ((size_t)n >= sizeof line) n = sizeof line - 1, line[n - 1] = '\n';
    pthread_mutex_lock(&s->ack_lock);
    if (!s->log_text) s->log_text = malloc(LOG_BYTES);
    if (s->log_text && s->log_len + (size_t)n <= LOG_BYTES) {
        memcpy(s->log_text + s->log_len, line, (size_t)n);
        s->log_len += (size_t)n;
    } else {
        s->log_dropped++;
    }
    pthread_mutex_unlock(&s->ack_lock);
}

/* Kafka's acknowledgement stamps: librdkafka's broker thread calls on_acknowledgement for each message of a produce
   response as it handles it (rd_kafka_dr_msgq, before the delivery report is queued for a poll), so the stamp is
   taken there, not when a poll next serves the report: that came later by a queue hop and a thread's wake
   (bench/client_stamp_lag.py); the stamp is the arrival of the response's read (produce_read below). A slot is found again by its seq; a report
   whose slot another message has since taken (more than KAFKA_STAMPS in flight) is stamped as it is served. */
#define KAFKA_STAMPS (1 << 20)
struct kafka_stamp {
    int64_t seq, at;
    int kernel; /* at the kernel's receive time of the response's read (take_read_arrival) */
};


/* The read of the Produce response a broker thread is handling. librdkafka calls on_response_received on the broker
   thread as it has read a response in full, just before the response's handler (rd_kafka_buf_callback: a Produce
   request has no reply queue, so its handler runs there and then), and the handler calls on_acknowledgement for each
   message the response acknowledged (rd_kafka_dr_msgq), on the same thread. So an acknowledgement is stamped at its
   response's read, not after the parse of the response and the acknowledgements before it in the batch
   (bench/client_stamp_lag.py). Per thread: each broker has a thread of its own, and a thread handles its responses one
   after another. A message acknowledged without a response read (acks=0: the callback comes as the request is sent,
   with no response) or by another client's thread is stamped as on_acknowledgement is called. */
#define PRODUCE_API_KEY 0 /* Kafka's ApiKey of Produce */
static __thread struct {
    const rd_kafka_t *client; /* the client whose broker thread this is; NULL until its first Produce response */
    int64_t at;               /* when that response arrived (take_read_arrival); 0: the last callback had none */
    int kernel;               /* whether that is the kernel's receive time of the read that completed it */
} produce_read;

static void note_produce_read(rd_kafka_t *r, int16_t api_key, size_t size, rd_kafka_resp_err_t err) {
    if (api_key != PRODUCE_API_KEY) return;
    produce_read.client = r;
    produce_read.kernel = 0;
    produce_read.at = size && !err ? take_read_arrival(&produce_read.kernel) : 0;
}

/* on_acknowledgement's stamp, on the broker thread; *kernel whether it is the kernel's receive time */
static int64_t acknowledged_at(const rd_kafka_t *r, int *kernel) {
    int from_response = produce_read.client == r && produce_read.at;
    *kernel = from_response && produce_read.kernel;
    return from_response ? produce_read.at : now_ns();
}

static rd_kafka_resp_err_t on_acknowledgement(rd_kafka_t *r, rd_kafka_message_t *m, void *opaque) {
    Sender *s = (Sender *)opaque;
    if (m->err || !s->kafka_stamps) return RD_KAFKA_RESP_ERR_NO_ERROR;
    int64_t seq = (int64_t)(intptr_t)m->_private;
    struct kafka_stamp *slot = &s->kafka_stamps[seq & (KAFKA_STAMPS - 1)];
    slot->at = acknowledged_at(r, &slot->kernel);
    slot->seq = seq;
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

static rd_kafka_resp_err_t on_produce_response(rd_kafka_t *r, int sockfd, const char *brokername, int32_t brokerid,
                                               int16_t api_key, int16_t api_version, int32_t corr_id, size_t size,
                                               int64_t rtt, rd_kafka_resp_err_t err, void *opaque) {
    (void)sockfd, (void)brokername, (void)brokerid, (void)api_version, (void)corr_id, (void)rtt, (void)opaque;
    note_produce_read(r, api_key, size, err);
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

static rd_kafka_resp_err_t on_new(rd_kafka_t *r, const rd_kafka_conf_t *conf, void *opaque, char *errstr,
                                  size_t errstr_size) {
    (void)conf, (void)errstr, (void)errstr_size;
    rd_kafka_resp_err_t err = rk.interceptor_add_on_acknowledgement(r, "brokerbench-stamps", on_acknowledgement,
                                                                    opaque);
    if (!err && rk.interceptor_add_on_response_received)
        err = rk.interceptor_add_on_response_received(r, "brokerbench-stamps", on_produce_response, opaque);
    return err;
}

static void on_delivery(rd_kafka_t *r, const rd_kafka_message_t *m, void *opaque) {
    Sender *s = (Sender *)opaque;
    (void)r;
    int staged = s->acker_running; /* on the acknowledgement thread: record into the stage */
    int64_t seq = (int64_t)(intptr_t)m->_private, at = now_ns();
    if (!m->err) { /* the broker thread's stamp (its write is seen: the report came through a queue) */
        const struct kafka_stamp *slot = s->kafka_stamps ? &s->kafka_stamps[seq & (KAFKA_STAMPS - 1)] : NULL;
        if (slot && slot->seq == seq && slot->at > 0 && slot->at <= at)
            at = slot->at, s->handled_stamps++, s->arrival_stamps += slot->kernel;
        else
            s->served_stamps++;
    }
    if (m->err) {
        if (buf_push(staged ? &s->stage_failed : &s->failed, seq)) s->oom = 1;
        return;
    }
    if (staged ? (buf_push(&s->stage_seq, seq) || buf_push(&s->stage_ns, at))
               : (buf_push(&s->ack_seq, seq) || buf_push(&s->ack_ns, at)))
        s->oom = 1;
}

static int buf_extend(i64buf *b, const i64buf *from) {
    for (Py_ssize_t i = 0; i < from->len; i++)
        if (buf_push(b, from->data[i])) return -1;
    return 0;
}

static void merge_stage(Sender *s) {
    if (!s->stage_seq.len && !s->stage_failed.len) return;
    pthread_mutex_lock(&s->ack_lock);
    if (buf_extend(&s->ack_seq, &s->stage_seq) || buf_extend(&s->ack_ns, &s->stage_ns) ||
        buf_extend(&s->failed, &s->stage_failed))
        s->oom = 1;
    pthread_mutex_unlock(&s->ack_lock);
    s->stage_seq.len = s->stage_ns.len = s->stage_failed.len = 0;
}

static void *acker_main(void *arg) {
    Sender *s = (Sender *)arg;
    while (!s->acker_stop) {
        rk.poll(s->rk, 20);
        merge_stage(s);
    }
    return NULL;
}

/* Stop the acknowledgement thread; later delivery reports are served by whoever polls next. */
static void acker_join(Sender *s) {
    if (!s->acker_running) return;
    s->acker_stop = 1;
    pthread_join(s->acker, NULL);
    merge_stage(s);
    s->acker_running = 0;
}

/* Redis: the next complete reply in the input buffer. 1 = ok, 0 = error reply, -1 = incomplete,
   -2 = a reply XADD never gives (protocol error). */
static int resp_next(Sender *s) {
    char *p = s->in + s->in_pos, *end = s->in + s->in_len;
    char *crlf = memchr(p, '\r', (size_t)(end - p));
    if (!crlf || crlf + 1 >= end) return -1;
    char type = *p;
    size_t line = (size_t)(crlf + 2 - p);
    if (type == '+' || type == ':') {
        s->in_pos += line;
        return 1;
    }
    if (type == '-') {
        s->in_pos += line;
        return 0;
    }
    if (type == '$') {
        long n = strtol(p + 1, NULL, 10);
        if (n < 0) {
            s->in_pos += line;
            return 0;
        }
        if ((size_t)(end - p) < line + (size_t)n + 2) return -1;
        s->in_pos += line + (size_t)n + 2;
        return 1;
    }
    return -2;
}

static const char *broker_name(const Sender *s) {
    return s->kind == KIND_NATS ? "NATS" : s->kind == KIND_REDIS ? "Redis" : s->kind == KIND_KAFKA ? "Kafka" : s->kind == KIND_PULSAR || s->kind == KIND_PWIRE ? "Pulsar" : "RabbitMQ";
}

static Py_ssize_t in_flight(Sender *s) {
    if (WINDOWED(s)) return (Py_ssize_t)(s->win_next - s->win_low);
    return s->pending.len - s->pending_head;
}

/* NATS: move the oldest awaited publish past those answered (or expired); with `expire_before`, a publish still
   awaited that was sent before it is no longer waited for (ACK_TIMEOUT_NS). */
static void window_advance(Sender *s, int64_t expire_before) {
    while (s->win_low < s->win_next) {
        window_slot *slot = &s->ring[s->win_low % (s->depth + 1)];
        if (slot->pending && slot->sent_ns >= expire_before) break;
        slot->pending = 0; /* expired ones stay unacknowledged: neither acknowledged nor failed */
        s->win_low++;
    }
}

/* Connection lost. Redis: what is in flight is unacknowledged and counts as failed (Redis never answers a lost
   connection's commands). NATS and RabbitMQ: what is in flight is no longer waited for and stays unacknowledged: no
   report came, and the broker may have stored it (a stream killed with 1 confirm missing held that message after
   its restart); NATS makes the connection again RECONNECT_NS later (to a cluster's next server), the RabbitMQ
   loops do not (as their Python producers), and the sends that follow fail at once. */
static void conn_broken(Sender *s) {
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
    s->out_len = 0;
    s->in_len = s->in_pos = 0;
    if (WINDOWED(s)) {
        for (int i = 0; s->lanes && i < s->partitions; i++) s->lanes[i].len = s->lanes[i].count = 0;
        s->staged = 0;
        for (int64_t q = s->win_low; q < s->win_next; q++) s->ring[q % (s->depth + 1)].pending = 0;
        s->win_low = s->win_next;
        if (s->kind == KIND_NATS) {
            s->reconnect_at = now_ns() + RECONNECT_NS;
            if (s->servers > 1) s->server_at = (s->server_at + 1) % s->servers; /* it went: another one next */
        }
        return;
    }
    for (Py_ssize_t i = s->pending_head; i < s->pending.len; i++)
        if (buf_push(&s->failed, s->pending.data[i])) s->oom = 1;
    s->pending.len = s->pending_head = 0;
}

static void stream_seal(Sender *s);
static void pwire_seal(Sender *s, int all);
static int64_t pwire_next_due(const Sender *s);

static inline int has_output(const Sender *s) { return s->out_len || s->staged; }

/* Write what is buffered. */
static void conn_write(Sender *s) {
    if (s->kind == KIND_STREAM) stream_seal(s);
    if (s->kind == KIND_PWIRE) pwire_seal(s, 0); /* the batches that are full or due; the rest wait for theirs */
    size_t off = 0;
    while (off < s->out_len && s->fd >= 0) {
        ssize_t n = send(s->fd, s->out + off, s->out_len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            conn_broken(s);
            return;
        }
        off += (size_t)n;
    }
    s->out_len = 0;
}

static int out_reserve(Sender *s, size_t more) {
    if (s->out_len + more <= s->out_cap) return 0;
    size_t cap = s->out_cap ? s->out_cap : 1 << 16;
    while (cap < s->out_len + more) cap *= 2;
    char *out = realloc(s->out, cap);
    if (!out) return -1;
    s->out = out;
    s->out_cap = cap;
    return 0;
}

/* Redis: the next complete reply, which answers the oldest XADD in flight (stamped when it arrived). 1 = taken, -1 =
   incomplete, -2 = a reply XADD never gives (protocol error). */
static int redis_reply(Sender *s) {
    int r = resp_next(s);
    if (r != 1 && r != 0) return r;
    int64_t seq = s->pending.data[s->pending_head++];
    if (r == 1 ? (buf_push(&s->ack_seq, seq) || buf_push(&s->ack_ns, s->arrived_ns)) : buf_push(&s->failed, seq)) s->oom = 1;
    return 1;
}

/* NATS: a reply to publish `seq` (its reply subject's last token), stamped when it arrived. A PubAck is a JSON
   object without "error"; anything else (an error object, a status message such as 503 no responders) fails the
   publish. A reply to a publish no longer awaited (expired, or from before a reconnect) is ignored. */
static void nats_answer(Sender *s, const char *subject, size_t len, int ok) {
    if (len <= s->inbox_len + 1 || memcmp(subject, s->inbox, s->inbox_len) != 0 || subject[s->inbox_len] != '.')
        return;
    int64_t seq = 0;
    for (size_t i = s->inbox_len + 1; i < len; i++) {
        if (subject[i] < '0' || subject[i] > '9') return;
        seq = seq * 10 + (subject[i] - '0');
    }
    if (seq < s->win_low || seq >= s->win_next) return;
    window_slot *slot = &s->ring[seq % (s->depth + 1)];
    if (!slot->pending) return;
    slot->pending = 0;
    if (ok ? (buf_push(&s->ack_seq, seq) || buf_push(&s->ack_ns, s->arrived_ns)) : buf_push(&s->failed, seq)) s->oom = 1;
    window_advance(s, INT64_MIN);
}

/* Split a protocol line (without its CRLF) into at most `max` space-separated tokens; returns how many. */
static int tokens(char *line, size_t len, char **tok, size_t *tok_len, int max) {
    int n = 0;
    size_t i = 0;
    while (i < len && n < max) {
        while (i < len && (line[i] == ' ' || line[i] == '\t')) i++;
        if (i == len) break;
        tok[n] = line + i;
        while (i < len && line[i] != ' ' && line[i] != '\t') i++;
        tok_len[n] = (size_t)(line + i - tok[n]);
        n++;
    }
    return n;
}

/* NATS: the next complete protocol message from the server. 1 = taken, -1 = incomplete, -2 = protocol error. */
static int nats_reply(Sender *s) {
    char *p = s->in + s->in_pos, *end = s->in + s->in_len;
    char *crlf = memmem(p, (size_t)(end - p), "\r\n", 2);
    if (!crlf) return -1;
    size_t line = (size_t)(crlf + 2 - p), n = (size_t)(crlf - p);
    if ((n > 4 && !memcmp(p, "MSG ", 4)) || (n > 5 && !memcmp(p, "HMSG ", 5))) {
        /* MSG <subject> <sid> [reply-to] <#bytes>; HMSG <subject> <sid> [reply-to] <#header bytes> <#total bytes> */
        char *tok[6];
        size_t tok_len[6];
        int count = tokens(p, n, tok, tok_len, 6), headers = p[0] == 'H';
        if (count < 4 + headers) return -2;
        long body = strtol(tok[count - 1], NULL, 10);
        if (body < 0) return -2;
        if ((size_t)(end - p) < line + (size_t)body + 2) return -1;
        const char *data = crlf + 2;
        int ok = !headers && body > 0 && data[0] == '{' && !memmem(data, (size_t)body, "\"error\"", 7);
        nats_answer(s, tok[1], tok_len[1], ok);
        s->in_pos += line + (size_t)body + 2;
        return 1;
    }
    if (n == 4 && !memcmp(p, "PING", 4)) { /* the server's keep-alive: answered with the next write */
        if (out_reserve(s, 6) == 0) {
            memcpy(s->out + s->out_len, "PONG\r\n", 6);
            s->out_len += 6;
        } else {
            s->oom = 1;
        }
    } else if (n >= 4 && !memcmp(p, "-ERR", 4)) {
        snprintf(s->error, sizeof s->error, "NATS: %.*s", (int)(n > 400 ? 400 : n), p);
    } else if (!((n == 4 && !memcmp(p, "PONG", 4)) || (n == 3 && !memcmp(p, "+OK", 3)) || (n > 5 && !memcmp(p, "INFO ", 5)))) {
        return -2;
    }
    s->in_pos += line;
    return 1;
}

/* AMQP 0-9-1: big-endian fields. */
static inline uint16_t be16(const unsigned char *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t be32(const unsigned char *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static inline uint64_t be64(const unsigned char *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }
static inline char *put16(char *o, uint16_t v) { o[0] = (char)(v >> 8), o[1] = (char)v; return o + 2; }
static inline char *put32(char *o, uint32_t v) { o = put16(o, (uint16_t)(v >> 16)); return put16(o, (uint16_t)v); }
static inline char *put64(char *o, uint64_t v) { o = put32(o, (uint32_t)(v >> 32)); return put32(o, (uint32_t)v); }
static inline char *put_short_str(char *o, const char *str, size_t len) {
    *o++ = (char)len;
    memcpy(o, str, len);
    return o + len;
}

/* A Connection.Close or Channel.Close from the broker: its reply code and text, as the error. */
static void amqp_closed_by_broker(Sender *s, const unsigned char *args, size_t len) {
    int code = len >= 2 ? be16(args) : 0;
    int text = len >= 3 ? args[2] : 0;
    if (3 + (size_t)text > len) text = 0;
    snprintf(s->error, sizeof s->error, "RabbitMQ closed the %s: %d %.*s", s->amqp_closing_channel ? "channel" : "connection",
             code, text, (const char *)args + 3);
}

/* AMQP: Basic.Ack (ok) or Basic.Nack for delivery tag `tag`, or every tag up to it (`multiple`): the channel's tags
   count its publishes from 1, so tag t is seq amqp_seq0 + t - 1. Stamped when it arrived. */
static void amqp_confirm(Sender *s, uint64_t tag, int multiple, int ok) {
    int64_t seq = s->amqp_seq0 + (int64_t)tag - 1, first = multiple ? s->win_low : seq, at = s->arrived_ns;
    if (seq >= s->win_next) seq = s->win_next - 1;
    for (int64_t q = first < s->win_low ? s->win_low : first; q <= seq; q++) {
        window_slot *slot = &s->ring[q % (s->depth + 1)];
        if (!slot->pending) continue;
        slot->pending = 0;
        if (ok ? (buf_push(&s->ack_seq, q) || buf_push(&s->ack_ns, at)) : buf_push(&s->failed, q)) s->oom = 1;
    }
    window_advance(s, INT64_MIN);
}

/* AMQP: the next complete frame. 1 = taken, -1 = incomplete, -2 = protocol error, -3 = closed by the broker (the
   error says why). */
static int amqp_reply(Sender *s) {
    const unsigned char *p = (const unsigned char *)s->in + s->in_pos;
    size_t have = s->in_len - s->in_pos;
    if (have < 7) return -1;
    size_t size = be32(p + 3);
    if (have < 8 + size) return -1;
    if (p[7 + size] != 0xCE) return -2;
    s->in_pos += 8 + size;
    if (p[0] != 1 || size < 4) return 1; /* a heartbeat or a frame of content: nothing the publisher waits for */
    const unsigned char *args = p + 11;
    int class_id = be16(p + 7), method = be16(p + 9);
    if (class_id == 60 && (method == 80 || method == 120) && size >= 13) { /* Basic.Ack, Basic.Nack */
        amqp_confirm(s, be64(args), args[8] & 1, method == 80);
        return 1;
    }
    if ((class_id == 10 && method == 50) || (class_id == 20 && method == 40)) {
        s->amqp_closing_channel = class_id == 20;
        amqp_closed_by_broker(s, args, size - 4);
        return -3;
    }
    return 1; /* Connection.Blocked and Unblocked, and the like: the window shows what they do */
}

/* RabbitMQ streams: move each lane's staged publishes into `out` as one Publish frame per lane (key 2, version 1,
   the lane's publisher id, the count, then the messages). */
static void stream_seal(Sender *s) {
    for (int i = 0; i < s->partitions; i++) {
        lane_buf *b = &s->lanes[i];
        if (!b->count) continue;
        if (out_reserve(s, 13 + b->len)) {
            s->oom = 1;
            return;
        }
        char *o = s->out + s->out_len;
        o = put32(o, (uint32_t)(9 + b->len));
        o = put16(o, 2);
        o = put16(o, 1);
        *o++ = (char)i;
        o = put32(o, (uint32_t)b->count);
        memcpy(o, b->data, b->len);
        s->out_len += 13 + b->len;
        b->len = 0;
        b->count = 0;
    }
    s->staged = 0;
}

/* RabbitMQ streams: the next complete frame. PublishConfirm acknowledges publishing ids (our seqs), PublishError
   fails them, a Close or a MetadataUpdate (the stream was deleted or its leader moved) ends the connection. 1 =
   taken, -1 = incomplete, -2 = protocol error, -3 = closed by the broker (the error says why). */
static int stream_reply(Sender *s) {
    const unsigned char *p = (const unsigned char *)s->in + s->in_pos;
    size_t have = s->in_len - s->in_pos;
    if (have < 4) return -1;
    size_t size = be32(p);
    if (have < 4 + size) return -1;
    if (size < 4) return -2;
    s->in_pos += 4 + size;
    int key = be16(p + 4);
    const unsigned char *c = p + 8, *end = p + 4 + size;
    if (key == 3 || key == 4) { /* PublishConfirm: id [u64]; PublishError: id [(u64, u16)] */
        if (end - c < 5) return -2;
        uint32_t count = be32(c + 1);
        size_t each = key == 3 ? 8 : 10;
        c += 5;
        if ((size_t)(end - c) < count * each) return -2;
        int64_t at = s->arrived_ns;
        for (uint32_t k = 0; k < count; k++, c += each) {
            int64_t seq = (int64_t)be64(c);
            if (seq < s->win_low || seq >= s->win_next) continue;
            window_slot *slot = &s->ring[seq % (s->depth + 1)];
            if (!slot->pending) continue;
            slot->pending = 0;
            if (key == 3 ? (buf_push(&s->ack_seq, seq) || buf_push(&s->ack_ns, at)) : buf_push(&s->failed, seq)) s->oom = 1;
        }
        window_advance(s, INT64_MIN);
        return 1;
    }
    if (key == 0x16 || key == 0x10) {
        int code = key == 0x16 && end - c >= 6 ? be16(c + 4) : (end - c >= 2 ? be16(c) : 0);
        snprintf(s->error, sizeof s->error, "RabbitMQ %s (code %d)",
                 key == 0x16 ? "closed the stream connection" : "moved or deleted a stream the producer publishes to", code);
        return -3;
    }
    return 1; /* heartbeats, responses */
}

/* ---- Pulsar's binary protocol, spoken by the loop itself ------------------------------------------------------
   A frame is [total size][command size][BaseCommand]; a SEND adds [0x0e01][CRC32-C][metadata size][MessageMetadata]
   [payload] (sizes big-endian; the checksum covers what follows it). A batch's payload is, per message,
   [size][SingleMessageMetadata][body]. The protobuf messages are few and small, written and read here by hand. */
enum { PW_CONNECT = 2, PW_CONNECTED = 3, PW_PRODUCER = 5, PW_SEND = 6, PW_SEND_RECEIPT = 7, PW_SEND_ERROR = 8,
       PW_ERROR = 14, PW_CLOSE_PRODUCER = 15, PW_PRODUCER_SUCCESS = 17, PW_PING = 18, PW_PONG = 19 };
#define PW_PROTOCOL_VERSION 19 /* what the fields used here need; the broker answers in the version both know */
#define PW_FRAME_ROOM 256      /* the frame's sizes, command and metadata around a batch's payload, at most */

static uint32_t crc32c_table[256];
static int crc32c_hw = -1; /* -1: not known yet */

__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
    }
    uint32_t c32 = (uint32_t)c;
    for (; n; n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}

/* CRC-32C (Castagnoli), as Pulsar checks its payloads: with the CPU's instruction where it has one. */
static uint32_t crc32c(const unsigned char *p, size_t n) {
    if (crc32c_hw < 0) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            crc32c_table[i] = c;
        }
        crc32c_hw = __builtin_cpu_supports("sse4.2");
    }
    if (crc32c_hw) return ~crc32c_sse42(0xFFFFFFFFu, p, n);
    uint32_t c = 0xFFFFFFFFu;
    while (n--) c = crc32c_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}

static inline char *pb_varint(char *o, uint64_t v) {
    while (v >= 0x80) *o++ = (char)(v | 0x80), v >>= 7;
    *o++ = (char)v;
    return o;
}
static inline char *pb_uint(char *o, int field, uint64_t v) { return pb_varint(pb_varint(o, (uint64_t)field << 3), v); }
static inline char *pb_bytes(char *o, int field, const char *data, size_t len) {
    o = pb_varint(pb_varint(o, (uint64_t)field << 3 | 2), len);
    memcpy(o, data, len);
    return o + len;
}

static int pb_read_varint(const unsigned char **p, const unsigned char *end, uint64_t *v) { /* 0, or -1 malformed */
    *v = 0;
    for (int shift = 0;; shift += 7) {
        if (*p >= end || shift > 63) return -1;
        *v |= (uint64_t)(**p & 0x7F) << shift;
        if (!(*(*p)++ & 0x80)) return 0;
    }
}

/* One field of a protobuf message read at *p (before end): its number, and its value (a varint) or its bytes
   (length-delimited). 0 at the end, -1 malformed. */
static int pb_next(const unsigned char **p, const unsigned char *end, int *field, uint64_t *value,
                   const unsigned char **data, size_t *len) {
    if (*p >= end) return 0;
    uint64_t key;
    if (pb_read_varint(p, end, &key)) return -1;
    *field = (int)(key >> 3);
    switch (key & 7) {
    case 0: return pb_read_varint(p, end, value) ? -1 : 1;
    case 2:
        if (pb_read_varint(p, end, value) || *value > (uint64_t)(end - *p)) return -1;
        *data = *p, *len = (size_t)*value;
        *p += *value;
        return 1;
    case 1: *p += 8; return *p <= end ? 1 : -1;
    case 5: *p += 4; return *p <= end ? 1 : -1;
    default: return -1;
    }
}

/* A whole simple command (no payload): [total][size][BaseCommand{type, <field type>: sub}] appended to `out`. */
static int pwire_command(Sender *s, int type, const char *sub, size_t sub_len) {
    if (out_reserve(s, 32 + sub_len)) return -1;
    char cmd[16], *c = pb_uint(cmd, 1, (uint64_t)type);
    c = pb_varint(pb_varint(c, (uint64_t)type << 3 | 2), sub_len);
    size_t head = (size_t)(c - cmd), size = head + sub_len;
    char *o = put32(s->out + s->out_len, (uint32_t)(4 + size));
    o = put32(o, (uint32_t)size);
    memcpy(o, cmd, head);
    memcpy(o + head, sub, sub_len);
    s->out_len += 8 + size;
    return 0;
}

/* The time the lane's batch must go out by (INT64_MAX: none open), the earliest of all lanes'. */
static int64_t pwire_next_due(const Sender *s) {
    int64_t due = INT64_MAX;
    for (int i = 0; i < s->partitions; i++)
        if (s->lanes[i].count && s->pw_due[i] < due) due = s->pw_due[i];
    return due;
}

/* Move lane i's open batch (or single message) into `out` as one SEND frame. */
static void pwire_seal_lane(Sender *s, int i) {
    lane_buf *b = &s->lanes[i];
    if (!b->count) return;
    if (out_reserve(s, PW_FRAME_ROOM + s->pw_name_len[i] + b->len)) {
        s->oom = 1;
        return;
    }
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    char meta[128 + 256], *m = meta; /* MessageMetadata: producer_name, sequence_id, publish_time [, batch] */
    m = pb_bytes(m, 1, s->pw_name[i], s->pw_name_len[i]);
    m = pb_uint(m, 2, (uint64_t)s->pw_first[i]);
    m = pb_uint(m, 3, (uint64_t)wall.tv_sec * 1000 + (uint64_t)(wall.tv_nsec / 1000000));
    char send[64], *c = send; /* CommandSend: producer_id, sequence_id [, num_messages, highest_sequence_id] */
    c = pb_uint(c, 1, (uint64_t)i);
    c = pb_uint(c, 2, (uint64_t)s->pw_first[i]);
    if (s->pw_batching) {
        m = pb_uint(m, 11, (uint64_t)b->count);
        m = pb_uint(m, 24, (uint64_t)s->pw_last[i]);
        c = pb_uint(c, 3, (uint64_t)b->count);
        c = pb_uint(c, 6, (uint64_t)s->pw_last[i]);
    }
    char cmd[96], *k = pb_uint(cmd, 1, PW_SEND);
    k = pb_bytes(k, PW_SEND, send, (size_t)(c - send));
    size_t cmd_len = (size_t)(k - cmd), meta_len = (size_t)(m - meta);
    char *o = s->out + s->out_len;
    o = put32(o, (uint32_t)(4 + cmd_len + 2 + 4 + 4 + meta_len + b->len));
    o = put32(o, (uint32_t)cmd_len);
    memcpy(o, cmd, cmd_len), o += cmd_len;
    *o++ = 0x0e, *o++ = 0x01;
    char *checksum = o;
    o += 4;
    char *covered = o;
    o = put32(o, (uint32_t)meta_len);
    memcpy(o, meta, meta_len), o += meta_len;
    memcpy(o, b->data, b->len), o += b->len;
    put32(checksum, crc32c((const unsigned char *)covered, (size_t)(o - covered)));
    s->out_len = (size_t)(o - s->out);
    s->staged -= b->len;
    b->len = 0;
    b->count = 0;
}

/* Seal the lanes' batches: all of them, or those whose delay is over. */
static void pwire_seal(Sender *s, int all) {
    int64_t now = all ? 0 : now_ns();
    for (int i = 0; i < s->partitions; i++)
        if (s->lanes[i].count && (all || s->pw_due[i] <= now)) pwire_seal_lane(s, i);
}

/* The publishes a receipt answers: lane `lane`'s seqs from `first` to `last` (a lane holds every partitions-th
   seq), each stamped when the receipt arrived, or failed. */
static void pwire_answer(Sender *s, int lane, int64_t first, int64_t last, int ok) {
    int64_t at = s->arrived_ns;
    for (int64_t seq = first; seq <= last; seq += s->partitions) {
        if (seq < s->win_low || seq >= s->win_next || seq % s->partitions != lane) continue;
        window_slot *slot = &s->ring[seq % (s->depth + 1)];
        if (!slot->pending) continue;
        slot->pending = 0;
        if (ok ? (buf_push(&s->ack_seq, seq) || buf_push(&s->ack_ns, at)) : buf_push(&s->failed, seq)) s->oom = 1;
    }
    window_advance(s, INT64_MIN);
}

/* The next complete frame from the broker: a send receipt acknowledges its batch, a ping is answered; a send error,
   an error or the producer closed by the broker (its topic unloaded or moved) ends the connection. 1 = taken,
   -1 = incomplete, -2 = protocol error, -3 = closed by the broker (the error says why). */
static int pwire_reply(Sender *s) {
    const unsigned char *p = (const unsigned char *)s->in + s->in_pos;
    size_t have = s->in_len - s->in_pos;
    if (have < 4) return -1;
    size_t total = be32(p);
    if (have < 4 + total) return -1;
    if (total < 4 || be32(p + 4) > total - 4) return -2;
    s->in_pos += 4 + total;
    const unsigned char *c = p + 8, *end = c + be32(p + 4), *sub = NULL, *data;
    size_t sub_len = 0, len;
    int field, type = 0;
    uint64_t value;
    while (pb_next(&c, end, &field, &value, &data, &len) == 1) {
        if (field == 1) type = (int)value;
        else if (field == type || (type == 0 && field > 1)) sub = data, sub_len = len;
    }
    if (type == PW_PING) {
        if (pwire_command(s, PW_PONG, "", 0)) s->oom = 1;
        return 1;
    }
    if (type != PW_SEND_RECEIPT && type != PW_SEND_ERROR && type != PW_ERROR && type != PW_CLOSE_PRODUCER) return 1;
    uint64_t producer = UINT64_MAX, sequence = 0, highest = 0;
    const unsigned char *message = NULL;
    size_t message_len = 0;
    for (const unsigned char *q = sub, *qend = sub ? sub + sub_len : NULL; q && pb_next(&q, qend, &field, &value, &data, &len) == 1;) {
        if (field == 1 && type != PW_ERROR) producer = value;
        else if (field == 2) sequence = value;
        else if (field == 4 && type == PW_SEND_RECEIPT) highest = value;
        else if ((field == 4 && type == PW_SEND_ERROR) || (field == 3 && type == PW_ERROR)) message = data, message_len = len;
    }
    if (type == PW_SEND_RECEIPT) {
        if (producer >= (uint64_t)s->partitions) return -2;
        /* a batch's receipt names its last seq too; a lone message's says -1 there */
        int64_t first = (int64_t)sequence, last = (int64_t)highest;
        pwire_answer(s, (int)producer, first, last > first ? last : first, 1);
        return 1;
    }
    snprintf(s->error, sizeof s->error, "Pulsar %s%s%.*s",
             type == PW_SEND_ERROR ? "refused a send" : type == PW_ERROR ? "answered with an error"
                                                                           : "closed the producer (its topic was unloaded or moved)",
             message ? ": " : "", (int)(message ? message_len > 300 ? 300 : message_len : 0), message ? (const char *)message : "");
    return -3;
}

/* Read the replies that have arrived; with `block`, wait up to timeout_ms (-1: the socket's timeout) for at
   least one. Each reply is stamped when the read that completed it arrived (recv_stamped): a reply complete in
   the buffer is served before the next read, so the last read's stamp is its own. */
static void conn_read(Sender *s, int block, int timeout_ms) {
    int got_one = 0;
    while (s->fd >= 0 && in_flight(s) > 0) {
        int r = s->kind == KIND_NATS     ? nats_reply(s)
                : s->kind == KIND_AMQP   ? amqp_reply(s)
                : s->kind == KIND_STREAM ? stream_reply(s)
                : s->kind == KIND_PWIRE  ? pwire_reply(s)
                                         : redis_reply(s);
        if (r == 1) {
            got_one = 1;
            continue;
        }
        if (r == -2 || r == -3) { /* -3: the broker closed it, and the error says why */
            if (r == -2)
                snprintf(s->error, sizeof s->error, "unexpected reply from %s: %.40s", broker_name(s), s->in + s->in_pos);
            conn_broken(s);
            return;
        }
        /* incomplete: keep the partial reply at the front and read more */
        if (s->in_pos > 0) {
            memmove(s->in, s->in + s->in_pos, s->in_len - s->in_pos);
            s->in_len -= s->in_pos;
            s->in_pos = 0;
        }
        if (s->in_len == s->in_cap) {
            char *in = realloc(s->in, s->in_cap * 2);
            if (!in) {
                s->oom = 1;
                return;
            }
            s->in = in;
            s->in_cap *= 2;
        }
        int wait = block && !got_one;
        if (wait && timeout_ms >= 0) {
            struct pollfd pfd = {s->fd, POLLIN, 0};
            int ready = poll(&pfd, 1, timeout_ms);
            if (ready == 0) return; /* timed out */
            if (ready < 0 && errno == EINTR) continue;
        }
        ssize_t n = recv_stamped(s->fd, s->in + s->in_len, s->in_cap - s->in_len, wait ? 0 : MSG_DONTWAIT,
                                 &s->arrived_ns);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!wait) return;
            /* a blocking read that timed out (SO_RCVTIMEO): the broker did not answer in time */
            snprintf(s->error, sizeof s->error, "%s did not answer within the socket timeout", broker_name(s));
            conn_broken(s);
            return;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            conn_broken(s);
            return;
        }
        s->in_len += (size_t)n;
    }
    if (s->in_pos == s->in_len) s->in_pos = s->in_len = 0;
    if (s->pending_head > 4096 && s->pending_head * 2 > s->pending.len) { /* drop the answered seqs */
        memmove(s->pending.data, s->pending.data + s->pending_head, (size_t)in_flight(s) * sizeof(int64_t));
        s->pending.len -= s->pending_head;
        s->pending_head = 0;
    }
}

/* Write what is buffered and take the replies that have arrived, without waiting. */
static void conn_pump(Sender *s) {
    if (s->fd < 0) {
        if (s->kind == KIND_REDIS) conn_broken(s);
        return;
    }
    if (has_output(s)) conn_write(s);
    conn_read(s, 0, 0);
}

/* Write everything and wait up to timeout_ms for every reply. A NATS publish awaited longer than ACK_TIMEOUT_NS is
   given up here too, after what the socket holds was read (see window_advance): a PubAck that cannot come (a
   stream leader killed while the connection to another server stays up) held the producer's end until the flush's
   bound, the drain's cap of 40 s (a cluster's kill test: 36.8 s past the schedule). */
static void conn_drain(Sender *s, int timeout_ms) {
    int64_t deadline = now_ns() + (int64_t)timeout_ms * 1000000LL;
    if (s->kind == KIND_PWIRE) pwire_seal(s, 1);
    conn_pump(s);
    while (s->fd >= 0 && in_flight(s) > 0) {
        int64_t left = deadline - now_ns();
        if (left <= 0) break;
        int wait_ms = (int)(left / 1000000LL) + 1;
        if (s->kind == KIND_NATS && wait_ms > 100) wait_ms = 100;
        conn_read(s, 1, wait_ms);
        if (s->kind == KIND_NATS) window_advance(s, now_ns() - ACK_TIMEOUT_NS);
        if (has_output(s)) conn_write(s); /* a PONG */
    }
}

/* The window is full: write, then wait for replies until it has room again. A NATS publish awaited longer than
   ACK_TIMEOUT_NS is given up (see window_advance). */
static void wait_for_room(Sender *s) {
    while (in_flight(s) >= s->depth && s->fd >= 0) {
        if (s->kind == KIND_PWIRE) pwire_seal(s, 1); /* the open batches cannot wait for their delay: nothing else comes */
        if (has_output(s)) conn_write(s);
        if (s->kind == KIND_NATS) {
            conn_read(s, 1, 100);
            window_advance(s, now_ns() - ACK_TIMEOUT_NS);
        } else {
            conn_read(s, 1, -1);
        }
    }
}

/* Serve Kafka's acknowledgements, waiting up to timeout_ms. With the acknowledgement thread running, it
   waits in rd_kafka_poll and stamps each report as it comes; this thread only sleeps. */
static void serve(Sender *s, int timeout_ms) {
    if (s->kind == KIND_PULSAR) { /* the client's own thread stamps each receipt */
        if (timeout_ms > 0) sleep_ns((int64_t)timeout_ms * 1000000LL);
    } else if (!s->acker_running)
        rk.poll(s->rk, timeout_ms);
    else if (timeout_ms > 0)
        sleep_ns((int64_t)timeout_ms * 1000000LL);
}

/* Redis and NATS: write what is buffered, then wait on the socket until `until`, reading (and stamping) each
   reply as it arrives. With nothing in flight there is nothing to wait for: sleep. */
static void conn_wait(Sender *s, int64_t until) {
    conn_pump(s);
    for (;;) {
        int64_t now = now_ns(), left = until - now;
        if (left <= 0) return;
        if (s->fd < 0 || in_flight(s) == 0) {
            sleep_ns(left);
            return;
        }
        if (s->kind == KIND_PWIRE) { /* an open batch goes out when its delay is over */
            int64_t due = pwire_next_due(s);
            if (due <= now) {
                conn_pump(s);
                continue;
            }
            if (due - now < left) left = due - now;
        }
        struct pollfd pfd = {s->fd, POLLIN, 0};
        struct timespec ts = {left / 1000000000LL, left % 1000000000LL};
        int ready = ppoll(&pfd, 1, &ts, NULL);
        if (ready == 0) {
            if (s->kind == KIND_PWIRE && now_ns() < until) continue; /* a batch's delay is over, not the wait */
            return; /* timed out: `until` has come */
        }
        if (ready < 0) {
            if (errno == EINTR) continue;
            return;
        }
        conn_read(s, 0, 0); /* what has arrived, stamped when it did; a hang-up shows as a failed read */
        if (has_output(s)) conn_write(s); /* a PONG */
    }
}

/* Wait for `target`, serving acknowledgements. Short waits block too (the thread's timer slack is
   1 ns): on a machine whose cores the broker and the consumer share, a spinning producer would take a
   core from them. A late wake-up shows as publish delay, and the messages then due go out together. */
static int spin_if_close(int64_t target) { /* 1 when the target is reached */
    if (target - now_ns() > SPIN_NS) return 0;
    while (now_ns() < target) {
    }
    return 1;
}

static void wait_until(Sender *s, int64_t target) {
    while (!spin_if_close(target)) {
        if (ON_ITS_SOCKET(s)) {
            conn_wait(s, target - SPIN_NS);
            continue;
        }
        int64_t remaining = target - now_ns();
        if (remaining > 1500000) {
            serve(s, (int)((remaining - 1000000) / 1000000));
        } else {
            serve(s, 0);
            int64_t left = target - now_ns();
            if (left > SPIN_NS) sleep_ns(left);
        }
    }
}

/* Serve what has arrived without waiting, where no other thread does. */
static void serve_now(Sender *s) {
    if (ON_ITS_SOCKET(s))
        conn_pump(s);
    else if (s->kind == KIND_KAFKA && !s->acker_running && !s->single)
        serve(s, 0);
}

/* ---- Pulsar: one producer per lane (its partition's topic), through the C API ----------------------- */
/* A message's body, handed to the client without a copy (set_allocated_content), and the callback's context: the
   client reads the body until the message's receipt (or failure) comes, and then the block is free for another
   message. Blocks are kept for reuse up to PL_POOL_BYTES in all; past that a message's body is copied by the client
   (set_content) instead. Allocating and freeing a body of 1 KB or more per message is what glibc's malloc does
   slowest (a request that size consolidates the fast bins), and the client allocates several objects per message
   besides. */
#define PL_POOL_BYTES (64u << 20)
typedef struct pl_block {
    struct pl_block *next;
    Sender *s;
    int64_t seq;
    size_t cap;   /* bytes of data; 0: a context only (the body was copied) */
    char data[];
} pl_block;

static void pl_quiet(int level, const char *file, int line, const char *message, void *ctx) {
    (void)level, (void)file, (void)line, (void)message, (void)ctx; /* failures reach the accounting */
}

/* The client's thread calls this when the broker's receipt for a message arrives (or the send failed): stamped
   here, on arrival. */
static void on_pulsar_sent(int result, pl_message_id *id, void *ctx) {
    int64_t at = now_ns();
    pl_block *b = ctx;
    Sender *s = b->s;
    if (id) pl.message_id_free(id);
    pthread_mutex_lock(&s->ack_lock);
    if (result == 0 ? (buf_push(&s->ack_seq, b->seq) || buf_push(&s->ack_ns, at)) : buf_push(&s->failed, b->seq))
        s->oom = 1;
    s->pl_in_flight--;
    if (b->cap) {
        b->next = s->pl_free;
        s->pl_free = b;
        b = NULL;
    }
    if (s->pl_waiting) pthread_cond_broadcast(&s->acked);
    pthread_mutex_unlock(&s->ack_lock);
    free(b);
}

/* Wait until at most `most` messages are in flight, or timeout_ns has passed; returns how many are. */
static int64_t pulsar_wait(Sender *s, int64_t most, int64_t timeout_ns) {
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ns / 1000000000LL;
    deadline.tv_nsec += timeout_ns % 1000000000LL;
    if (deadline.tv_nsec >= 1000000000L) deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&s->ack_lock);
    s->pl_waiting = 1;
    while (s->pl_in_flight > most)
        if (pthread_cond_timedwait(&s->acked, &s->ack_lock, &deadline) == ETIMEDOUT) break;
    s->pl_waiting = 0;
    int64_t left = s->pl_in_flight;
    pthread_mutex_unlock(&s->ack_lock);
    return left;
}

/* Hand one message to its lane's producer: the body the Python driver sends (the header's length, the header,
   the payload). send_async blocks while the lane has max_pending_messages unanswered (block_if_queue_full); single
   mode waits for each message's receipt. */
static int pulsar_send(Sender *s, int64_t seq, int partition, const char *header, const char *payload, Py_ssize_t len) {
    size_t total = 1 + HEADER_BYTES + (size_t)len;
    pthread_mutex_lock(&s->ack_lock);
    pl_block *b = s->pl_free;
    if (b && b->cap >= total) s->pl_free = b->next;
    else b = NULL;
    s->pl_in_flight++;
    pthread_mutex_unlock(&s->ack_lock);
    if (!b && s->pl_pool_bytes + total <= PL_POOL_BYTES) { /* a new block for the pool */
        if ((b = malloc(sizeof *b + total))) {
            b->cap = total;
            s->pl_pool_bytes += total;
        }
    } else if (!b && (b = malloc(sizeof *b))) { /* past the pool: the client copies the body */
        b->cap = 0;
    }
    pl_message *m = b ? pl.message_create() : NULL;
    if (!m) {
        free(b);
        pthread_mutex_lock(&s->ack_lock);
        s->pl_in_flight--;
        pthread_mutex_unlock(&s->ack_lock);
        snprintf(s->error, sizeof s->error, "out of memory");
        return -1;
    }
    b->s = s;
    b->seq = seq;
    char *body = b->cap ? b->data : s->scratch;
    if (!b->cap && total > s->scratch_cap) {
        char *grown = realloc(s->scratch, total);
        if (!grown) {
            pl.message_free(m);
            free(b);
            pthread_mutex_lock(&s->ack_lock);
            s->pl_in_flight--;
            pthread_mutex_unlock(&s->ack_lock);
            snprintf(s->error, sizeof s->error, "out of memory");
            return -1;
        }
        body = s->scratch = grown;
        s->scratch_cap = total;
    }
    body[0] = (char)HEADER_BYTES;
    memcpy(body + 1, header, HEADER_BYTES);
    memcpy(body + 1 + HEADER_BYTES, payload, (size_t)len);
    if (b->cap)
        pl.message_set_allocated_content(m, body, total);
    else
        pl.message_set_content(m, body, total);
    pl.producer_send_async(s->producers[partition], m, on_pulsar_sent, b);
    pl.message_free(m);
    if (s->single) pulsar_wait(s, 0, 30000000000LL);
    return 0;
}

/* A lane's staging buffer with room for `need` more bytes; -1 with s->error set. */
static int lane_reserve(Sender *s, lane_buf *b, size_t need) {
    if (b->len + need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < b->len + need) cap *= 2;
    char *grown = realloc(b->data, cap);
    if (!grown) {
        snprintf(s->error, sizeof s->error, "out of memory");
        return -1;
    }
    b->data = grown;
    b->cap = cap;
    return 0;
}

/* The window before message `seq` is staged (RabbitMQ streams, Pulsar's protocol): a seq that does not follow the
   last one starts it again; without a connection the message fails at once (1: failed, nothing to send). */
static int window_begin(Sender *s, int64_t seq) {
    if (!s->win_started || seq != s->win_next) {
        for (int64_t q = s->win_low; s->win_started && q < s->win_next; q++) s->ring[q % (s->depth + 1)].pending = 0;
        s->win_low = s->win_next = seq;
        s->win_started = 1;
    }
    if (s->fd >= 0) return 0;
    s->win_low = s->win_next = seq + 1;
    if (buf_push(&s->failed, seq)) s->oom = 1;
    return 1;
}

/* Pulsar's binary protocol: add the message to its lane's batch (its body is the one the Python driver sends: the
   header's length, the header, the payload), which goes out as one SEND when it holds the most messages or bytes
   the producer settings allow, or when its delay is over (batchingMaxPublishDelay, from its first message), as the
   client batches; without batching each message goes out at once. Then wait for room in the window. A lost
   connection is not made again: later sends fail at once. */
static int pwire_send(Sender *s, int64_t seq, int partition, const char *header, const char *payload, Py_ssize_t len) {
    if (s->win_started && seq != s->win_next) pwire_seal(s, 1); /* a gap: a batch holds every partitions-th seq */
    if (window_begin(s, seq)) return 0;
    lane_buf *b = &s->lanes[partition];
    size_t body = 1 + HEADER_BYTES + (size_t)len, need = body + (s->pw_batching ? 4 + 16 : 0);
    if (b->count && (size_t)b->len + need > (size_t)s->pw_max_bytes) pwire_seal_lane(s, partition);
    if (lane_reserve(s, b, need)) return -1;
    char *o = b->data + b->len;
    if (s->pw_batching) { /* [size][SingleMessageMetadata: payload_size, sequence_id] */
        char smm[24], *m = pb_uint(smm, 3, (uint64_t)body);
        m = pb_uint(m, 8, (uint64_t)seq);
        o = put32(o, (uint32_t)(m - smm));
        memcpy(o, smm, (size_t)(m - smm)), o += m - smm;
    }
    *o++ = (char)HEADER_BYTES;
    memcpy(o, header, HEADER_BYTES);
    memcpy(o + HEADER_BYTES, payload, (size_t)len);
    o += HEADER_BYTES + len;
    size_t added = (size_t)(o - (b->data + b->len));
    b->len += added;
    s->staged += added;
    int64_t now = now_ns();
    if (!b->count++) {
        s->pw_first[partition] = seq;
        s->pw_due[partition] = now + s->pw_delay_ns;
    }
    s->pw_last[partition] = seq;
    window_slot *slot = &s->ring[seq % (s->depth + 1)];
    slot->pending = 1;
    slot->sent_ns = now;
    s->win_next = seq + 1;
    if (!s->pw_batching || b->count >= s->pw_max_messages || s->pw_due[partition] <= now) pwire_seal_lane(s, partition);
    if (s->out_len) conn_write(s);
    wait_for_room(s);
    return 0;
}

static int nats_connect(Sender *s);
/* RabbitMQ streams: stage the message in its lane's next Publish frame (publishing id = seq; the data is the worker's
   header then the payload, as the Python driver publishes it), written with the next write; then wait for room in
   the window. A lost connection is not made again (as the Python producer): later sends fail at once. */
static int stream_send(Sender *s, int64_t seq, int partition, const char *header, const char *payload, Py_ssize_t len) {
    if (window_begin(s, seq)) return 0;
    lane_buf *b = &s->lanes[partition];
    size_t need = 12 + HEADER_BYTES + (size_t)len;
    if (b->count && 13 + b->len + need > (size_t)s->frame_max) stream_seal(s); /* a frame holds at most frame_max */
    if (lane_reserve(s, b, need)) return -1;
    char *o = b->data + b->len;
    o = put64(o, (uint64_t)seq);
    o = put32(o, (uint32_t)(HEADER_BYTES + len));
    memcpy(o, header, HEADER_BYTES);
    memcpy(o + HEADER_BYTES, payload, (size_t)len);
    b->len += need;
    b->count++;
    s->staged += need;
    window_slot *slot = &s->ring[seq % (s->depth + 1)];
    slot->pending = 1;
    slot->sent_ns = now_ns();
    s->win_next = seq + 1;
    if (s->staged >= 16384 || s->depth == 1) conn_write(s);
    wait_for_room(s);
    return 0;
}

/* AMQP: publish to the lane's queue through the default exchange: Basic.Publish (made once per lane in `prefix`),
   the content header (no properties) and the body (the worker's header, then the payload, as the Python driver
   publishes it) in frames of at most frame_max. Then wait for room in the window. A lost connection is not made
   again (as pika's producer): every later send fails at once. */
static int amqp_send(Sender *s, int64_t seq, int partition, const char *header, const char *payload, Py_ssize_t len) {
    if (!s->win_started || seq != s->win_next) { /* tags count publishes: seq = amqp_seq0 + tag - 1 from here on */
        for (int64_t q = s->win_low; s->win_started && q < s->win_next; q++) s->ring[q % (s->depth + 1)].pending = 0;
        s->amqp_seq0 = seq - s->amqp_published;
        s->win_low = s->win_next = seq;
        s->win_started = 1;
    }
    if (s->fd < 0) {
        s->win_low = s->win_next = seq + 1;
        if (buf_push(&s->failed, seq)) s->oom = 1;
        return 0;
    }
    size_t body = HEADER_BYTES + (size_t)len, chunk = (size_t)s->frame_max - 8;
    size_t frames = (body + chunk - 1) / chunk;
    if (out_reserve(s, s->prefix_len[partition] + 22 + body + 8 * frames)) {
        snprintf(s->error, sizeof s->error, "out of memory");
        return -1;
    }
    char *o = s->out + s->out_len;
    memcpy(o, s->prefix[partition], s->prefix_len[partition]);
    o += s->prefix_len[partition];
    *o++ = 2; /* the content header: class 60, weight 0, the body's size, no properties */
    o = put16(o, 1);
    o = put32(o, 14);
    o = put16(o, 60);
    o = put16(o, 0);
    o = put64(o, body);
    o = put16(o, 0);
    *o++ = (char)0xCE;
    for (size_t done = 0; done < body;) {
        size_t n = body - done < chunk ? body - done : chunk, end = done + n;
        *o++ = 3;
        o = put16(o, 1);
        o = put32(o, (uint32_t)n);
        if (done < HEADER_BYTES) { /* the part of the worker's header in this frame */
            size_t h = (end < HEADER_BYTES ? end : HEADER_BYTES) - done;
            memcpy(o, header + done, h);
            o += h, done += h;
        }
        memcpy(o, payload + (done - HEADER_BYTES), end - done);
        o += end - done, done = end;
        *o++ = (char)0xCE;
    }
    s->out_len = (size_t)(o - s->out);
    s->amqp_published++;
    window_slot *slot = &s->ring[seq % (s->depth + 1)];
    slot->pending = 1;
    slot->sent_ns = now_ns();
    s->win_next = seq + 1;
    if (s->out_len >= 16384 || s->depth == 1) conn_write(s);
    wait_for_room(s);
    return 0;
}


/* NATS: buffer `PUB <subject> <inbox>.<seq> <#bytes>` with the body the Python driver sends (one byte with the
   header's length, the header, the payload), and wait for room in the window. While the connection is lost the
   send fails at once; it is made again from reconnect_at on. */
static int nats_send(Sender *s, int64_t seq, int partition, const char *header, const char *payload, Py_ssize_t len) {
    if (s->fd < 0 && now_ns() >= s->reconnect_at && nats_connect(s) < 0) s->reconnect_at = now_ns() + RECONNECT_NS;
    if (!s->win_started || seq != s->win_next) { /* the ring starts at the first seq sent; seqs run on by one */
        for (int64_t q = s->win_low; s->win_started && q < s->win_next; q++) s->ring[q % (s->depth + 1)].pending = 0;
        s->win_low = s->win_next = seq;
        s->win_started = 1;
    }
    if (s->fd < 0) {
        s->win_low = s->win_next = seq + 1; /* nothing is awaited while the connection is lost */
        if (buf_push(&s->failed, seq)) s->oom = 1;
        return 0;
    }
    char line[64];
    int line_len = snprintf(line, sizeof line, "%lld %zd\r\n", (long long)seq, len + 1 + HEADER_BYTES);
    size_t total = s->prefix_len[partition] + (size_t)line_len + 1 + HEADER_BYTES + (size_t)len + 2;
    if (out_reserve(s, total)) {
        snprintf(s->error, sizeof s->error, "out of memory");
        return -1;
    }
    char *o = s->out + s->out_len;
    memcpy(o, s->prefix[partition], s->prefix_len[partition]);
    o += s->prefix_len[partition];
    memcpy(o, line, (size_t)line_len);
    o += line_len;
    *o++ = (char)HEADER_BYTES;
    memcpy(o, header, HEADER_BYTES);
    o += HEADER_BYTES;
    memcpy(o, payload, (size_t)len);
    o += len;
    memcpy(o, "\r\n", 2);
    s->out_len += total;
    window_slot *slot = &s->ring[seq % (s->depth + 1)];
    slot->pending = 1;
    slot->sent_ns = now_ns();
    s->win_next = seq + 1;
    if (s->out_len >= 16384 || s->depth == 1) conn_write(s); /* single mode: written at once, then waited for */
    wait_for_room(s);
    return 0;
}

/* Hand one message over. Returns 0, or -1 with s->error set. */
static int send_one(Sender *s, int64_t seq, int64_t intended, const char *payload, Py_ssize_t len, int copy) {
    char header[HEADER_BYTES];
    put_header(header, s->producer_id, seq, intended);
    int partition = (int)(seq % s->partitions);
    if (s->kind == KIND_KAFKA) {
        for (;;) {
            if (rk.produce(s->rkt, partition, copy ? RD_KAFKA_MSG_F_COPY : 0, (void *)payload, (size_t)len, header,
                           HEADER_BYTES, (void *)(intptr_t)seq) == 0)
                break;
            rd_kafka_resp_err_t err = rk.last_error();
            if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                snprintf(s->error, sizeof s->error, "produce failed: %s", rk.err2str(err));
                return -1;
            }
            serve(s, 1); /* local queue full: let deliveries drain, then retry */
        }
        if (s->single) rk.flush(s->rk, 30000);
        return 0;
    }
    if (s->kind == KIND_NATS) return nats_send(s, seq, partition, header, payload, len);
    if (s->kind == KIND_PULSAR) return pulsar_send(s, seq, partition, header, payload, len);
    if (s->kind == KIND_AMQP) return amqp_send(s, seq, partition, header, payload, len);
    if (s->kind == KIND_STREAM) return stream_send(s, seq, partition, header, payload, len);
    if (s->kind == KIND_PWIRE) return pwire_send(s, seq, partition, header, payload, len);
    char tail[48];
    int tail_len = snprintf(tail, sizeof tail, "\r\n$1\r\nd\r\n$%zd\r\n", len);
    if (out_reserve(s, s->prefix_len[partition] + HEADER_BYTES + (size_t)tail_len + (size_t)len + 2) ||
        buf_push(&s->pending, seq)) {
        snprintf(s->error, sizeof s->error, "out of memory");
        return -1;
    }
    char *o = s->out + s->out_len;
    memcpy(o, s->prefix[partition], s->prefix_len[partition]);
    o += s->prefix_len[partition];
    memcpy(o, header, HEADER_BYTES);
    o += HEADER_BYTES;
    memcpy(o, tail, (size_t)tail_len);
    o += tail_len;
    memcpy(o, payload, (size_t)len);
    o += len;
    memcpy(o, "\r\n", 2);
    s->out_len += s->prefix_len[partition] + HEADER_BYTES + (size_t)tail_len + (size_t)len + 2;
    if (s->out_len >= 16384) conn_write(s); /* behind schedule: do not hold a full buffer back */
    wait_for_room(s);
    if (s->fd < 0) conn_broken(s);
    return 0;
}

/* One message's encoded payload, through the encode callable (GIL held). New reference in *keep. */
static int encode_one(Sender *s, int64_t seq, const char **payload, Py_ssize_t *len, PyObject **keep) {
    PyObject *encoded = PyObject_CallOneArg(s->encode, PyList_GET_ITEM(s->objects, seq % s->pool));
    if (!encoded) return -1;
    char *data;
    if (PyBytes_AsStringAndSize(encoded, &data, len) < 0) {
        Py_DECREF(encoded);
        return -1;
    }
    *payload = data;
    *keep = encoded;
    return 0;
}

/* When message `seq` is due (schedule.Schedule.at, to the nanosecond). */
static inline int64_t intended_at(const Sender *s, int64_t seq) {
    if (seq < s->backlog) return s->base + (int64_t)((double)seq * s->backlog_period);
    int64_t start = s->base + (int64_t)((double)s->backlog * s->backlog_period), rest = seq - s->backlog;
    return start + (int64_t)((double)(rest / s->cycle_len) * s->period) + s->cycle_offsets[rest % s->cycle_len];
}

static PyObject *Sender_configure(Sender *s, PyObject *args, PyObject *kw) {
    static char *names[] = {"objects", "encode", "producer_id", "base_ns", "period_ns", "offsets", "backlog",
                            "backlog_period_ns", NULL};
    PyObject *objects, *encode;
    unsigned int producer_id;
    long long base, backlog = 0;
    double period, backlog_period = 0.0;
    Py_buffer offsets = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OILd|y*Ld", names, &PyList_Type, &objects, &encode, &producer_id,
                                     &base, &period, &offsets, &backlog, &backlog_period))
        return NULL;
    int64_t one = 0, *cycle = &one, cycle_len = 1;
    if (offsets.buf) {
        cycle_len = offsets.len / (Py_ssize_t)sizeof(int64_t);
        if (cycle_len < 1 || offsets.len % (Py_ssize_t)sizeof(int64_t)) {
            PyBuffer_Release(&offsets);
            return PyErr_Format(PyExc_ValueError, "offsets: one or more int64 values, as bytes");
        }
        cycle = (int64_t *)offsets.buf;
    }
    if (backlog < 0 || (backlog > 0 && backlog_period <= 0)) {
        if (offsets.buf) PyBuffer_Release(&offsets);
        return PyErr_Format(PyExc_ValueError, "backlog: a count of 0 or more, with a positive backlog_period_ns");
    }
    int64_t *copied = PyMem_RawMalloc((size_t)cycle_len * sizeof(int64_t));
    if (copied) memcpy(copied, cycle, (size_t)cycle_len * sizeof(int64_t));
    if (offsets.buf) PyBuffer_Release(&offsets);
    if (!copied) return PyErr_NoMemory();
    if (s->objects) {
        PyMem_RawFree(copied);
        return PyErr_Format(PyExc_RuntimeError, "configure() once: messages may still use the pool");
    }
    Py_ssize_t pool = PyList_GET_SIZE(objects);
    if (pool == 0) return PyErr_Format(PyExc_ValueError, "objects: the payload pool is empty");
    if (encode != Py_None && !PyCallable_Check(encode)) return PyErr_Format(PyExc_TypeError, "encode: not callable");
    const char **payload = NULL;
    Py_ssize_t *payload_len = NULL;
    if (encode == Py_None) { /* raw: the pool's bytes are the payloads, read without the GIL */
        payload = PyMem_RawMalloc((size_t)pool * sizeof(char *));
        payload_len = PyMem_RawMalloc((size_t)pool * sizeof(Py_ssize_t));
        if (!payload || !payload_len) {
            PyMem_RawFree(payload);
            PyMem_RawFree(payload_len);
            return PyErr_NoMemory();
        }
        for (Py_ssize_t i = 0; i < pool; i++) {
            PyObject *item = PyList_GET_ITEM(objects, i);
            if (!PyBytes_Check(item)) {
                PyMem_RawFree(payload);
                PyMem_RawFree(payload_len);
                return PyErr_Format(PyExc_TypeError, "objects[%zd]: raw payloads must be bytes", i);
            }
            payload[i] = PyBytes_AS_STRING(item);
            payload_len[i] = PyBytes_GET_SIZE(item);
        }
    }
    Py_XSETREF(s->objects, Py_NewRef(objects));
    Py_CLEAR(s->encode);
    if (encode != Py_None) s->encode = Py_NewRef(encode);
    PyMem_RawFree(s->payload);
    PyMem_RawFree(s->payload_len);
    s->payload = payload;
    s->payload_len = payload_len;
    s->pool = pool;
    s->producer_id = producer_id;
    s->base = base;
    s->period = period;
    PyMem_RawFree(s->cycle_offsets);
    s->cycle_offsets = copied;
    s->cycle_len = cycle_len;
    s->backlog = backlog;
    s->backlog_period = backlog_period;
    Py_RETURN_NONE;
}

/* The loop itself. Runs with the GIL released when there is no encode callable. */
static int run_loop(Sender *s, int64_t *seq_io, int64_t stop_seq, int64_t until, int64_t t_end, int *why) {
    int64_t seq = *seq_io;
    const int raw = s->encode == NULL;
    PyThreadState *ts = NULL;
    int rc = 0;
    if (raw) ts = PyEval_SaveThread();
    for (;;) {
        if (seq >= stop_seq) {
            *why = STOP_LIMIT;
            break;
        }
        int64_t now = now_ns(), intended = 0;
        if (s->period > 0) {
            intended = intended_at(s, seq);
            if (intended >= t_end) {
                *why = STOP_END;
                break;
            }
            if (now < intended) {
                int64_t target = intended < until ? intended : until;
                if (raw) {
                    wait_until(s, target);
                } else {
                    Py_BEGIN_ALLOW_THREADS wait_until(s, target);
                    Py_END_ALLOW_THREADS
                }
                if (now_ns() >= until) {
                    *why = STOP_BOUNDARY;
                    break;
                }
                continue;
            }
        }
        if (now >= t_end) { /* behind schedule at the end: stop on time; the caller counts what was still due as not sent */
            *why = STOP_END;
            break;
        }
        if (now >= until) {
            *why = STOP_BOUNDARY;
            break;
        }
        int64_t t0 = now_ns();
        /* As fast as possible: intended when the boundary was checked (`now`, not t0), so that a message taken up
           across it is warm-up on both sides: the consumer reads measured from this stamp. */
        if (s->period <= 0) intended = now;
        const char *payload;
        Py_ssize_t len;
        PyObject *keep = NULL;
        if (raw) {
            payload = s->payload[seq % s->pool];
            len = s->payload_len[seq % s->pool];
        } else if (encode_one(s, seq, &payload, &len, &keep) < 0) {
            rc = -2; /* a Python exception is set */
            break;
        }
        int64_t t1 = now_ns();
        if (buf_push(&s->started, t0) || buf_push(&s->handed, t1)) {
            Py_XDECREF(keep);
            snprintf(s->error, sizeof s->error, "out of memory");
            rc = -1;
            break;
        }
        int sent = send_one(s, seq, intended, payload, len, !raw);
        Py_XDECREF(keep);
        if (sent < 0) {
            rc = -1;
            break;
        }
        seq++;
        if (seq % POLL_EVERY == 0) {
            /* Unthrottled or behind schedule, the loop never waits: still serve acknowledgements (Kafka
               without the acknowledgement thread; Redis: write and read what has arrived). With an encode
               callable the GIL is let go here too, so the thread forwarding each interval's records gets its
               turn even when the loop never waits. */
            if (raw) {
                serve_now(s);
            } else {
                Py_BEGIN_ALLOW_THREADS serve_now(s);
                Py_END_ALLOW_THREADS
            }
        }
        if (s->oom) {
            snprintf(s->error, sizeof s->error, "out of memory");
            rc = -1;
            break;
        }
    }
    if (raw) PyEval_RestoreThread(ts);
    *seq_io = seq;
    return rc;
}

static PyObject *Sender_send_until(Sender *s, PyObject *args) {
    long long seq, stop_seq, until, t_end;
    if (!PyArg_ParseTuple(args, "LLLL", &seq, &stop_seq, &until, &t_end)) return NULL;
    if (!s->objects) return PyErr_Format(PyExc_RuntimeError, "configure() the sender first");
    if ((s->kind == KIND_KAFKA && !s->rk) || (s->kind == KIND_PULSAR && !s->pclient))
        return PyErr_Format(PyExc_RuntimeError, "the sender is closed");
    int64_t next = seq;
    int why = STOP_END;
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* sleeps end on time, to the ns the kernel can */
    int rc = run_loop(s, &next, stop_seq, until, t_end, &why);
    if (rc == -2) return NULL;
    if (rc == -1) return PyErr_Format(PyExc_RuntimeError, "%s", s->error);
    return Py_BuildValue("(Li)", (long long)next, why);
}

/* librdkafka's lines since the last call, as (text, dropped): "level\tfacility\ttext" lines, and how many a full
   buffer dropped. Empty for senders that are not Kafka's. */
static PyObject *Sender_logs(Sender *s, PyObject *Py_UNUSED(ignored)) {
    pthread_mutex_lock(&s->ack_lock);
    PyObject *text = PyUnicode_DecodeUTF8(s->log_text ? s->log_text : "", (Py_ssize_t)s->log_len, "replace");
    long long dropped = (long long)s->log_dropped;
    s->log_len = 0;
    s->log_dropped = 0;
    pthread_mutex_unlock(&s->ack_lock);
    return text ? Py_BuildValue("(NL)", text, dropped) : NULL;
}

static PyObject *Sender_take(Sender *s, PyObject *Py_UNUSED(ignored)) {
    pthread_mutex_lock(&s->ack_lock);
    PyObject *acked = buf_take(&s->ack_seq), *acked_ns = buf_take(&s->ack_ns), *failed = buf_take(&s->failed);
    pthread_mutex_unlock(&s->ack_lock);
    return Py_BuildValue("(NNNNN)", buf_take(&s->started), buf_take(&s->handed), acked, acked_ns, failed);
}

/* Wait for the outstanding acknowledgements; returns how many never came. */
static PyObject *Sender_flush(Sender *s, PyObject *args) {
    double timeout_s;
    if (!PyArg_ParseTuple(args, "d", &timeout_s)) return NULL;
    long long left = 0;
    if (s->kind == KIND_KAFKA) {
        if (!s->rk) return PyLong_FromLong(0);
        Py_BEGIN_ALLOW_THREADS int64_t deadline = now_ns() + (int64_t)(timeout_s * 1e9);
        while (s->acker_running && rk.outq_len(s->rk) > 0 && now_ns() < deadline) sleep_ns(1000000);
        acker_join(s);
        int64_t left_ns = deadline - now_ns();
        rk.flush(s->rk, left_ns > 0 ? (int)(left_ns / 1000000) : 0);
        left = rk.outq_len(s->rk);
        Py_END_ALLOW_THREADS
    } else if (s->kind == KIND_PULSAR) {
        Py_BEGIN_ALLOW_THREADS left = pulsar_wait(s, 0, (int64_t)(timeout_s * 1e9));
        Py_END_ALLOW_THREADS
    } else {
        Py_BEGIN_ALLOW_THREADS conn_drain(s, (int)(timeout_s * 1000));
        left = in_flight(s);
        Py_END_ALLOW_THREADS
    }
    return PyLong_FromLongLong(left);
}

static void sender_close(Sender *s) {
    if (s->pclient) { /* closing a producer waits for what it holds; each answer (or failure) comes to on_pulsar_sent */
        pulsar_wait(s, 0, 5000000000LL);
        for (int i = 0; i < s->partitions; i++)
            if (s->producers[i]) {
                pl.producer_close(s->producers[i]);
                pl.producer_free(s->producers[i]);
                s->producers[i] = NULL;
            }
        pl.client_close(s->pclient);
        pl.client_free(s->pclient);
        s->pclient = NULL;
    }
    if (s->rk) {
        acker_join(s);
        rk.flush(s->rk, 5000);
        rk.topic_destroy(s->rkt);
        rk.destroy(s->rk);
        s->rk = NULL;
        s->rkt = NULL;
    }
    if (s->fd >= 0) {
        conn_drain(s, 5000);
        close(s->fd);
        s->fd = -1;
    }
    s->reconnect_at = INT64_MAX; /* closed: a NATS sender does not connect again */
}

static PyObject *Sender_close(Sender *s, PyObject *Py_UNUSED(ignored)) {
    Py_BEGIN_ALLOW_THREADS sender_close(s);
    Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static void Sender_dealloc(Sender *s) {
    sender_close(s);
    if (s->prefix) {
        for (int i = 0; i < s->partitions; i++) PyMem_RawFree(s->prefix[i]);
        PyMem_RawFree(s->prefix);
        PyMem_RawFree(s->prefix_len);
    }
    free(s->out);
    free(s->in);
    free(s->pending.data);
    free(s->started.data);
    free(s->handed.data);
    free(s->ack_seq.data);
    free(s->ack_ns.data);
    free(s->stage_seq.data);
    free(s->stage_ns.data);
    free(s->stage_failed.data);
    free(s->kafka_stamps);
    free(s->failed.data);
    free(s->log_text);
    pthread_mutex_destroy(&s->ack_lock);
    PyMem_RawFree(s->payload);
    PyMem_RawFree(s->payload_len);
    PyMem_RawFree(s->cycle_offsets);
    PyMem_RawFree(s->ring);
    PyMem_RawFree(s->producers);
    for (pl_block *b = s->pl_free, *next; b; b = next) next = b->next, free(b);
    for (int i = 0; s->lanes && i < s->partitions; i++) free(s->lanes[i].data);
    PyMem_RawFree(s->lanes);
    for (int i = 0; s->pw_name && i < s->partitions; i++) PyMem_RawFree(s->pw_name[i]);
    PyMem_RawFree(s->pw_name);
    PyMem_RawFree(s->pw_name_len);
    PyMem_RawFree(s->pw_first);
    PyMem_RawFree(s->pw_last);
    PyMem_RawFree(s->pw_due);
    free(s->scratch);
    pthread_cond_destroy(&s->acked);
    PyMem_RawFree(s->inbox);
    PyMem_RawFree(s->host);
    Py_XDECREF(s->objects);
    Py_XDECREF(s->encode);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static Sender *sender_new(int kind, int partitions) {
    Sender *s = PyObject_New(Sender, &SenderType);
    if (!s) return NULL;
    memset((char *)s + sizeof(PyObject), 0, sizeof(Sender) - sizeof(PyObject));
    s->kind = kind;
    s->partitions = partitions;
    s->fd = -1;
    pthread_mutex_init(&s->ack_lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* pulsar_wait's deadlines */
    pthread_cond_init(&s->acked, &attr);
    pthread_condattr_destroy(&attr);
    return s;
}

/* kafka_sender(config: dict[str, str], topic: str, partitions: int, single: bool) */
static PyObject *kafka_sender(PyObject *self, PyObject *args) {
    PyObject *config;
    const char *topic;
    int partitions, single;
    if (!PyArg_ParseTuple(args, "O!sip", &PyDict_Type, &config, &topic, &partitions, &single)) return NULL;
    if (!rk.loaded) return PyErr_Format(PyExc_RuntimeError, "load_rdkafka() first");
    if (partitions < 1) return PyErr_Format(PyExc_ValueError, "partitions: must be at least 1, got %d", partitions);
    char err[512];
    rd_kafka_conf_t *conf = rk.conf_new();
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(config, &pos, &key, &value)) {
        const char *k = PyUnicode_AsUTF8(key), *v = PyUnicode_Check(value) ? PyUnicode_AsUTF8(value) : NULL;
        if (!k || !v) {
            rk.conf_destroy(conf);
            PyErr_Clear();
            return PyErr_Format(PyExc_TypeError, "config: keys and values must be strings");
        }
        if (rk.conf_set(conf, k, v, err, sizeof err) != RD_KAFKA_CONF_OK) {
            rk.conf_destroy(conf);
            return PyErr_Format(PyExc_ValueError, "config %s: %s", k, err);
        }
    }
    Sender *s = sender_new(KIND_KAFKA, partitions);
    if (!s) {
        rk.conf_destroy(conf);
        return NULL;
    }
    s->single = single;
    if (rk.conf_interceptor_add_on_new && rk.interceptor_add_on_acknowledgement) {
        s->kafka_stamps = calloc(KAFKA_STAMPS, sizeof *s->kafka_stamps); /* pages taken as seqs reach them */
        if (s->kafka_stamps &&
            rk.conf_interceptor_add_on_new(conf, "brokerbench-stamps", on_new, s) != RD_KAFKA_RESP_ERR_NO_ERROR) {
            free(s->kafka_stamps);
            s->kafka_stamps = NULL;
        }
    }
    rk.conf_set_dr_msg_cb(conf, on_delivery);
    rk.conf_set_opaque(conf, s);
    rk.conf_set_log_cb(conf, on_log);
    s->rk = rk.new_(RD_KAFKA_PRODUCER, conf, err, sizeof err); /* takes conf on success */
    if (!s->rk) {
        rk.conf_destroy(conf);
        Py_DECREF(s);
        return PyErr_Format(PyExc_RuntimeError, "cannot create the Kafka producer: %s", err);
    }
    s->rkt = rk.topic_new(s->rk, topic, NULL);
    if (!s->rkt) {
        Py_DECREF(s);
        return PyErr_Format(PyExc_RuntimeError, "cannot open topic %s: %s", topic, rk.err2str(rk.last_error()));
    }
    if (!single) {
        s->acker_running = 1;
        if (pthread_create(&s->acker, NULL, acker_main, s) != 0) {
            s->acker_running = 0;
            Py_DECREF(s);
            return PyErr_Format(PyExc_RuntimeError, "cannot start the acknowledgement thread");
        }
    }
    return (PyObject *)s;
}

/* A TCP connection to host:port with TCP_NODELAY, read and write timeouts and the kernel's receive stamps
   (recv_stamped); -1 with `err` set. Call without the GIL. */
static int tcp_connect(const char *host, int port, double timeout_s, char *err, size_t err_size) {
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrinfo hints = {0}, *found = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(host, portstr, &hints, &found);
    if (gai != 0) {
        snprintf(err, err_size, "cannot resolve %s: %s", host, gai_strerror(gai));
        return -1;
    }
    int fd = -1, why = 0;
    for (struct addrinfo *a = found; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            why = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(found);
    if (fd < 0) {
        snprintf(err, err_size, "%s", strerror(why));
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one); /* the receive time of replies: recv_stamped */
    struct timeval tv = {(time_t)timeout_s, (suseconds_t)((timeout_s - (double)(time_t)timeout_s) * 1e6)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

/* NATS: read from the new connection until `want` has come (a whole line of it); 0, or -1 with s->error set. */
static int nats_expect(Sender *s, int fd, const char *want) {
    char buf[8192];
    size_t got = 0;
    for (;;) {
        ssize_t n = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (n <= 0) {
            snprintf(s->error, sizeof s->error, "NATS did not answer (%s)", n < 0 ? strerror(errno) : "closed");
            return -1;
        }
        got += (size_t)n;
        buf[got] = 0;
        char *err = strstr(buf, "-ERR");
        if (err) {
            snprintf(s->error, sizeof s->error, "NATS refused the connection: %.200s", err);
            return -1;
        }
        if (!strcmp(want, "INFO ") && !strncmp(buf, "INFO ", 5) && strstr(buf, "\r\n")) {
            if (strstr(buf, "\"tls_required\":true") || strstr(buf, "\"auth_required\":true")) {
                snprintf(s->error, sizeof s->error, "the NATS server requires TLS or authentication");
                return -1;
            }
            return 0;
        }
        if (strcmp(want, "INFO ") && strstr(buf, want)) return 0;
        if (got == sizeof buf - 1) memmove(buf, buf + got / 2, got - got / 2), got -= got / 2; /* keep the tail */
    }
}

/* NATS: connect, introduce this client (no echo of +OK; headers so that a status reply names itself), subscribe to
   the inbox every PubAck is addressed to, and wait for the PONG that says the server took all of it. 0, or -1 with
   s->error set; the connection is s->fd. Called without the GIL, or while the loop holds it (a reconnect). On a
   cluster, the server at server_at; one that cannot be reached leaves the next attempt to the following one. */
static int nats_connect(Sender *s) {
    const char *host = s->servers ? s->server_host[s->server_at] : s->host;
    int port = s->servers ? s->server_port[s->server_at] : s->port;
    if (s->servers > 1) s->server_at = (s->server_at + 1) % s->servers; /* taken back below once connected */
    char err[256];
    int fd = tcp_connect(host, port, s->timeout_s, err, sizeof err);
    if (fd < 0) {
        snprintf(s->error, sizeof s->error, "cannot connect to NATS at %s:%d: %s", host, port, err);
        return -1;
    }
    char hello[512];
    int n = snprintf(hello, sizeof hello,
                     "CONNECT {\"verbose\":false,\"pedantic\":false,\"tls_required\":false,\"name\":\"brokerbench\","
                     "\"lang\":\"c\",\"version\":\"1\",\"protocol\":1,\"headers\":true,\"no_responders\":true}\r\n"
                     "SUB %s.* 1\r\nPING\r\n",
                     s->inbox);
    if (nats_expect(s, fd, "INFO ") < 0 || send(fd, hello, (size_t)n, MSG_NOSIGNAL) != n ||
        nats_expect(s, fd, "PONG\r\n") < 0) {
        if (!s->error[0]) snprintf(s->error, sizeof s->error, "NATS: the connection was lost while it was made");
        close(fd);
        return -1;
    }
    if (s->servers > 1) s->server_at = (s->server_at + s->servers - 1) % s->servers; /* this one serves */
    s->fd = fd;
    s->in_len = s->in_pos = s->out_len = 0;
    s->error[0] = 0;
    return 0;
}

/* AMQP, while the connection is made: read one whole frame (blocking, within the socket's timeout). Returns its
   payload's size, or -1 with s->error set; a Connection.Close or Channel.Close from the broker says why. */
static long amqp_read_frame(Sender *s, int fd, unsigned char *buf, size_t cap, int *class_id, int *method) {
    size_t got = 0, need = 7;
    while (got < need) {
        ssize_t n = recv(fd, buf + got, need - got, 0);
        if (n <= 0) {
            snprintf(s->error, sizeof s->error, "RabbitMQ closed the connection while it was made (%s)",
                     n < 0 ? strerror(errno) : "closed");
            return -1;
        }
        got += (size_t)n;
        if (got == 7) {
            need = 8 + be32(buf + 3);
            if (need > cap) {
                snprintf(s->error, sizeof s->error, "RabbitMQ sent a frame of %zu bytes while the connection was made", need);
                return -1;
            }
        }
    }
    long size = (long)need - 8;
    *class_id = buf[0] == 1 && size >= 4 ? be16(buf + 7) : 0;
    *method = buf[0] == 1 && size >= 4 ? be16(buf + 9) : 0;
    if ((*class_id == 10 && *method == 50) || (*class_id == 20 && *method == 40)) {
        s->amqp_closing_channel = *class_id == 20;
        amqp_closed_by_broker(s, buf + 11, (size_t)size - 4);
        return -1;
    }
    return size;
}

/* AMQP: read frames until the method class_id.method comes (0 or -1); its arguments are in buf + 11. */
static int amqp_expect(Sender *s, int fd, unsigned char *buf, size_t cap, int want_class, int want_method) {
    for (;;) {
        int class_id, method;
        if (amqp_read_frame(s, fd, buf, cap, &class_id, &method) < 0) return -1;
        if (class_id == want_class && method == want_method) return 0;
    }
}

static int send_all(int fd, const char *data, size_t len) {
    for (size_t off = 0; off < len;) {
        ssize_t n = send(fd, data + off, len - off, MSG_NOSIGNAL);
        if (n <= 0) return -1;
        off += (size_t)n;
    }
    return 0;
}

/* AMQP: a method frame on `channel` around the arguments in args[0..len). */
static size_t amqp_method(char *out, int channel, int class_id, int method, const char *args, size_t len) {
    char *o = out;
    *o++ = 1;
    o = put16(o, (uint16_t)channel);
    o = put32(o, (uint32_t)(4 + len));
    o = put16(o, (uint16_t)class_id);
    o = put16(o, (uint16_t)method);
    memcpy(o, args, len);
    o += len;
    *o++ = (char)0xCE;
    return (size_t)(o - out);
}

/* AMQP: the protocol header, Connection.Start-Ok (PLAIN), Tune-Ok (the broker's frame size, no heartbeats: the loop
   reads its socket all the time), Open of the virtual host, then channel 1 in confirm mode. 0, or -1 with s->error
   set. Called without the GIL. */
static int amqp_connect(Sender *s, const char *user, const char *password, const char *vhost) {
    char err[256];
    int fd = tcp_connect(s->host, s->port, s->timeout_s, err, sizeof err);
    if (fd < 0) {
        snprintf(s->error, sizeof s->error, "cannot connect to RabbitMQ at %s:%d: %s", s->host, s->port, err);
        return -1;
    }
    unsigned char buf[65536];
    char args[2048], frame[2100], *o;
    size_t ulen = strlen(user), plen = strlen(password), vlen = strlen(vhost);
    if (ulen + plen > 1000 || vlen > 255) {
        snprintf(s->error, sizeof s->error, "the user, password or virtual host is too long");
        close(fd);
        return -1;
    }
    if (send_all(fd, "AMQP\0\0\x09\x01", 8) < 0 || amqp_expect(s, fd, buf, sizeof buf, 10, 10) < 0) goto fail;
    /* Start-Ok: client properties that ask for a refused login to be named (a Connection.Close, not a bare hang-up),
       PLAIN, "\0user\0password", en_US */
    static const char capability[] = "authentication_failure_close";
    size_t caps = 1 + sizeof capability - 1 + 2, props = 1 + 12 + 1 + 4 + caps;
    o = put32(args, (uint32_t)props);
    o = put_short_str(o, "capabilities", 12);
    *o++ = 'F';
    o = put32(o, (uint32_t)caps);
    o = put_short_str(o, capability, sizeof capability - 1);
    *o++ = 't';
    *o++ = 1;
    o = put_short_str(o, "PLAIN", 5);
    o = put32(o, (uint32_t)(ulen + plen + 2));
    *o++ = 0;
    memcpy(o, user, ulen), o += ulen;
    *o++ = 0;
    memcpy(o, password, plen), o += plen;
    o = put_short_str(o, "en_US", 5);
    if (send_all(fd, frame, amqp_method(frame, 0, 10, 11, args, (size_t)(o - args))) < 0 ||
        amqp_expect(s, fd, buf, sizeof buf, 10, 30) < 0)
        goto fail;
    uint16_t channel_max = be16(buf + 11);
    uint32_t frame_max = be32(buf + 13);
    s->frame_max = frame_max == 0 || frame_max > 131072 ? 131072 : (int)frame_max;
    o = put16(args, channel_max);
    o = put32(o, (uint32_t)s->frame_max);
    o = put16(o, 0);
    if (send_all(fd, frame, amqp_method(frame, 0, 10, 31, args, (size_t)(o - args))) < 0) goto fail;
    o = put_short_str(args, vhost, vlen);
    o = put_short_str(o, "", 0);
    *o++ = 0;
    if (send_all(fd, frame, amqp_method(frame, 0, 10, 40, args, (size_t)(o - args))) < 0 ||
        amqp_expect(s, fd, buf, sizeof buf, 10, 41) < 0)
        goto fail;
    args[0] = 0; /* Channel.Open, then Confirm.Select without nowait */
    if (send_all(fd, frame, amqp_method(frame, 1, 20, 10, args, 1)) < 0 || amqp_expect(s, fd, buf, sizeof buf, 20, 11) < 0 ||
        send_all(fd, frame, amqp_method(frame, 1, 85, 10, args, 1)) < 0 || amqp_expect(s, fd, buf, sizeof buf, 85, 11) < 0)
        goto fail;
    s->fd = fd;
    s->error[0] = 0;
    return 0;
fail:
    if (!s->error[0]) snprintf(s->error, sizeof s->error, "RabbitMQ: the connection was lost while it was made");
    close(fd);
    return -1;
}

/* A sender that speaks its broker's protocol on a connection of its own (NATS, AMQP, the stream protocol): the
   window's ring, the host, the input buffer, and per lane either a command prefix (`prefixes`) or a staging buffer.
   NULL with MemoryError set. */
static Sender *windowed_sender_new(int kind, int partitions, const char *host, int port, int depth, double timeout_s,
                                   int prefixes) {
    Sender *s = sender_new(kind, partitions);
    if (!s) return NULL;
    s->depth = depth;
    s->timeout_s = timeout_s;
    s->port = port;
    s->reconnect_at = kind == KIND_NATS ? 0 : INT64_MAX; /* only NATS connects again */
    s->host = PyMem_RawMalloc(strlen(host) + 1);
    s->ring = PyMem_RawCalloc((size_t)depth + 1, sizeof(window_slot));
    if (prefixes) {
        s->prefix = PyMem_RawCalloc((size_t)partitions, sizeof(char *));
        s->prefix_len = PyMem_RawCalloc((size_t)partitions, sizeof(size_t));
    } else {
        s->lanes = PyMem_RawCalloc((size_t)partitions, sizeof(lane_buf));
    }
    s->in_cap = 1 << 16;
    s->in = malloc(s->in_cap);
    if (!s->host || !s->ring || (prefixes ? !s->prefix || !s->prefix_len : !s->lanes) || !s->in) {
        Py_DECREF(s);
        PyErr_NoMemory();
        return NULL;
    }
    strcpy(s->host, host);
    return s;
}

/* The sender once its connection is made (rc 0), or OSError with the reason and NULL. */
static PyObject *connected(Sender *s, int rc) {
    if (rc == 0) return (PyObject *)s;
    PyObject *err = PyErr_Format(PyExc_OSError, "%s", s->error);
    Py_DECREF(s);
    return err;
}

/* RabbitMQ streams, while the connection is made: read one whole frame (blocking, within the socket's timeout);
   returns its key, its content (after key and version) in buf, its size in *len; -1 with s->error set. */
static int stream_read_frame(Sender *s, int fd, unsigned char *buf, size_t cap, size_t *len) {
    size_t got = 0, need = 4;
    while (got < need) {
        ssize_t n = recv(fd, buf + got, need - got, 0);
        if (n <= 0) {
            snprintf(s->error, sizeof s->error, "RabbitMQ closed the stream connection while it was made (%s)",
                     n < 0 ? strerror(errno) : "closed");
            return -1;
        }
        got += (size_t)n;
        if (got == 4) {
            need = 4 + be32(buf);
            if (need > cap || need < 8) {
                snprintf(s->error, sizeof s->error, "RabbitMQ sent a stream frame of %zu bytes while it was made", need);
                return -1;
            }
        }
    }
    *len = need - 8;
    return be16(buf + 4);
}

/* RabbitMQ streams: send a request and wait for its response (key | 0x8000); 0 when its code is OK (1). */
static int stream_request(Sender *s, int fd, const char *frame, size_t len, const char *what) {
    unsigned char buf[65536];
    size_t size;
    int want = be16((const unsigned char *)frame + 4) | 0x8000;
    if (send_all(fd, frame, len) < 0) {
        snprintf(s->error, sizeof s->error, "RabbitMQ: the stream connection was lost (%s)", what);
        return -1;
    }
    for (;;) {
        int key = stream_read_frame(s, fd, buf, sizeof buf, &size);
        if (key < 0) return -1;
        if (key != want) continue;
        int code = size >= 6 ? be16(buf + 12) : 0;
        if (code == 1) return 0;
        snprintf(s->error, sizeof s->error, "RabbitMQ refused %s: %s (stream response code %d)", what,
                 code == 2 ? "the stream does not exist" : code == 8 ? "authentication failure" :
                 code == 0x0c ? "virtual host access failure" : code == 0x10 ? "access refused" : "see the code", code);
        return -1;
    }
}

/* Start a request frame: size (filled by stream_end), key, version 1, correlation id. */
static char *stream_begin(char *frame, int key, uint32_t correlation) {
    char *o = put32(frame, 0);
    o = put16(o, (uint16_t)key);
    o = put16(o, 1);
    return put32(o, correlation);
}

static size_t stream_end(char *frame, char *o) {
    put32(frame, (uint32_t)(o - frame - 4));
    return (size_t)(o - frame);
}

static char *put_str16(char *o, const char *str, size_t len) {
    o = put16(o, (uint16_t)len);
    memcpy(o, str, len);
    return o + len;
}

/* RabbitMQ streams: peer properties, PLAIN, the broker's Tune answered (its frame size, no heartbeats: the loop reads
   its socket all the time), Open of the virtual host, and a publisher per lane (id = the lane, no reference: no
   deduplication). 0, or -1 with s->error set. Called without the GIL. */
static int stream_connect(Sender *s, const char *user, const char *password, const char *vhost, PyObject **streams,
                          Py_ssize_t count) {
    char err[256];
    int fd = tcp_connect(s->host, s->port, s->timeout_s, err, sizeof err);
    if (fd < 0) {
        snprintf(s->error, sizeof s->error, "cannot connect to RabbitMQ's stream port %s:%d: %s", s->host, s->port, err);
        return -1;
    }
    char frame[2048], *o;
    unsigned char buf[65536];
    size_t ulen = strlen(user), plen = strlen(password), size;
    if (ulen + plen > 1000 || strlen(vhost) > 255) {
        snprintf(s->error, sizeof s->error, "the user, password or virtual host is too long");
        goto fail;
    }
    o = stream_begin(frame, 0x11, 1);
    o = put32(o, 0); /* no peer properties */
    if (stream_request(s, fd, frame, stream_end(frame, o), "the peer properties") < 0) goto fail;
    o = stream_begin(frame, 0x12, 2);
    if (stream_request(s, fd, frame, stream_end(frame, o), "the SASL handshake") < 0) goto fail;
    o = stream_begin(frame, 0x13, 3);
    o = put_str16(o, "PLAIN", 5);
    o = put32(o, (uint32_t)(ulen + plen + 2));
    *o++ = 0;
    memcpy(o, user, ulen), o += ulen;
    *o++ = 0;
    memcpy(o, password, plen), o += plen;
    if (stream_request(s, fd, frame, stream_end(frame, o), "the login") < 0) goto fail;
    for (int key = 0; key != 0x14;) /* the broker's Tune */
        if ((key = stream_read_frame(s, fd, buf, sizeof buf, &size)) < 0) goto fail;
    uint32_t frame_max = size >= 4 ? be32(buf + 8) : 0;
    s->frame_max = frame_max == 0 || frame_max > 1048576 ? 1048576 : (int)frame_max;
    o = put32(frame, 12);
    o = put16(o, 0x14);
    o = put16(o, 1);
    o = put32(o, (uint32_t)s->frame_max);
    o = put32(o, 0);
    if (send_all(fd, frame, 16) < 0) goto fail;
    o = stream_begin(frame, 0x15, 4);
    o = put_str16(o, vhost, strlen(vhost));
    if (stream_request(s, fd, frame, stream_end(frame, o), "the virtual host") < 0) goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        o = stream_begin(frame, 0x01, (uint32_t)(5 + i));
        *o++ = (char)i;
        o = put16(o, 0); /* no reference */
        o = put_str16(o, PyBytes_AS_STRING(streams[i]), (size_t)PyBytes_GET_SIZE(streams[i]));
        if (stream_request(s, fd, frame, stream_end(frame, o), "a publisher") < 0) goto fail;
    }
    s->fd = fd;
    s->error[0] = 0;
    return 0;
fail:
    close(fd);
    return -1;
}

/* stream_sender(host, port, user, password, vhost, streams: list[bytes], depth, timeout_s=30.0) */
static PyObject *stream_sender(PyObject *self, PyObject *args) {
    const char *host, *user, *password, *vhost;
    int port, depth;
    PyObject *streams;
    double timeout_s = 30.0;
    if (!PyArg_ParseTuple(args, "sisssO!i|d", &host, &port, &user, &password, &vhost, &PyList_Type, &streams, &depth,
                          &timeout_s))
        return NULL;
    if (timeout_s <= 0) return PyErr_Format(PyExc_ValueError, "timeout_s: must be positive");
    int partitions = (int)PyList_GET_SIZE(streams);
    if (partitions < 1 || partitions > 255) return PyErr_Format(PyExc_ValueError, "streams: 1 to 255 streams");
    if (depth < 1) return PyErr_Format(PyExc_ValueError, "depth: must be at least 1, got %d", depth);
    for (int i = 0; i < partitions; i++) {
        PyObject *stream = PyList_GET_ITEM(streams, i);
        if (!PyBytes_Check(stream) || PyBytes_GET_SIZE(stream) < 1 || PyBytes_GET_SIZE(stream) > 255)
            return PyErr_Format(PyExc_ValueError, "streams[%d]: must be bytes of 1 to 255", i);
    }
    Sender *s = windowed_sender_new(KIND_STREAM, partitions, host, port, depth, timeout_s, 0);
    if (!s) return NULL;
    int rc;
    PyObject **items = &PyList_GET_ITEM(streams, 0);
    Py_BEGIN_ALLOW_THREADS rc = stream_connect(s, user, password, vhost, items, partitions);
    Py_END_ALLOW_THREADS return connected(s, rc);
}

static int setting(PyObject *settings, const char *name, long *value);
static int check_pulsar_settings(PyObject *settings);

/* Pulsar's binary protocol, while the connection is made: read one whole frame (blocking, within the socket's
   timeout); returns its command type with the command's own fields in *sub, or -1 with s->error set. */
static int pwire_read_frame(Sender *s, int fd, unsigned char *buf, size_t cap, const unsigned char **sub, size_t *sub_len) {
    size_t got = 0, need = 4;
    while (got < need) {
        ssize_t n = recv(fd, buf + got, need - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            snprintf(s->error, sizeof s->error, "Pulsar at %s:%d %s", s->host, s->port,
                     n == 0 ? "closed the connection" : "did not answer within the timeout");
            return -1;
        }
        got += (size_t)n;
        if (got == 4) {
            need = 4 + be32(buf);
            if (need > cap || need < 8) {
                snprintf(s->error, sizeof s->error, "Pulsar at %s:%d sent a frame of %zu bytes", s->host, s->port, need);
                return -1;
            }
        }
    }
    const unsigned char *c = buf + 8, *end = c + be32(buf + 4), *data;
    if (end > buf + need) end = buf + need;
    int field, type = -1;
    uint64_t value;
    size_t len;
    *sub = NULL, *sub_len = 0;
    while (pb_next(&c, end, &field, &value, &data, &len) == 1) {
        if (field == 1) type = (int)value;
        else if (field == type) *sub = data, *sub_len = len;
    }
    return type;
}

/* The message of a CommandError's fields (or "no reason given"), into s->error after `what`. */
static void pwire_error(Sender *s, const char *what, const unsigned char *sub, size_t sub_len) {
    const unsigned char *q = sub, *data, *message = NULL;
    size_t len, message_len = 0;
    int field;
    uint64_t value;
    while (q && pb_next(&q, sub + sub_len, &field, &value, &data, &len) == 1)
        if (field == 3) message = data, message_len = len > 300 ? 300 : len;
    snprintf(s->error, sizeof s->error, "Pulsar at %s:%d refused %s: %.*s", s->host, s->port, what,
             message ? (int)message_len : 16, message ? (const char *)message : "no reason given");
}

/* Connect, then make a producer per lane (producer id = the lane) and keep the name the broker gives it. */
static int pwire_connect(Sender *s, PyObject **topics, Py_ssize_t count) {
    char err[256];
    int fd = tcp_connect(s->host, s->port, s->timeout_s, err, sizeof err);
    if (fd < 0) {
        snprintf(s->error, sizeof s->error, "cannot connect to Pulsar at %s:%d: %s", s->host, s->port, err);
        return -1;
    }
    size_t cap = 1 << 16;
    unsigned char *buf = malloc(cap);
    const unsigned char *sub, *data;
    size_t sub_len, len;
    int field, type;
    uint64_t value;
    char fields[1200], *f = pb_bytes(fields, 1, "brokerbench", 11);
    f = pb_uint(f, 4, PW_PROTOCOL_VERSION);
    s->out_len = 0;
    if (!buf) {
        snprintf(s->error, sizeof s->error, "out of memory");
        goto fail;
    }
    if (pwire_command(s, PW_CONNECT, fields, (size_t)(f - fields)) || send_all(fd, s->out, s->out_len) < 0) {
        snprintf(s->error, sizeof s->error, "cannot write to Pulsar at %s:%d", s->host, s->port);
        goto fail;
    }
    while ((type = pwire_read_frame(s, fd, buf, cap, &sub, &sub_len)) != PW_CONNECTED) {
        if (type < 0) goto fail;
        if (type == PW_ERROR) {
            pwire_error(s, "the connection", sub, sub_len);
            goto fail;
        }
        if (type != PW_PING) {
            snprintf(s->error, sizeof s->error, "Pulsar at %s:%d answered the connection with command %d (it may want "
                     "authentication, which this loop does not do)", s->host, s->port, type);
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t topic_len;
        const char *topic = PyUnicode_AsUTF8AndSize(topics[i], &topic_len);
        if (!topic || topic_len > 1000) {
            snprintf(s->error, sizeof s->error, "topics[%zd]: a str of at most 1000 bytes", i);
            goto fail;
        }
        f = pb_bytes(fields, 1, topic, (size_t)topic_len);
        f = pb_uint(f, 2, (uint64_t)i);
        f = pb_uint(f, 3, (uint64_t)i + 1);
        s->out_len = 0;
        if (pwire_command(s, PW_PRODUCER, fields, (size_t)(f - fields)) || send_all(fd, s->out, s->out_len) < 0) {
            snprintf(s->error, sizeof s->error, "cannot write to Pulsar at %s:%d", s->host, s->port);
            goto fail;
        }
        for (;;) {
            if ((type = pwire_read_frame(s, fd, buf, cap, &sub, &sub_len)) < 0) goto fail;
            if (type == PW_ERROR) {
                char what[64];
                snprintf(what, sizeof what, "a producer for lane %zd", i);
                pwire_error(s, what, sub, sub_len);
                goto fail;
            }
            if (type != PW_PRODUCER_SUCCESS) continue;
            const unsigned char *q = sub, *name = NULL;
            size_t name_len = 0;
            int ready = 1;
            while (q && pb_next(&q, sub + sub_len, &field, &value, &data, &len) == 1) {
                if (field == 2) name = data, name_len = len;
                else if (field == 6) ready = value != 0;
            }
            if (!ready) continue; /* a later success says it is ready */
            if (!name || name_len > 255) {
                snprintf(s->error, sizeof s->error, "Pulsar at %s:%d gave lane %zd's producer no name", s->host, s->port, i);
                goto fail;
            }
            s->pw_name[i] = PyMem_RawMalloc(name_len ? name_len : 1);
            if (!s->pw_name[i]) {
                snprintf(s->error, sizeof s->error, "out of memory");
                goto fail;
            }
            memcpy(s->pw_name[i], name, name_len);
            s->pw_name_len[i] = name_len;
            break;
        }
    }
    free(buf);
    s->out_len = 0;
    s->fd = fd;
    s->error[0] = 0;
    return 0;
fail:
    free(buf);
    s->out_len = 0;
    close(fd);
    return -1;
}

/* pulsar_wire_sender(host, port, topics: list[str], settings: dict, single: bool, depth: int, timeout_s=30.0): a
   producer per topic (all served by the broker at host:port), batching as settings say (brokers.pulsar's
   producer_settings), at most depth messages unanswered in all. */
static PyObject *pulsar_wire_sender(PyObject *self, PyObject *args) {
    const char *host;
    int port, single, depth;
    PyObject *topics, *settings;
    double timeout_s = 30.0;
    if (!PyArg_ParseTuple(args, "siO!O!pi|d", &host, &port, &PyList_Type, &topics, &PyDict_Type, &settings, &single,
                          &depth, &timeout_s))
        return NULL;
    if (timeout_s <= 0) return PyErr_Format(PyExc_ValueError, "timeout_s: must be positive");
    if (depth < 1) return PyErr_Format(PyExc_ValueError, "depth: must be at least 1, got %d", depth);
    int partitions = (int)PyList_GET_SIZE(topics);
    if (partitions < 1) return PyErr_Format(PyExc_ValueError, "topics: at least one topic is needed");
    for (int i = 0; i < partitions; i++)
        if (!PyUnicode_Check(PyList_GET_ITEM(topics, i))) return PyErr_Format(PyExc_TypeError, "topics[%d]: must be a str", i);
    if (check_pulsar_settings(settings) < 0) return NULL;
    long batching = 0, delay_ms = 10, max_bytes = 128 * 1024, max_messages = 1000;
    if (setting(settings, "batching_enabled", &batching) < 0 ||
        setting(settings, "batching_max_publish_delay_ms", &delay_ms) < 0 ||
        setting(settings, "batching_max_allowed_size_in_bytes", &max_bytes) < 0 ||
        setting(settings, "batching_max_messages", &max_messages) < 0)
        return NULL;
    if (batching && (delay_ms < 0 || max_bytes < 1 || max_messages < 1))
        return PyErr_Format(PyExc_ValueError, "settings: the batch's delay, bytes and messages must be positive");
    Sender *s = windowed_sender_new(KIND_PWIRE, partitions, host, port, single ? 1 : depth, timeout_s, 0);
    if (!s) return NULL;
    s->single = single;
    s->pw_batching = batching && !single;
    s->pw_max_messages = max_messages;
    s->pw_max_bytes = max_bytes;
    s->pw_delay_ns = (int64_t)delay_ms * 1000000LL;
    s->pw_first = PyMem_RawCalloc((size_t)partitions, sizeof(int64_t));
    s->pw_last = PyMem_RawCalloc((size_t)partitions, sizeof(int64_t));
    s->pw_due = PyMem_RawCalloc((size_t)partitions, sizeof(int64_t));
    s->pw_name = PyMem_RawCalloc((size_t)partitions, sizeof(char *));
    s->pw_name_len = PyMem_RawCalloc((size_t)partitions, sizeof(size_t));
    if (!s->pw_first || !s->pw_last || !s->pw_due || !s->pw_name || !s->pw_name_len) {
        Py_DECREF(s);
        return PyErr_NoMemory();
    }
    int rc;
    PyObject **items = &PyList_GET_ITEM(topics, 0);
    Py_BEGIN_ALLOW_THREADS rc = pwire_connect(s, items, partitions);
    Py_END_ALLOW_THREADS return connected(s, rc);
}

/* amqp_sender(host, port, user, password, vhost, queues: list[bytes], depth, timeout_s=30.0) */
static PyObject *amqp_sender(PyObject *self, PyObject *args) {
    const char *host, *user, *password, *vhost;
    int port, depth;
    PyObject *queues;
    double timeout_s = 30.0;
    if (!PyArg_ParseTuple(args, "sisssO!i|d", &host, &port, &user, &password, &vhost, &PyList_Type, &queues, &depth,
                          &timeout_s))
        return NULL;
    if (timeout_s <= 0) return PyErr_Format(PyExc_ValueError, "timeout_s: must be positive");
    int partitions = (int)PyList_GET_SIZE(queues);
    if (partitions < 1) return PyErr_Format(PyExc_ValueError, "queues: at least one queue is needed");
    if (depth < 1) return PyErr_Format(PyExc_ValueError, "depth: must be at least 1, got %d", depth);
    Sender *s = windowed_sender_new(KIND_AMQP, partitions, host, port, depth, timeout_s, 1);
    if (!s) return NULL;
    for (int i = 0; i < partitions; i++) { /* Basic.Publish to the default exchange with the queue as routing key */
        PyObject *queue = PyList_GET_ITEM(queues, i);
        if (!PyBytes_Check(queue) || PyBytes_GET_SIZE(queue) > 255) {
            Py_DECREF(s);
            return PyErr_Format(PyExc_ValueError, "queues[%d]: must be bytes of at most 255", i);
        }
        char publish[300], *o = publish;
        o = put16(o, 0);
        o = put_short_str(o, "", 0);
        o = put_short_str(o, PyBytes_AS_STRING(queue), (size_t)PyBytes_GET_SIZE(queue));
        *o++ = 0; /* neither mandatory nor immediate */
        s->prefix[i] = PyMem_RawMalloc(320);
        if (!s->prefix[i]) {
            Py_DECREF(s);
            return PyErr_NoMemory();
        }
        s->prefix_len[i] = amqp_method(s->prefix[i], 1, 60, 40, publish, (size_t)(o - publish));
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = amqp_connect(s, user, password, vhost);
    Py_END_ALLOW_THREADS return connected(s, rc);
}

/* nats_sender(host: str, port: int, subjects: list[bytes], depth: int, timeout_s=5.0, others=[]): `others`, the
   other servers of a cluster as (host, port), are where a lost connection is made again, in turn. */
static PyObject *nats_sender(PyObject *self, PyObject *args) {
    const char *host;
    int port, depth;
    PyObject *subjects, *others = NULL;
    double timeout_s = 5.0;
    if (!PyArg_ParseTuple(args, "siO!i|dO!", &host, &port, &PyList_Type, &subjects, &depth, &timeout_s, &PyList_Type,
                          &others))
        return NULL;
    if (timeout_s <= 0) return PyErr_Format(PyExc_ValueError, "timeout_s: must be positive");
    Py_ssize_t servers = 1 + (others ? PyList_GET_SIZE(others) : 0);
    if (servers > NATS_SERVERS) return PyErr_Format(PyExc_ValueError, "others: at most %d servers", NATS_SERVERS - 1);
    if (strlen(host) >= 256) return PyErr_Format(PyExc_ValueError, "host: longer than 255 characters");
    for (Py_ssize_t i = 1; i < servers; i++) {
        PyObject *other = PyList_GET_ITEM(others, i - 1);
        const char *other_host;
        int other_port;
        if (!PyTuple_Check(other) || !PyArg_ParseTuple(other, "si", &other_host, &other_port) ||
            strlen(other_host) >= 256) {
            PyErr_Clear();
            return PyErr_Format(PyExc_ValueError, "others[%zd]: must be (host, port), a host of 1 to 255 characters",
                                i - 1);
        }
    }
    int partitions = (int)PyList_GET_SIZE(subjects);
    if (partitions < 1) return PyErr_Format(PyExc_ValueError, "subjects: at least one subject is needed");
    if (depth < 1) return PyErr_Format(PyExc_ValueError, "depth: must be at least 1, got %d", depth);
    Sender *s = windowed_sender_new(KIND_NATS, partitions, host, port, depth, timeout_s, 1);
    if (!s) return NULL;
    if (!(s->inbox = PyMem_RawMalloc(64))) {
        Py_DECREF(s);
        return PyErr_NoMemory();
    }
    s->inbox_len = (size_t)snprintf(s->inbox, 64, "_INBOX.bb%x%llx", (unsigned)getpid(), (unsigned long long)now_ns());
    s->servers = (int)servers;
    strcpy(s->server_host[0], host);
    s->server_port[0] = port;
    for (Py_ssize_t i = 1; i < servers; i++) {
        const char *other_host;
        PyArg_ParseTuple(PyList_GET_ITEM(others, i - 1), "si", &other_host, &s->server_port[i]); /* checked above */
        strcpy(s->server_host[i], other_host);
    }
    for (int i = 0; i < partitions; i++) {
        PyObject *subject = PyList_GET_ITEM(subjects, i);
        if (!PyBytes_Check(subject) || PyBytes_GET_SIZE(subject) < 1 || PyBytes_GET_SIZE(subject) > 255 ||
            memchr(PyBytes_AS_STRING(subject), ' ', (size_t)PyBytes_GET_SIZE(subject))) {
            Py_DECREF(s);
            return PyErr_Format(PyExc_ValueError, "subjects[%d]: must be bytes of 1 to 255, without spaces", i);
        }
        s->prefix[i] = PyMem_RawMalloc(400);
        if (!s->prefix[i]) {
            Py_DECREF(s);
            return PyErr_NoMemory();
        }
        s->prefix_len[i] = (size_t)snprintf(s->prefix[i], 400, "PUB %.*s %s.", (int)PyBytes_GET_SIZE(subject),
                                            PyBytes_AS_STRING(subject), s->inbox);
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = nats_connect(s);
    Py_END_ALLOW_THREADS return connected(s, rc);
}

static int setting(PyObject *settings, const char *name, long *value) { /* 1 found, 0 absent, -1 error */
    PyObject *item = PyDict_GetItemString(settings, name);
    if (!item) return 0;
    *value = PyBool_Check(item) ? (item == Py_True) : PyLong_AsLong(item);
    return (*value == -1 && PyErr_Occurred()) ? -1 : 1;
}

/* Every key of a Pulsar sender's settings is one the native loop knows; -1 with ValueError if not. */
static int check_pulsar_settings(PyObject *settings) {
    static const char *known[] = {"block_if_queue_full", "max_pending_messages", "send_timeout_millis",
                                  "batching_enabled", "batching_max_publish_delay_ms",
                                  "batching_max_allowed_size_in_bytes", "batching_max_messages", NULL};
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(settings, &pos, &key, &value)) {
        const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        int found = 0;
        for (int i = 0; k && known[i]; i++) found |= !strcmp(k, known[i]);
        if (!found) {
            PyErr_Format(PyExc_ValueError, "settings: %R is not a producer setting the native loop sets", key);
            return -1;
        }
    }
    return 0;
}

/* pulsar_sender(service_url: str, listener_name: str | None, topics: list[str], settings: dict, single: bool,
   timeout_s: int = 30): one producer per topic, with the settings of brokers.pulsar's producer_settings. */
static PyObject *pulsar_sender(PyObject *self, PyObject *args) {
    const char *url, *listener;
    PyObject *topics, *settings;
    int single, timeout_s = 30;
    if (!PyArg_ParseTuple(args, "szO!O!p|i", &url, &listener, &PyList_Type, &topics, &PyDict_Type, &settings, &single,
                          &timeout_s))
        return NULL;
    if (!pl.loaded) return PyErr_Format(PyExc_RuntimeError, "load_pulsar() first");
    int partitions = (int)PyList_GET_SIZE(topics);
    if (partitions < 1) return PyErr_Format(PyExc_ValueError, "topics: at least one topic is needed");
    if (check_pulsar_settings(settings) < 0) return NULL;
    long v;
    pl_producer_conf *conf = pl.producer_conf_create();
#define APPLY(name, setter)                                                                       \
    switch (setting(settings, name, &v)) {                                                        \
    case -1: pl.producer_conf_free(conf); return NULL;                                           \
    case 1: pl.setter(conf, v); break;                                                            \
    }
    APPLY("block_if_queue_full", set_block_if_queue_full);
    APPLY("max_pending_messages", set_max_pending);
    APPLY("send_timeout_millis", set_send_timeout);
    APPLY("batching_enabled", set_batching_enabled);
    APPLY("batching_max_publish_delay_ms", set_batching_max_delay_ms);
    APPLY("batching_max_allowed_size_in_bytes", set_batching_max_bytes);
    APPLY("batching_max_messages", set_batching_max_messages);
#undef APPLY
    Sender *s = sender_new(KIND_PULSAR, partitions);
    if (!s) {
        pl.producer_conf_free(conf);
        return NULL;
    }
    s->single = single;
    s->producers = PyMem_RawCalloc((size_t)partitions, sizeof(pl_producer *));
    pl_client_conf *client_conf = pl.client_conf_create();
    pl.client_conf_set_timeout(client_conf, timeout_s);
    pl.client_conf_set_logger(client_conf, pl_quiet, NULL);
    /* No client statistics: they would add a percentile estimator's update to every send and every receipt, and
       the worker measures each message itself. */
    pl.client_conf_set_stats_interval(client_conf, 0);
    if (listener) pl.client_conf_set_listener(client_conf, listener);
    s->pclient = pl.client_create(url, client_conf);
    pl.client_conf_free(client_conf);
    if (!s->producers || !s->pclient) {
        PyObject *err = s->pclient ? PyErr_NoMemory() : PyErr_Format(PyExc_OSError, "Pulsar at %s: no client", url);
        pl.producer_conf_free(conf);
        Py_DECREF(s);
        return err;
    }
    for (int i = 0; i < partitions; i++) {
        PyObject *topic = PyList_GET_ITEM(topics, i);
        const char *name = PyUnicode_Check(topic) ? PyUnicode_AsUTF8(topic) : NULL;
        if (!name) {
            pl.producer_conf_free(conf);
            Py_DECREF(s);
            return PyErr_Format(PyExc_TypeError, "topics[%d]: must be a str", i);
        }
        int result;
        Py_BEGIN_ALLOW_THREADS result = pl.client_create_producer(s->pclient, name, conf, &s->producers[i]);
        Py_END_ALLOW_THREADS if (result != 0) {
            s->producers[i] = NULL;
            pl.producer_conf_free(conf);
            PyObject *err = PyErr_Format(PyExc_OSError, "could not create a producer for %s: %s", name, pl.result_str(result));
            Py_DECREF(s);
            return err;
        }
    }
    pl.producer_conf_free(conf);
    return (PyObject *)s;
}

static int redis_command(Sender *s, const char *command, size_t len, char *reply, size_t reply_size) {
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(s->fd, command + off, len - off, MSG_NOSIGNAL);
        if (n <= 0) return -1;
        off += (size_t)n;
    }
    size_t got = 0;
    while (got < reply_size - 1) {
        ssize_t n = recv(s->fd, reply + got, reply_size - 1 - got, 0);
        if (n <= 0) return -1;
        got += (size_t)n;
        if (got >= 2 && reply[got - 2] == '\r' && reply[got - 1] == '\n') break;
    }
    reply[got] = 0;
    return 0;
}

/* redis_sender(host: str, port: int, password: str | None, keys: list[bytes], depth: int, timeout_s=30.0) */
static PyObject *redis_sender(PyObject *self, PyObject *args) {
    const char *host, *password;
    int port, depth;
    PyObject *keys;
    double timeout_s = 30.0;
    if (!PyArg_ParseTuple(args, "sizO!i|d", &host, &port, &password, &PyList_Type, &keys, &depth, &timeout_s))
        return NULL;
    if (timeout_s <= 0) return PyErr_Format(PyExc_ValueError, "timeout_s: must be positive");
    int partitions = (int)PyList_GET_SIZE(keys);
    if (partitions < 1) return PyErr_Format(PyExc_ValueError, "keys: at least one stream key is needed");
    if (depth < 1) return PyErr_Format(PyExc_ValueError, "depth: must be at least 1, got %d", depth);
    Sender *s = sender_new(KIND_REDIS, partitions);
    if (!s) return NULL;
    s->depth = depth;
    s->prefix = PyMem_RawCalloc((size_t)partitions, sizeof(char *));
    s->prefix_len = PyMem_RawCalloc((size_t)partitions, sizeof(size_t));
    s->in_cap = 1 << 16;
    s->in = malloc(s->in_cap);
    if (!s->prefix || !s->prefix_len || !s->in) {
        Py_DECREF(s);
        return PyErr_NoMemory();
    }
    for (int i = 0; i < partitions; i++) {
        PyObject *key = PyList_GET_ITEM(keys, i);
        if (!PyBytes_Check(key)) {
            Py_DECREF(s);
            return PyErr_Format(PyExc_TypeError, "keys[%d]: must be bytes", i);
        }
        Py_ssize_t klen = PyBytes_GET_SIZE(key);
        s->prefix[i] = PyMem_RawMalloc((size_t)klen + 64);
        if (!s->prefix[i]) {
            Py_DECREF(s);
            return PyErr_NoMemory();
        }
        int head = snprintf(s->prefix[i], 64, "*7\r\n$4\r\nXADD\r\n$%zd\r\n", klen);
        memcpy(s->prefix[i] + head, PyBytes_AS_STRING(key), (size_t)klen);
        int tail = snprintf(s->prefix[i] + head + klen, 32, "\r\n$1\r\n*\r\n$1\r\nh\r\n$%d\r\n", HEADER_BYTES);
        s->prefix_len[i] = (size_t)(head + klen + tail);
    }
    char err[256];
    int fd;
    Py_BEGIN_ALLOW_THREADS fd = tcp_connect(host, port, timeout_s, err, sizeof err);
    Py_END_ALLOW_THREADS if (fd < 0) {
        Py_DECREF(s);
        return PyErr_Format(PyExc_OSError, "cannot connect to Redis at %s:%d: %s", host, port, err);
    }
    s->fd = fd;
    if (password) {
        char command[1024], reply[256];
        size_t plen = strlen(password);
        if (plen > 900) {
            Py_DECREF(s);
            return PyErr_Format(PyExc_ValueError, "password: longer than 900 bytes");
        }
        int n = snprintf(command, sizeof command, "*2\r\n$4\r\nAUTH\r\n$%zu\r\n%s\r\n", plen, password);
        if (redis_command(s, command, (size_t)n, reply, sizeof reply) < 0 || reply[0] != '+') {
            Py_DECREF(s);
            return PyErr_Format(PyExc_PermissionError, "Redis AUTH failed: %s", reply[0] == '-' ? reply + 1 : "no reply");
        }
    }
    return (PyObject *)s;
}

static PyMethodDef Sender_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))Sender_configure, METH_VARARGS | METH_KEYWORDS,
     "configure(objects, encode, producer_id, base_ns, period_ns, offsets=None, backlog=0, backlog_period_ns=0.0): "
     "the payload pool and the schedule (brokerbench.worker.schedule)."},
    {"send_until", (PyCFunction)Sender_send_until, METH_VARARGS,
     "send_until(seq, stop_seq, until_ns, t_end_ns) -> (next_seq, why): 0 boundary, 1 end, 2 limit."},
    {"logs", (PyCFunction)Sender_logs, METH_NOARGS,
     "logs() -> (text, dropped): librdkafka's log lines since the last call (level, facility, text, tab-separated, "
     "one a line) and how many a full buffer dropped."},
    {"take", (PyCFunction)Sender_take, METH_NOARGS,
     "take() -> (started, handed, acked_seq, acked_ns, failed_seq) since the last take; int64 arrays as bytes. "
     "Acknowledgements served by flush() or close() are taken by the next take()."},
    {"flush", (PyCFunction)Sender_flush, METH_VARARGS, "flush(timeout_s) -> messages still unacknowledged."},
    {"close", (PyCFunction)Sender_close, METH_NOARGS, "close(): flush briefly and let go of the connection."},
    {NULL, NULL, 0, NULL},
};

/* Which of a broker's native paths this sender is, where the broker has two: Pulsar's binary protocol spoken by the
   loop itself ("pwire") or Pulsar's C API ("capi", fault cells, partitions over several brokers, the fallback). None
   for the others, which have one path each. */
static PyObject *Sender_path(Sender *s, void *closure) {
    (void)closure;
    if (s->kind == KIND_PWIRE) return PyUnicode_FromString("pwire");
    if (s->kind == KIND_PULSAR) return PyUnicode_FromString("capi");
    Py_RETURN_NONE;
}

/* How a Kafka producer's acknowledgements were stamped, from its counts: `arrival` (the kernel's receive time of the
   response's read: rdkafka_recvmsg), `client:librdkafka` (on librdkafka's broker thread as its response was handled,
   where the read had no kernel stamp), `client:librdkafka-report` (as the report was served), comma-separated where
   they differed; before any, what it would be. */
static PyObject *kafka_stamps_text(int interceptor, int64_t arrival, int64_t thread, int64_t served) {
    char text[96] = "";
    if (arrival) strcat(text, "arrival");
    if (thread) strcat(strcat(text, *text ? ", " : ""), "client:librdkafka");
    if (served) strcat(strcat(text, *text ? ", " : ""), "client:librdkafka-report");
    if (!*text)
        strcat(text, !interceptor ? "client:librdkafka-report" : rdkafka_reads_hooked ? "arrival" : "client:librdkafka");
    return PyUnicode_FromString(text);
}

/* How this sender stamps an acknowledgement (brokerbench.figures: ARRIVAL, client_stamps): Kafka's on librdkafka's
   broker thread as it handles the produce response (on_acknowledgement), at the arrival of the response's read
   (kafka_stamps_text), the Pulsar C API's in its send callback, on the client's thread; the others at the kernel's
   receive time of the read that brought it (recv_stamped). */
static PyObject *Sender_stamps(Sender *s, void *closure) {
    (void)closure;
    if (s->kind == KIND_KAFKA) /* without the interceptor: as the report is served (brokers/kafka/driver.py REPORT_STAMPS) */
        return kafka_stamps_text(s->kafka_stamps != NULL, s->arrival_stamps, s->handled_stamps - s->arrival_stamps,
                                 s->served_stamps);
    if (s->kind == KIND_PULSAR) return PyUnicode_FromString("client:pulsar-c");
    return PyUnicode_FromString("arrival");
}

/* Kafka: how many acknowledgements were stamped on librdkafka's broker thread (on_acknowledgement) rather than as
   their delivery report was served; None for the other brokers. */
static PyObject *Sender_arrival_stamps(Sender *s, void *closure) {
    (void)closure;
    if (s->kind != KIND_KAFKA) Py_RETURN_NONE;
    return PyLong_FromLongLong(s->arrival_stamps);
}

static PyObject *Sender_handled_stamps(Sender *s, void *closure) {
    (void)closure;
    if (s->kind != KIND_KAFKA) Py_RETURN_NONE;
    return PyLong_FromLongLong(s->handled_stamps);
}

static PyGetSetDef Sender_getset[] = {
    {"handled_stamps", (getter)Sender_handled_stamps, NULL, "Kafka: the acknowledgements stamped on librdkafka's "
     "broker thread as it handled their produce response; None for the other brokers.", NULL},
    {"arrival_stamps", (getter)Sender_arrival_stamps, NULL, "Kafka: of the handled, those at the kernel's receive "
     "time of their produce response's read; None for the other brokers.", NULL},
    {"path", (getter)Sender_path, NULL, "'pwire' or 'capi' for a Pulsar sender (the binary protocol, the C API); None "
     "for the other brokers' (one native path each).", NULL},
    {"stamps", (getter)Sender_stamps, NULL, "How an acknowledgement is stamped: 'arrival' (the kernel's receive time) "
     "or 'client:LIBRARY' (in the client library's thread: librdkafka, the Pulsar C API).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SenderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brokerbench.native._sendloop.Sender",
    .tp_basicsize = sizeof(Sender),
    .tp_dealloc = (destructor)Sender_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A producer's native send loop over one Kafka producer or one Redis connection.",
    .tp_methods = Sender_methods,
    .tp_getset = Sender_getset,
};

/* The loop's own per-message cost with a sender that drops the message: clocks, header, the two
   timestamp records and an acknowledgement record. Returns ns per message. */
static PyObject *instrumentation_ns(PyObject *self, PyObject *args) {
    long long n;
    if (!PyArg_ParseTuple(args, "L", &n)) return NULL;
    if (n < 1) return PyErr_Format(PyExc_ValueError, "n: must be at least 1");
    i64buf started = {0}, handed = {0}, ack_seq = {0}, ack_ns = {0};
    char header[HEADER_BYTES];
    volatile char sink = 0;
    int64_t base = now_ns(), begin = now_ns(), seq;
    int failed = 0;
    for (seq = 0; seq < n; seq++) {
        int64_t now = now_ns();
        int64_t intended = base + (int64_t)((double)seq * 1.0);
        (void)now;
        int64_t t0 = now_ns();
        int64_t t1 = now_ns();
        failed |= buf_push(&started, t0) | buf_push(&handed, t1);
        put_header(header, 1, seq, intended);
        sink ^= header[7];
        failed |= buf_push(&ack_seq, seq) | buf_push(&ack_ns, now_ns());
    }
    double per = (double)(now_ns() - begin) / (double)n;
    free(started.data);
    free(handed.data);
    free(ack_seq.data);
    free(ack_ns.data);
    if (failed) return PyErr_NoMemory();
    return PyFloat_FromDouble(per);
}

/* The consumer's per-message work around decode: timed_decode(decode, messages, headers) -> bytes.
   messages are (header, payload, partition) tuples; each header is appended to `headers`, and the
   result holds four int64 per message: before decode, after decode, partition, payload length. */
static PyObject *timed_decode(PyObject *self, PyObject *args) {
    PyObject *decode, *messages, *headers;
    if (!PyArg_ParseTuple(args, "OO!O!", &decode, &PyList_Type, &messages, &PyList_Type, &headers)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(messages);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 4 * (Py_ssize_t)sizeof(int64_t));
    if (!out) return NULL;
    int64_t *rec = (int64_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(messages, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            Py_DECREF(out);
            return PyErr_Format(PyExc_TypeError, "messages[%zd]: expected a (header, payload, partition) tuple", i);
        }
        PyObject *payload = PyTuple_GET_ITEM(item, 1);
        int64_t t0 = now_ns();
        PyObject *decoded = PyObject_CallOneArg(decode, payload);
        int64_t t1 = now_ns();
        if (!decoded) {
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(decoded);
        Py_ssize_t length = PyObject_Length(payload);
        long long partition = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 2));
        if (length < 0 || (partition == -1 && PyErr_Occurred()) || PyList_Append(headers, PyTuple_GET_ITEM(item, 0))) {
            Py_DECREF(out);
            return NULL;
        }
        rec[4 * i] = t0;
        rec[4 * i + 1] = t1;
        rec[4 * i + 2] = partition;
        rec[4 * i + 3] = length;
    }
    return out;
}

/* The machine's own floor for publish delay: the send loop's schedule and waits with nothing sent.
   schedule_probe(rate, seconds) -> bytes: each tick's lateness in ns (int64). */
static PyObject *schedule_probe(PyObject *self, PyObject *args) {
    double rate, seconds;
    if (!PyArg_ParseTuple(args, "dd", &rate, &seconds)) return NULL;
    if (rate <= 0) return PyErr_Format(PyExc_ValueError, "rate: must be positive");
    if (seconds <= 0 || rate * seconds > 1e8) return PyErr_Format(PyExc_ValueError, "seconds: must be positive, at most 1e8 ticks");
    Py_ssize_t n = (Py_ssize_t)(rate * seconds);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    if (!out) return NULL;
    int64_t *late = (int64_t *)PyBytes_AS_STRING(out);
    double period = 1e9 / rate;
    Py_BEGIN_ALLOW_THREADS prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    int64_t base = now_ns() + 1000000;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t target = base + (int64_t)((double)i * period);
        while (!spin_if_close(target)) sleep_ns(target - now_ns());
        late[i] = now_ns() - target;
    }
    Py_END_ALLOW_THREADS return out;
}


/* ---- librdkafka plugin: the Python loop's Kafka acknowledgement and Fetch response stamps ---------------------------
   confluent-kafka registers no interceptor from Python, but its librdkafka loads plugins: `plugin.library.paths` names
   a shared library that librdkafka dlopen()s and whose conf_init it calls on the configuration. This module is that
   library: the Python driver passes the path it was imported from, and dlopen() of a loaded path returns the loaded
   object, so the plugin shares this module's globals (the librdkafka that load_rdkafka resolved, the logs below).
   conf_init adds an on_conf_set interceptor for two properties, each the id of an object the driver made:
   ACK_STAMPS_PROPERTY names an AckStamps, for which on_new adds on_acknowledgement, which stamps each message on
   librdkafka's broker thread as it handles the produce response (as the native loop's on_acknowledgement does) into
   that AckStamps' ring, by the seq of the message's 20-byte header key. The Python delivery callback reads the stamp
   back by the key (AckStamps.at); a message whose slot another has since taken (KAFKA_STAMPS in flight) has none, and
   is stamped as its report is served, counted apart (AckStamps.missed). FETCH_STAMPS_PROPERTY names a FetchStamps,
   for which on_new adds on_response_received, which notes on the broker thread the time each Fetch response without
   error was read in full (before librdkafka parses it and queues its messages): the consumer reads after each poll
   the latest such time and those since its previous poll (FetchStamps.take). A log is freed when its object and
   every configuration that named it (the client's, destroyed after its broker threads) are gone. */
#define ACK_STAMPS_PROPERTY "brokerbench.ack_stamps"
#define FETCH_STAMPS_PROPERTY "brokerbench.fetch_stamps"
#define PLUGIN_IC "brokerbench-plugin-stamps"
#define PLUGIN_PRODUCE_IC "brokerbench-plugin-produce" /* on_response_received once per name: Fetch's has PLUGIN_IC */
#define FETCH_API_KEY 1 /* Kafka's ApiKey of Fetch */
struct stamp_log {         /* the head of an ack_ring or a fetch_log, in `logs` */
    struct stamp_log *next; /* under logs_lock */
    uint64_t id;
    int refs;               /* the Python object and each configuration that named it; under logs_lock */
    int fetch;              /* a fetch_log, not an ack_ring */
};
struct ack_slot {
    char key[HEADER_BYTES];
    int64_t at;
    int kernel; /* at the kernel's receive time of the response's read (take_read_arrival) */
};
struct ack_ring {
    struct stamp_log head;
    int64_t handled, missed; /* read back with a stamp, or without (served stamp); by the reports' thread */
    int64_t arrival;         /* of the handled, those at the kernel's receive time */
    struct ack_slot *slots;  /* KAFKA_STAMPS, by seq; pages taken as seqs reach them */
};
struct fetch_log {
    struct stamp_log head;
    pthread_mutex_t lock;  /* the broker threads (one per broker) write, the consumer's thread takes */
    int64_t responses;     /* Fetch responses read without error, in all */
    int64_t arrival;       /* of them, stamped at the kernel's receive time of their read (take_read_arrival) */
    int64_t since;         /* of them since the last take */
    int64_t first, last;   /* read times: the earliest since the last take (0: none), the latest of all (0: none) */
};
static pthread_mutex_t logs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct stamp_log *logs;
static uint64_t logs_made;
static int64_t plugin_inits; /* conf_init calls: librdkafka loaded this very module (the tests check it) */

static void log_release(struct stamp_log *log) {
    pthread_mutex_lock(&logs_lock);
    int last = --log->refs == 0;
    if (last)
        for (struct stamp_log **p = &logs; *p; p = &(*p)->next)
            if (*p == log) {
                *p = log->next;
                break;
            }
    pthread_mutex_unlock(&logs_lock);
    if (!last) return;
    if (log->fetch)
        pthread_mutex_destroy(&((struct fetch_log *)log)->lock);
    else
        free(((struct ack_ring *)log)->slots);
    free(log);
}

static void log_register(struct stamp_log *log, int fetch) {
    pthread_mutex_lock(&logs_lock);
    log->id = ++logs_made;
    log->refs = 1;
    log->fetch = fetch;
    log->next = logs;
    logs = log;
    pthread_mutex_unlock(&logs_lock);
}

/* Whether librdkafka's interceptors the plugin adds were resolved: conf_init and both objects' constructors ask. */
static int plugin_resolved(void) {
    return rk.loaded && rk.conf_interceptor_add_on_conf_set && rk.conf_interceptor_add_on_conf_destroy &&
           rk.conf_interceptor_add_on_new && rk.interceptor_add_on_acknowledgement &&
           rk.interceptor_add_on_response_received;
}

static int plugin_check(const char *what) { /* 0 with a Python error set where the plugin cannot be used */
    if (!rk.loaded) return PyErr_Format(PyExc_RuntimeError, "%s: librdkafka is not resolved (load_rdkafka)", what), 0;
    if (!plugin_resolved())
        return PyErr_Format(PyExc_NotImplementedError, "%s: librdkafka %s has no interceptors", what, rk.version), 0;
    return 1;
}

static rd_kafka_resp_err_t plugin_on_acknowledgement(rd_kafka_t *r, rd_kafka_message_t *m, void *opaque) {
    struct ack_ring *ring = opaque;
    if (m->err || m->key_len != HEADER_BYTES) return RD_KAFKA_RESP_ERR_NO_ERROR;
    int kernel;
    int64_t at = acknowledged_at(r, &kernel);
    uint64_t seq;
    memcpy(&seq, (const char *)m->key + 4, sizeof seq); /* the header: producer u32, seq u64, intended u64 (LE) */
    struct ack_slot *slot = &ring->slots[seq & (KAFKA_STAMPS - 1)];
    memcpy(slot->key, m->key, HEADER_BYTES);
    slot->kernel = kernel;
    slot->at = at; /* seen by the reports' thread: the report reaches it through librdkafka's locked queue */
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

static rd_kafka_resp_err_t plugin_on_response_received(rd_kafka_t *r, int sockfd, const char *brokername,
                                                       int32_t brokerid, int16_t api_key, int16_t api_version,
                                                       int32_t corr_id, size_t size, int64_t rtt,
                                                       rd_kafka_resp_err_t err, void *opaque) {
    struct fetch_log *log = opaque;
    (void)r, (void)sockfd, (void)brokername, (void)brokerid, (void)api_version, (void)corr_id, (void)size, (void)rtt;
    if (api_key != FETCH_API_KEY || err) return RD_KAFKA_RESP_ERR_NO_ERROR;
    int kernel;
    int64_t at = take_read_arrival(&kernel); /* the read that completed this response: when it arrived */
    pthread_mutex_lock(&log->lock);
    log->responses++;
    log->arrival += kernel;
    /* two brokers' threads may come in either order: the earliest and the latest, whichever came first */
    if (!log->since++ || at < log->first) log->first = at;
    if (at > log->last) log->last = at;
    pthread_mutex_unlock(&log->lock);
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

struct stamp_plug { /* one configuration's: the logs its properties named, holding a reference to each */
    struct ack_ring *ring;
    struct fetch_log *fetch;
};

static rd_kafka_conf_res_t plugin_on_conf_set(rd_kafka_conf_t *conf, const char *name, const char *val, char *errstr,
                                              size_t errstr_size, void *opaque) {
    struct stamp_plug *plug = opaque;
    (void)conf;
    int fetch = !strcmp(name, FETCH_STAMPS_PROPERTY);
    if (!fetch && strcmp(name, ACK_STAMPS_PROPERTY)) return RD_KAFKA_CONF_UNKNOWN;
    char *end = NULL;
    unsigned long long id = val ? strtoull(val, &end, 10) : 0;
    struct stamp_log *found = NULL;
    pthread_mutex_lock(&logs_lock);
    if (val && *val && end && !*end)
        for (struct stamp_log *log = logs; log; log = log->next)
            if (log->id == id && log->fetch == fetch) {
                found = log, log->refs++;
                break;
            }
    pthread_mutex_unlock(&logs_lock);
    if (!found) {
        snprintf(errstr, errstr_size, "%s: %s is the id of no %s of this process", name, val ? val : "(none)",
                 fetch ? "FetchStamps" : "AckStamps");
        return RD_KAFKA_CONF_INVALID;
    }
    struct stamp_log **held = fetch ? (struct stamp_log **)&plug->fetch : (struct stamp_log **)&plug->ring;
    if (*held) log_release(*held);
    *held = found;
    return RD_KAFKA_CONF_OK;
}

static rd_kafka_resp_err_t plugin_on_new(rd_kafka_t *r, const rd_kafka_conf_t *conf, void *opaque, char *errstr,
                                         size_t errstr_size) {
    struct stamp_plug *plug = opaque;
    (void)conf, (void)errstr, (void)errstr_size;
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR; /* nothing named: nothing to stamp into */
    if (plug->ring) err = rk.interceptor_add_on_acknowledgement(r, PLUGIN_IC, plugin_on_acknowledgement, plug->ring);
    if (!err && plug->ring) /* each acknowledgement stamped at its Produce response's read (note_produce_read) */
        err = rk.interceptor_add_on_response_received(r, PLUGIN_PRODUCE_IC, on_produce_response, NULL);
    if (!err && plug->fetch)
        err = rk.interceptor_add_on_response_received(r, PLUGIN_IC, plugin_on_response_received, plug->fetch);
    return err;
}

static rd_kafka_resp_err_t plugin_on_conf_destroy(void *opaque) {
    struct stamp_plug *plug = opaque;
    if (plug->ring) log_release(&plug->ring->head);
    if (plug->fetch) log_release(&plug->fetch->head);
    free(plug);
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

/* The plugin's entry point, called by librdkafka for each configuration whose plugin.library.paths names this module
   (a duplicated configuration gets none of its state: librdkafka copies no on_conf_set property; confluent-kafka makes
   its client from the configuration it set). */
__attribute__((visibility("default"))) rd_kafka_resp_err_t conf_init(rd_kafka_conf_t *conf, void **plug_opaquep,
                                                                     char *errstr, size_t errstr_size) {
    if (!plugin_resolved()) {
        snprintf(errstr, errstr_size, "brokerbench's stamps: librdkafka %s, without its interceptors",
                 rk.loaded ? "resolved" : "not resolved (load_rdkafka first)");
        return RD_KAFKA_RESP_ERR__NOT_IMPLEMENTED;
    }
    struct stamp_plug *plug = calloc(1, sizeof *plug);
    if (!plug) {
        snprintf(errstr, errstr_size, "brokerbench's stamps: out of memory");
        return RD_KAFKA_RESP_ERR__FAIL;
    }
    rd_kafka_resp_err_t err = rk.conf_interceptor_add_on_conf_set(conf, PLUGIN_IC, plugin_on_conf_set, plug);
    if (!err) err = rk.conf_interceptor_add_on_new(conf, PLUGIN_IC, plugin_on_new, plug);
    if (err) { /* added twice to one configuration: the first stays */
        snprintf(errstr, errstr_size, "brokerbench's stamps: interceptors not added: %s", rk.err2str(err));
        free(plug); /* on_conf_set may stay registered with it: unreachable, since conf_init failing fails the set */
        return err;
    }
    rk.conf_interceptor_add_on_conf_destroy(conf, PLUGIN_IC, plugin_on_conf_destroy, plug);
    *plug_opaquep = plug;
    plugin_inits++;
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

/* {"plugin.library.paths": this module's file, property: id}: the settings that load the plugin and name a log */
static PyObject *plugin_config(const char *property, uint64_t id) {
    PyObject *module = PyImport_ImportModule("brokerbench.native._sendloop");
    PyObject *path = module ? PyModule_GetFilenameObject(module) : NULL;
    Py_XDECREF(module);
    if (!path) return NULL;
    PyObject *out = Py_BuildValue("{s:N}", "plugin.library.paths", path);
    if (!out) return NULL;
    PyObject *value = PyUnicode_FromFormat("%llu", (unsigned long long)id);
    if (!value || PyDict_SetItemString(out, property, value) < 0) {
        Py_XDECREF(value);
        Py_DECREF(out);
        return NULL;
    }
    Py_DECREF(value);
    return out;
}

static PyObject *log_refs(struct stamp_log *log) {
    pthread_mutex_lock(&logs_lock);
    int refs = log->refs;
    pthread_mutex_unlock(&logs_lock);
    return PyLong_FromLong(refs);
}

typedef struct {
    PyObject_HEAD struct ack_ring *ring;
} AckStamps;

static PyObject *AckStamps_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (!PyArg_ParseTuple(args, ":AckStamps") || !plugin_check("AckStamps")) return NULL;
    AckStamps *self = (AckStamps *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    struct ack_ring *ring = calloc(1, sizeof *ring);
    if (ring) ring->slots = calloc(KAFKA_STAMPS, sizeof *ring->slots);
    if (!ring || !ring->slots) {
        free(ring);
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    log_register(&ring->head, 0);
    self->ring = ring;
    return (PyObject *)self;
}

static void AckStamps_dealloc(AckStamps *self) {
    if (self->ring) log_release(&self->ring->head);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* at(key) -> the broker thread's stamp of the message with this 20-byte key, or None (no stamp in its slot: another
   message took it, or the key is no header); called once per report, from the delivery callback. */
static PyObject *AckStamps_at(AckStamps *self, PyObject *key) {
    char *data;
    Py_ssize_t len;
    if (PyBytes_AsStringAndSize(key, &data, &len) < 0) return NULL;
    struct ack_ring *ring = self->ring;
    if (len == HEADER_BYTES) {
        uint64_t seq;
        memcpy(&seq, data + 4, sizeof seq);
        const struct ack_slot *slot = &ring->slots[seq & (KAFKA_STAMPS - 1)];
        int64_t at = slot->at;
        if (at > 0 && at <= now_ns() && !memcmp(slot->key, data, HEADER_BYTES)) {
            ring->handled++;
            ring->arrival += slot->kernel;
            return PyLong_FromLongLong(at);
        }
    }
    ring->missed++;
    Py_RETURN_NONE;
}

static PyObject *AckStamps_config(AckStamps *self, void *closure) {
    (void)closure;
    return plugin_config(ACK_STAMPS_PROPERTY, self->ring->head.id);
}

static PyObject *AckStamps_handled(AckStamps *self, void *closure) {
    (void)closure;
    return PyLong_FromLongLong(self->ring->handled);
}

static PyObject *AckStamps_missed(AckStamps *self, void *closure) {
    (void)closure;
    return PyLong_FromLongLong(self->ring->missed);
}

static PyObject *AckStamps_arrival(AckStamps *self, void *closure) {
    (void)closure;
    return PyLong_FromLongLong(self->ring->arrival);
}

static PyObject *AckStamps_stamps(AckStamps *self, void *closure) {
    (void)closure;
    struct ack_ring *ring = self->ring;
    return kafka_stamps_text(1, ring->arrival, ring->handled - ring->arrival, ring->missed);
}

static PyObject *AckStamps_refs(AckStamps *self, void *closure) {
    (void)closure;
    return log_refs(&self->ring->head);
}

static PyMethodDef AckStamps_methods[] = {
    {"at", (PyCFunction)AckStamps_at, METH_O,
     "at(key) -> the broker thread's stamp (ns, time.monotonic_ns's clock) of the message with this header key, or "
     "None (stamp it as served)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef AckStamps_getset[] = {
    {"config", (getter)AckStamps_config, NULL, "The producer settings that load this module as librdkafka's plugin "
     "and name this ring: plugin.library.paths first.", NULL},
    {"handled", (getter)AckStamps_handled, NULL, "Reports read back with the broker thread's stamp.", NULL},
    {"missed", (getter)AckStamps_missed, NULL, "Reports read back without one (stamped as served).", NULL},
    {"arrival", (getter)AckStamps_arrival, NULL, "Of the handled, those stamped at the kernel's receive time of their "
     "Produce response's read.", NULL},
    {"stamps", (getter)AckStamps_stamps, NULL, "How the reports read back so far were stamped: 'arrival', "
     "'client:librdkafka' (on the broker thread, without the kernel's time), 'client:librdkafka-report' (as served), "
     "comma-separated where they differed.", NULL},
    {"refs", (getter)AckStamps_refs, NULL, "Holders of the ring: this object and each configuration naming it.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject AckStampsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brokerbench.native._sendloop.AckStamps",
    .tp_basicsize = sizeof(AckStamps),
    .tp_dealloc = (destructor)AckStamps_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The Python loop's Kafka acknowledgement stamps, taken on librdkafka's broker thread by this module as "
              "its plugin (conf_init): pass `config` to the producer, read each report's stamp with `at`.",
    .tp_new = AckStamps_new,
    .tp_methods = AckStamps_methods,
    .tp_getset = AckStamps_getset,
};

typedef struct {
    PyObject_HEAD struct fetch_log *log;
} FetchStamps;

static PyObject *FetchStamps_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (!PyArg_ParseTuple(args, ":FetchStamps") || !plugin_check("FetchStamps")) return NULL;
    FetchStamps *self = (FetchStamps *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    struct fetch_log *log = calloc(1, sizeof *log);
    if (!log) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    pthread_mutex_init(&log->lock, NULL);
    log_register(&log->head, 1);
    self->log = log;
    return (PyObject *)self;
}

static void FetchStamps_dealloc(FetchStamps *self) {
    if (self->log) log_release(&self->log->head);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* take() -> (responses, first, last) since the last take: how many Fetch responses were read, the earliest's read
   time (0: none) and the latest's of all (0: none yet), ns on time.monotonic_ns's clock; called after each poll. */
static PyObject *FetchStamps_take(FetchStamps *self, PyObject *unused) {
    (void)unused;
    struct fetch_log *log = self->log;
    pthread_mutex_lock(&log->lock);
    int64_t since = log->since, first = since ? log->first : 0, last = log->last;
    log->since = 0;
    pthread_mutex_unlock(&log->lock);
    return Py_BuildValue("(LLL)", (long long)since, (long long)first, (long long)last);
}

static PyObject *FetchStamps_config(FetchStamps *self, void *closure) {
    (void)closure;
    return plugin_config(FETCH_STAMPS_PROPERTY, self->log->head.id);
}

static PyObject *FetchStamps_responses(FetchStamps *self, void *closure) {
    (void)closure;
    pthread_mutex_lock(&self->log->lock);
    int64_t responses = self->log->responses;
    pthread_mutex_unlock(&self->log->lock);
    return PyLong_FromLongLong(responses);
}

static PyObject *FetchStamps_arrival(FetchStamps *self, void *closure) {
    (void)closure;
    pthread_mutex_lock(&self->log->lock);
    int64_t arrival = self->log->arrival;
    pthread_mutex_unlock(&self->log->lock);
    return PyLong_FromLongLong(arrival);
}

static PyObject *FetchStamps_refs(FetchStamps *self, void *closure) {
    (void)closure;
    return log_refs(&self->log->head);
}

static PyMethodDef FetchStamps_methods[] = {
    {"take", (PyCFunction)FetchStamps_take, METH_NOARGS,
     "take() -> (responses, first, last): the Fetch responses read since the last take, the earliest's read time (0: "
     "none) and the latest's of all (0: none yet), ns on time.monotonic_ns's clock."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef FetchStamps_getset[] = {
    {"config", (getter)FetchStamps_config, NULL, "The consumer settings that load this module as librdkafka's plugin "
     "and name this log: plugin.library.paths first.", NULL},
    {"responses", (getter)FetchStamps_responses, NULL, "Fetch responses read without error, in all.", NULL},
    {"arrival", (getter)FetchStamps_arrival, NULL, "Of them, those stamped at the kernel's receive time of the read "
     "that completed them (the others: as the broker thread came to them).", NULL},
    {"refs", (getter)FetchStamps_refs, NULL, "Holders of the log: this object and each configuration naming it.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FetchStampsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brokerbench.native._sendloop.FetchStamps",
    .tp_basicsize = sizeof(FetchStamps),
    .tp_dealloc = (destructor)FetchStamps_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The Python loop's Kafka delivery stamps: the read times of Fetch responses, noted on librdkafka's "
              "broker threads by this module as its plugin (conf_init): pass `config` to the consumer, `take` after "
              "each poll.",
    .tp_new = FetchStamps_new,
    .tp_methods = FetchStamps_methods,
    .tp_getset = FetchStamps_getset,
};

static PyObject *plugin_inits_get(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return PyLong_FromLongLong(plugin_inits);
}

static PyMethodDef module_methods[] = {
    {"load_rdkafka", load_rdkafka, METH_VARARGS, "load_rdkafka(path) -> version: resolve librdkafka from path."},
    {"rdkafka_reads_hooked", rdkafka_reads_hooked_py, METH_NOARGS, "rdkafka_reads_hooked() -> the references to "
     "recvmsg of the librdkafka load_rdkafka resolved that now go through the read that notes the kernel's receive "
     "time (0: its stamps are taken on its broker thread as it handles a response)."},
    {"kafka_sender", kafka_sender, METH_VARARGS, "kafka_sender(config, topic, partitions, single) -> Sender"},
    {"redis_sender", redis_sender, METH_VARARGS,
     "redis_sender(host, port, password, keys, depth, timeout_s=30.0) -> Sender"},
    {"load_pulsar", load_pulsar, METH_VARARGS, "load_pulsar(path): resolve Pulsar's C API from libpulsar at path."},
    {"pulsar_wire_sender", pulsar_wire_sender, METH_VARARGS,
     "pulsar_wire_sender(host, port, topics, settings, single, depth, timeout_s=30.0) -> Sender (Pulsar's binary protocol)"},
    {"pulsar_sender", pulsar_sender, METH_VARARGS,
     "pulsar_sender(service_url, listener_name, topics, settings, single, timeout_s=30) -> Sender: a producer per topic"},
    {"amqp_sender", amqp_sender, METH_VARARGS,
     "amqp_sender(host, port, user, password, vhost, queues, depth, timeout_s=30.0) -> Sender: confirmed publishes"},
    {"stream_sender", stream_sender, METH_VARARGS,
     "stream_sender(host, port, user, password, vhost, streams, depth, timeout_s=30.0) -> Sender: a publisher per stream"},
    {"nats_sender", nats_sender, METH_VARARGS,
     "nats_sender(host, port, subjects, depth, timeout_s=5.0, others=[]) -> Sender: JetStream publishes, each PubAck "
     "awaited; a lost connection is made again to the next of (host, port) and others"},
    {"timed_decode", timed_decode, METH_VARARGS,
     "timed_decode(decode, messages, headers) -> bytes of (t0, t1, partition, length) int64 per message"},
    {"schedule_probe", schedule_probe, METH_VARARGS,
     "schedule_probe(rate, seconds) -> bytes: lateness in ns of each tick of an empty send schedule"},
    {"plugin_inits", plugin_inits_get, METH_NOARGS,
     "plugin_inits() -> how many configurations librdkafka initialised this module as its plugin for (conf_init)"},
    {"instrumentation_ns", instrumentation_ns, METH_VARARGS,
     "instrumentation_ns(n) -> ns per message of the loop's own bookkeeping"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sendloop", "The producer's native send loop.", -1,
                                    module_methods};

PyMODINIT_FUNC PyInit__sendloop(void) {
    if (PyType_Ready(&SenderType) < 0 || PyType_Ready(&AckStampsType) < 0 || PyType_Ready(&FetchStampsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddIntConstant(m, "STOP_BOUNDARY", STOP_BOUNDARY) || PyModule_AddIntConstant(m, "STOP_END", STOP_END) ||
        PyModule_AddIntConstant(m, "STOP_LIMIT", STOP_LIMIT)) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&SenderType);
    PyModule_AddObject(m, "Sender", (PyObject *)&SenderType);
    Py_INCREF(&AckStampsType);
    PyModule_AddObject(m, "AckStamps", (PyObject *)&AckStampsType);
    Py_INCREF(&FetchStampsType);
    PyModule_AddObject(m, "FetchStamps", (PyObject *)&FetchStampsType);
    return m;
}
