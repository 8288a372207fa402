"""Redis Streams' part of the run request: its endpoint, what is provisioned for it, the client settings it reads."""

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
        "node_type": {"type": "string", "default": "cache.r7g.large"},
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
    "read_count": {
        "description": "Redis Streams: COUNT of each XREADGROUP.",
        "type": "integer",
        "minimum": 1,
        "maximum": 100000,
        "default": 1000,
    },
}
