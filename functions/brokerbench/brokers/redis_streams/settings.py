"""Redis Streams' part of the run request: its endpoint, what is provisioned for it, the client settings it reads.

Spend guard: the ElastiCache node types are those priced in prices.json beside this module (add a price to
allow another). The CDK app holds the IAM policy to the same list (elasticache:CacheNodeType on
CreateReplicationGroup), so a request that got past this schema still cannot create a larger node.
"""

import json
from pathlib import Path

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

PROVISION = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "version": {
            "description": "Redis engine version; omitted: the provider's default (ElastiCache 7.1; locally whatever is "
                           "installed). Locally a given version must match the local Redis's version prefix.",
            "type": "string",
        },
        "node_type": {"description": "ElastiCache node type: one priced in brokers/redis_streams/prices.json (a spend "
                                     "guard, also held by the IAM policy's elasticache:CacheNodeType condition).",
                      "enum": NODE_TYPES, "default": "cache.r7g.large"},
    },
    "default": {},
}

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
    "read_count": {
        "description": "Redis Streams: COUNT of each XREADGROUP.",
        "type": "integer",
        "minimum": 1,
        "maximum": 100000,
        "default": 1000,
    },
}
