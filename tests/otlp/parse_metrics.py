"""Parses Prometheus text exposition from stdin with prometheus_client's parser and prints
the samples as JSON: [{"family", "type", "name", "labels", "value"}] (value null when it
is not finite: +Inf, NaN).

    curl -s http://127.0.0.1:9090/metrics | python3 tests/otlp/parse_metrics.py
"""

import json
import math
import sys

from prometheus_client.parser import text_string_to_metric_families

samples = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        samples.append({
            "family": family.name,
            "type": family.type,
            "name": s.name,
            "labels": s.labels,
            "value": s.value if math.isfinite(s.value) else None,
        })
json.dump(samples, sys.stdout)
