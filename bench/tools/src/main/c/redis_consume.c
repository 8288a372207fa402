/*
 * A bare Redis Streams consume loop over hiredis (bench/broker_tools.py's tool for Redis: redis-benchmark has no
 * consumer, and no Java Redis client is in bench/tools' pom): XREADGROUP ... COUNT `count` BLOCK 100 on one stream
 * key in consumer group `group` (made from the first entry if it does not exist), each batch acknowledged with one
 * XACK written together with the next XREADGROUP, as the worker's consumer does (brokers/redis_streams/driver.py).
 * Prints "subscribed" once the group exists, then reads until `idle` seconds pass with nothing after its first entry
 * (or `limit` seconds in all) and prints one JSON line with PulsarConsume's fields: received, bytes (of the entries'
 * field values), window_s (first batch to last), msgs_per_s (the entries after the first batch over that window: a
 * batch's entries share its stamp).
 *
 * build: cc -O2 -o redis_consume redis_consume.c -lhiredis
 * usage: redis_consume HOST PORT KEY GROUP COUNT IDLE_S LIMIT_S
 */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: %s HOST PORT KEY GROUP COUNT IDLE_S LIMIT_S\n", argv[0]);
        return 2;
    }
    const char *key = argv[3], *group = argv[4], *count = argv[5];
    double idle = atof(argv[6]), limit = atof(argv[7]);
    redisContext *c = redisConnect(argv[1], atoi(argv[2]));
    if (c == NULL || c->err) {
        fprintf(stderr, "connect: %s\n", c ? c->errstr : "no memory");
        return 1;
    }
    redisReply *r = redisCommand(c, "XGROUP CREATE %s %s 0 MKSTREAM", key, group);
    if (r == NULL || (r->type == REDIS_REPLY_ERROR && strstr(r->str, "BUSYGROUP") == NULL)) {
        fprintf(stderr, "XGROUP CREATE: %s\n", r ? r->str : c->errstr);
        return 1;
    }
    freeReplyObject(r);
    printf("subscribed\n");
    fflush(stdout);

    long long received = 0, bytes = 0, first_batch = 0;
    double start = now_s(), first = 0, last = 0;
    /* the last batch's entry ids, acknowledged with the next read */
    size_t cap = 1024, n_ids = 0;
    char **ids = malloc(cap * sizeof *ids);
    size_t *id_lens = malloc(cap * sizeof *id_lens);
    redisReply *held = NULL;  /* the reply the ids point into, freed once they are sent */
    while (now_s() - start < limit) {
        int acks = 0;
        if (n_ids > 0) {
            const char **argv2 = malloc((n_ids + 3) * sizeof *argv2);
            size_t *lens = malloc((n_ids + 3) * sizeof *lens);
            argv2[0] = "XACK"; lens[0] = 4;
            argv2[1] = key; lens[1] = strlen(key);
            argv2[2] = group; lens[2] = strlen(group);
            for (size_t i = 0; i < n_ids; i++) {
                argv2[i + 3] = ids[i];
                lens[i + 3] = id_lens[i];
            }
            redisAppendCommandArgv(c, (int) (n_ids + 3), argv2, lens);
            free(argv2);
            free(lens);
            acks = 1;
        }
        redisAppendCommand(c, "XREADGROUP GROUP %s tool COUNT %s BLOCK 100 STREAMS %s >", group, count, key);
        if (acks) {
            if (redisGetReply(c, (void **) &r) != REDIS_OK) {
                fprintf(stderr, "XACK: %s\n", c->errstr);
                return 1;
            }
            freeReplyObject(r);
        }
        if (held != NULL) {
            freeReplyObject(held);
            held = NULL;
        }
        n_ids = 0;
        if (redisGetReply(c, (void **) &r) != REDIS_OK) {
            fprintf(stderr, "XREADGROUP: %s\n", c->errstr);
            return 1;
        }
        double at = now_s();
        if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
            freeReplyObject(r);
            if (received > 0 && at - last >= idle) {
                break;
            }
            continue;
        }
        redisReply *entries = r->element[0]->element[1];  /* [[key, [[id, [f, v, ...]], ...]]] */
        if (entries->elements > cap) {
            cap = entries->elements;
            ids = realloc(ids, cap * sizeof *ids);
            id_lens = realloc(id_lens, cap * sizeof *id_lens);
        }
        for (size_t i = 0; i < entries->elements; i++) {
            redisReply *entry = entries->element[i], *fields = entry->element[1];
            ids[n_ids] = entry->element[0]->str;
            id_lens[n_ids++] = entry->element[0]->len;
            for (size_t f = 1; f < fields->elements; f += 2) {
                bytes += fields->element[f]->len;
            }
        }
        if (received == 0) {
            first = at;
            first_batch = (long long) entries->elements;
        }
        received += entries->elements;
        last = at;
        held = r;
    }
    double window = last - first;
    printf("{\"tool\": \"redis-hiredis-consume\", \"received\": %lld, \"bytes\": %lld, \"window_s\": %.3f, "
           "\"msgs_per_s\": ", received, bytes, window);
    if (received > first_batch && window > 0) {
        printf("%.3f", (received - first_batch) / window);
    } else {
        printf("null");
    }
    printf(", \"client\": \"hiredis %d.%d.%d\"}\n", HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH);
    redisFree(c);
    return 0;
}
