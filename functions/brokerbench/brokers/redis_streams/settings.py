"""Redis Streams' part of the run request: its endpoint, what is provisioned for it, the client settings it reads.

Spend guard: the ElastiCache node types are those priced in prices.json beside this module (add a price to
allow another). The CDK app holds the IAM policy to the same list (elasticache:CacheNodeType on
CreateReplicationGroup), so a request that got past this schema still cannot create a larger node.
"""

import json
from pathlib import Path

from ...targets.provision import nodes_property, provision_schema

NODE_TYPES = sorted(json.loads(Path(__file__).with_name("prices.json").read_text())["node_hour"])

TARGET = {
    "type": "object",
    "additionalProperties": False,
    "required": ["host", "port"],
    "properties": {
        "host": {"type": "string", "minLength": 1},
        "port": {"type": "integer", "minimum": 1, "maximum": 65535},
        "tls": {"type": "boolean", "default": False},
        "version": {"type": "string"},
    },
}

PROVISION = provision_schema(
    "Redis engine version; omitted: the provider's default (ElastiCache 7.1; locally whatever is installed). Locally "
    "a given version must match the local Redis's version prefix.",
    nodes=nodes_property("Redis servers. Locally 1 (the default), or a failover cluster of 2 or 3 on this host "
                         "(`redis@2`, `redis@3`): a master and 1 or 2 replicas, watched by three Sentinels (quorum 2) "
                         "that promote a replica when the master fails. On ElastiCache: a primary and 1 or 2 replicas "
                         "with automatic failover and Multi-AZ on (each node priced). Replication is asynchronous: a "
                         "failover may lose acknowledged XADDs (client.redis_wait_replicas narrows that).", 3),
    node_type={"description": "ElastiCache node type: one priced in brokers/redis_streams/prices.json (a spend guard, "
                              "also held by the IAM policy's elasticache:CacheNodeType condition).",
               "enum": NODE_TYPES, "default": "cache.r7g.large"},
)

CLIENT = {
    "pipeline_depth": {
        "description": "Redis Streams: most XADDs sent in one pipeline in batch mode.",
        "type": "integer",
        "minimum": 1,
        "maximum": 100000,
        "default": 100,
    },
    "redis_appendfsync": {
        "description": "Redis Streams: the AOF fsync policy the run needs, set with CONFIG SET (AOF on) before the "
                       "cells: always (Redis fsyncs the AOF before it replies to an XADD), everysec (a background "
                       "fsync each second) or no (the OS writes it back). Omitted: the server's own (the local "
                       "stack's: AOF on, everysec; `--no-aof`: off). A server that refuses CONFIG (ElastiCache) "
                       "refuses a run that sets it.",
        "enum": ["always", "everysec", "no"],
    },
    "redis_wait_replicas": {
        "description": "Redis Streams: each pipelined write of XADDs ends with WAIT <n> <redis_wait_timeout_ms>, and "
                       "its XADDs count as acknowledged only when WAIT answers that at least n replicas have them "
                       "(fewer, by the timeout: they count as failed sends, though the master keeps them). WAIT "
                       "makes neither the write durable nor Redis consistent: a failover may still promote a "
                       "replica without it (Sentinel promotes the one with the most data, which has it whenever n "
                       "is every replica and all are linked), and a write WAIT gave up on is not undone. Omitted "
                       "or 0: no WAIT (an XADD is answered before any replica has it). Needs that many replicas "
                       "connected (locally redis@2 or redis@3); the native send loop does not do it.",
        "type": "integer",
        "minimum": 0,
        "maximum": 5,
    },
    "redis_wait_timeout_ms": {
        "description": "Redis Streams: WAIT's timeout with redis_wait_replicas (omitted: 1000 ms).",
        "type": "integer",
        "minimum": 1,
        "maximum": 60000,
    },
    "read_count": {
        "description": "Redis Streams: COUNT of each XREADGROUP.",
        "type": "integer",
        "minimum": 1,
        "maximum": 100000,
        "default": 1000,
    },
}
