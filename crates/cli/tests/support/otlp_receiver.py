#!/usr/bin/env python3
"""A small OTLP/HTTP trace receiver for the tests (PyPI `opentelemetry-proto`).

Listens on 127.0.0.1 (port 0), writes its port to --port-file, and for every
`POST /v1/traces` parses the protobuf `ExportTraceServiceRequest` with the official
generated classes and appends one JSON line per span to --out:
{"service", "trace_id", "span_id", "parent_span_id", "name", "kind", "attributes",
 "links": [{"trace_id", "span_id"}], "flags"} (IDs as lowercase hex, "" when absent).
A body that does not parse is answered 400 and logged as {"invalid": "..."}.
"""

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--port-file", required=True)
    args = ap.parse_args()
    lock = threading.Lock()

    def write(lines):
        with lock, open(args.out, "a") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.path != "/v1/traces" or self.headers.get("content-type") != "application/x-protobuf":
                write([{"invalid": f"{self.path} {self.headers.get('content-type')}"}])
                self.send_response(404)
                self.end_headers()
                return
            req = trace_service_pb2.ExportTraceServiceRequest()
            try:
                req.ParseFromString(body)
            except Exception as e:  # noqa: BLE001: any parse failure is the test's finding
                write([{"invalid": str(e)}])
                self.send_response(400)
                self.end_headers()
                return
            lines = []
            for rs in req.resource_spans:
                res = {kv.key: value(kv.value) for kv in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        lines.append({
                            "service": res.get("service.name"),
                            "scope": ss.scope.name,
                            "trace_id": s.trace_id.hex(),
                            "span_id": s.span_id.hex(),
                            "parent_span_id": s.parent_span_id.hex(),
                            "name": s.name,
                            "kind": s.kind,
                            "attributes": {kv.key: value(kv.value) for kv in s.attributes},
                            "links": [{"trace_id": l.trace_id.hex(), "span_id": l.span_id.hex()} for l in s.links],
                            "flags": s.flags,
                            "start": s.start_time_unix_nano,
                            "end": s.end_time_unix_nano,
                        })
            write(lines)
            out = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os
    os.replace(args.port_file + ".tmp", args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
