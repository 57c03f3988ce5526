"""A loopback OTLP/HTTP trace receiver for tests: decodes what it receives with the official
OpenTelemetry protobuf definitions (the `opentelemetry-proto` package), never with Stepwise's code.

  python otlp_receiver.py [--refuse N]

Prints its port on the first line of stdout. POST /v1/traces takes an ExportTraceServiceRequest
(protobuf or JSON, gzip or not); the first N requests are answered 503 with Retry-After: 0.
GET /spans answers every span received so far as JSON, ids in hex, and each request's headers. Ends when stdin closes.
"""

import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

refuse = int(sys.argv[sys.argv.index("--refuse") + 1]) if "--refuse" in sys.argv else 0
lock = threading.Lock()
state = {"requests": 0, "refused": 0, "spans": [], "headers": []}


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind) if kind else None


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def spans_of(request):
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                yield {
                    "name": s.name,
                    "kind": s.kind,
                    "traceId": s.trace_id.hex(),
                    "spanId": s.span_id.hex(),
                    "parentSpanId": s.parent_span_id.hex(),
                    "startTimeUnixNano": s.start_time_unix_nano,
                    "endTimeUnixNano": s.end_time_unix_nano,
                    "attributes": attributes(s.attributes),
                    "links": [{"traceId": l.trace_id.hex(), "spanId": l.span_id.hex()} for l in s.links],
                    "status": {"code": s.status.code, "message": s.status.message},
                    "resource": resource,
                    "scope": ss.scope.name,
                }


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body, content_type, headers=()):
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        for name, v in headers:
            self.send_header(name, v)
        self.end_headers()
        self.wfile.write(body)

    def body(self):
        if self.headers.get("transfer-encoding", "").lower() != "chunked":
            return self.rfile.read(int(self.headers.get("content-length", "0")))
        chunks = []
        while True:
            size = int(self.rfile.readline().split(b";")[0], 16)
            chunk = self.rfile.read(size)
            self.rfile.readline()
            if size == 0:
                return b"".join(chunks)
            chunks.append(chunk)

    def do_POST(self):
        body = self.body()
        with lock:
            state["requests"] += 1
            state["headers"].append({k.lower(): v for k, v in self.headers.items()})
            if state["refused"] < refuse:
                state["refused"] += 1
                return self.answer(503, b"", "text/plain", [("retry-after", "0")])
        if self.path != "/v1/traces":
            return self.answer(404, b"", "text/plain")
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        if self.headers.get("content-type", "").startswith("application/json"):
            json_format.Parse(body, request)
        else:
            request.ParseFromString(body)
        with lock:
            state["spans"].extend(spans_of(request))
        self.answer(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

    def do_GET(self):
        with lock:
            body = json.dumps(state).encode()
        self.answer(200, body, "application/json")


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
print(server.server_address[1], flush=True)
sys.stdin.read()
server.shutdown()
