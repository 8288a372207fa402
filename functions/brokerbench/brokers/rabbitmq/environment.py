"""What the run's client settings mean on RabbitMQ, shared by its two rows: the in-flight window per mode and the
consumer's prefetch. Each row's own module adds what its acknowledgement means."""

from __future__ import annotations


def modes(client: dict, unit: str) -> dict:
    window = client["rabbitmq_in_flight"]
    return {
        "batch": {"in_flight": window, "meaning": f"up to {window:,} {unit} published and not yet confirmed"},
        "single": {"in_flight": 1, "meaning": f"one {unit[:-1]} in flight: each send waits for its confirm"},
    }


def caption(mode: str, client: dict, durability: str) -> str:
    meaning = (f"batch = up to {client.get('rabbitmq_in_flight', '?')} unconfirmed" if mode == "batch"
               else "single = one unconfirmed at a time")
    return f"{meaning}, {durability}"
