#!/usr/bin/env python3
"""JetStream throughput per core of nats-server, for docs/capacity.md (nats-py from PyPI).

Publishes --messages messages of --size bytes to a file-storage R1 stream, subjects
<prefix>.events.<shard>.<part> over 64 x 64 partitions, each with a Nats-Msg-Id (the relay's
duplicate detection), --window publishes in flight (asynchronous, acknowledged); then drains
them with one pull consumer (fetch batches of 1,000, explicit ack of the last of each, as the
service's consumers ack cumulatively). Reports messages/s and messages per second of
nats-server CPU (utime + stime of --nats-pid, /proc). The Python client shares the cores and is
usually the limit on rate; CPU per message is the figure to plan with.
"""
import argparse, asyncio, json, os, time
import nats
from nats.js.api import ConsumerConfig, AckPolicy, StreamConfig, StorageType

def cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        p = f.read().rsplit(")", 1)[1].split()
    return (int(p[11]) + int(p[12])) / os.sysconf("SC_CLK_TCK")

async def main(a):
    nc = await nats.connect(a.url)
    js = nc.jetstream(publish_async_max_pending=a.window)
    name = "JSBENCH_EVENTS"
    try:
        await js.delete_stream(name)
    except Exception:
        pass
    await js.add_stream(StreamConfig(name=name, subjects=["jsbench.events.>"],
                                     storage=StorageType.FILE, duplicate_window=120))
    body = os.urandom(a.size)
    c0, t0 = cpu(a.nats_pid), time.time()
    for i in range(a.messages):
        await js.publish_async(f"jsbench.events.{i % 64}.{(i // 64) % 64}", body,
                               headers={"Nats-Msg-Id": f"{i % 64}-{i}"})
    await js.publish_async_completed()
    pub_s, pub_cpu = time.time() - t0, cpu(a.nats_pid) - c0
    sub = await js.pull_subscribe("jsbench.events.>", durable="jsbench",
                                  config=ConsumerConfig(ack_policy=AckPolicy.ALL))
    got, c0, t0 = 0, cpu(a.nats_pid), time.time()
    while got < a.messages:
        msgs = await sub.fetch(1000, timeout=5)
        got += len(msgs)
        await msgs[-1].ack()
    sub_s, sub_cpu = time.time() - t0, cpu(a.nats_pid) - c0
    info = await js.stream_info(name)
    await js.delete_stream(name)
    await nc.close()
    print(json.dumps({
        "messages": a.messages, "size": a.size, "window": a.window,
        "publish_per_s": round(a.messages / pub_s), "publish_server_cpu_s": round(pub_cpu, 2),
        "publish_per_server_core_s": round(a.messages / max(pub_cpu, 0.01)),
        "consume_per_s": round(a.messages / sub_s), "consume_server_cpu_s": round(sub_cpu, 2),
        "consume_per_server_core_s": round(a.messages / max(sub_cpu, 0.01)),
        "stream_bytes": info.state.bytes, "bytes_per_message": round(info.state.bytes / a.messages),
    }))

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="nats://127.0.0.1:4222")
    ap.add_argument("--nats-pid", type=int, required=True)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--window", type=int, default=4000)
    asyncio.run(main(ap.parse_args()))
