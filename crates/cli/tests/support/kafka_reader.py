#!/usr/bin/env python3
"""A consumer of the Likewise event topic that is not written in Rust (confluent-kafka,
librdkafka inside), for the export tests.

Reads TOPIC from the beginning, validates every message against the served JSON Schema
(jsonschema), and appends one JSON line per message to OUT:
{"key": ..., "partition": ..., "offset": ..., "event": {...}} or {"invalid": "..."}.
Keeps (re)creating the topic, so it survives a broker that restarts empty. Exits once the
file STOP exists and nothing arrived for a second.
"""
import argparse, json, os, sys, time

from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient, NewTopic
import jsonschema

ap = argparse.ArgumentParser()
ap.add_argument("--brokers", required=True)
ap.add_argument("--topic", required=True)
ap.add_argument("--schema", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--stop", required=True)
a = ap.parse_args()

schema = json.load(open(a.schema))
validator = jsonschema.Draft202012Validator(schema)
admin = AdminClient({"bootstrap.servers": a.brokers})


def ensure_topic():
    try:
        for f in admin.create_topics([NewTopic(a.topic, num_partitions=3, replication_factor=1)],
                                     operation_timeout=2).values():
            f.result(timeout=3)
    except Exception:
        pass  # exists already, or the broker is down: tried again in a second


ensure_topic()
consumer = Consumer({
    "bootstrap.servers": a.brokers,
    "group.id": "reader-" + a.topic,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": True,
    "topic.metadata.refresh.interval.ms": 1000,
})
consumer.subscribe([a.topic])
out = open(a.out, "a", buffering=1)
last_msg = time.time()
last_topic = time.time()
while True:
    m = consumer.poll(0.2)
    now = time.time()
    if now - last_topic > 1:
        ensure_topic()
        last_topic = now
    if m is None or (m.error() and m.error().code() == KafkaError._PARTITION_EOF):
        if os.path.exists(a.stop) and now - last_msg > 1.0:
            break
        continue
    if m.error():
        continue  # transient (broker restart): librdkafka reconnects
    last_msg = now
    try:
        ev = json.loads(m.value())
        validator.validate(ev)
        key = m.key().decode() if m.key() is not None else None
        out.write(json.dumps({"key": key, "partition": m.partition(), "offset": m.offset(), "event": ev}) + "\n")
    except Exception as e:  # noqa: BLE001 - every failure is reported to the test
        out.write(json.dumps({"invalid": str(e)[:500]}) + "\n")
out.close()
consumer.close()
sys.exit(0)
