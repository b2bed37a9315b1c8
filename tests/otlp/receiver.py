"""A minimal OTLP/gRPC trace receiver for the observability test.

Implements opentelemetry.proto.collector.trace.v1.TraceService/Export with the official
`opentelemetry-proto` package and grpcio, and appends one JSON object per received span to
the output file: service.name, trace_id, span_id, parent_span_id, name, kind, attributes.

    python3 tests/otlp/receiver.py PORT OUT.jsonl
Prints "ready" on stdout once it listens on 127.0.0.1:PORT.
"""

import json
import sys
import threading
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from google.protobuf.json_format import MessageToDict


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, path):
        self.out = open(path, "a", encoding="utf-8")
        self.lock = threading.Lock()

    def Export(self, request, context):
        lines = []
        for rs in request.resource_spans:
            service = ""
            for kv in rs.resource.attributes:
                if kv.key == "service.name":
                    service = kv.value.string_value
            for ss in rs.scope_spans:
                for span in ss.spans:
                    attrs = {kv.key: MessageToDict(kv.value) for kv in span.attributes}
                    lines.append(json.dumps({
                        "service": service,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "kind": span.kind,
                        "attributes": attrs,
                    }))
        with self.lock:
            for line in lines:
                self.out.write(line + "\n")
            self.out.flush()
        return trace_service_pb2.ExportTraceServiceResponse()


def main():
    port, path = sys.argv[1], sys.argv[2]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Receiver(path), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
