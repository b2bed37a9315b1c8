"""Drives Flotilla's Kubernetes API with the official Python client (PyPI `kubernetes`):
its dynamic client discovers Karmada's kinds, creates a PropagationPolicy, lists it,
watches it while it is patched (a JSON merge patch and a JSON patch), reads the result,
deletes it, deletes a collection by label, and server-side applies as two managers. Prints one line per step; exits 1 at the first thing that is not as a
kube-apiserver would answer. Usage: dynamic.py SERVER_URL DISCOVERY_CACHE_FILE
"""

import json
import sys
import threading

from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException


def fail(message):
    print(f"FAIL {message}", flush=True)
    sys.exit(1)


def main():
    server, cache = sys.argv[1], sys.argv[2]
    config = client.Configuration(host=server)
    api = dynamic.DynamicClient(client.ApiClient(config), cache_file=cache)
    pp = api.resources.get(api_version="policy.karmada.io/v1alpha1", kind="PropagationPolicy")
    print(f"discovered {pp.kind} {pp.name} namespaced={pp.namespaced}", flush=True)
    rb = api.resources.get(api_version="work.karmada.io/v1alpha2", kind="ResourceBinding")
    print(f"discovered {rb.kind} short_names={rb.short_names}", flush=True)

    body = {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": "py", "namespace": "default", "labels": {"by": "python"}},
        "spec": {
            "priority": 1,
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "py"}],
            "placement": {"clusterAffinity": {"clusterNames": ["member1"]}},
        },
    }
    created = pp.create(body=body, namespace="default")
    print(f"created {created.metadata.name} resourceVersion={created.metadata.resourceVersion}", flush=True)
    try:
        pp.create(body=body, namespace="default")
        fail("a second create succeeded")
    except ApiException as e:
        reason = json.loads(e.body).get("reason")
        if e.status != 409 or reason != "AlreadyExists":
            fail(f"a second create: {e.status} {reason}")
        print(f"create again: {e.status} {reason}", flush=True)

    listed = pp.get(namespace="default", label_selector="by=python")
    names = [i.metadata.name for i in listed.items]
    if names != ["py"]:
        fail(f"listed {names}")
    print(f"listed {names} at resourceVersion={listed.metadata.resourceVersion}", flush=True)

    seen = []

    def follow():
        for event in pp.watch(namespace="default", resource_version=listed.metadata.resourceVersion, timeout=10):
            obj = event["object"]
            seen.append((event["type"], obj.metadata.name, obj.spec.priority))
            if event["type"] == "DELETED":
                return

    watcher = threading.Thread(target=follow, daemon=True)
    watcher.start()

    pp.patch(
        name="py",
        namespace="default",
        body={"spec": {"priority": 5}},
        content_type="application/merge-patch+json",
    )
    pp.patch(
        name="py",
        namespace="default",
        body=[{"op": "replace", "path": "/spec/priority", "value": 6}],
        content_type="application/json-patch+json",
    )
    got = pp.get(name="py", namespace="default")
    if got.spec.priority != 6:
        fail(f"priority after the patches: {got.spec.priority}")
    print(f"patched priority={got.spec.priority}", flush=True)
    try:
        pp.patch(
            name="py",
            namespace="default",
            body={"spec": {"nonsense": True}},
            content_type="application/merge-patch+json",
        )
        fail("a patch with an unknown field succeeded")
    except ApiException as e:
        status = json.loads(e.body)
        causes = [c.get("field") for c in status.get("details", {}).get("causes", [])]
        if e.status != 422:
            fail(f"an unknown field: {e.status}")
        print(f"invalid patch: {e.status} {status.get('reason')} causes={causes}", flush=True)

    pp.delete(name="py", namespace="default")
    watcher.join(timeout=15)
    print(f"watched {seen}", flush=True)
    if [t for t, _, _ in seen] != ["MODIFIED", "MODIFIED", "DELETED"]:
        fail(f"the watch saw {seen}")

    # deletecollection: what the label selects goes, the rest stays
    for name, labels in [("a", {"by": "python"}), ("b", {"by": "python"}), ("c", {})]:
        one = json.loads(json.dumps(body))
        one["metadata"]["name"] = name
        one["metadata"]["labels"] = labels
        pp.create(body=one, namespace="default")
    pp.delete(namespace="default", label_selector="by=python")
    left = sorted(i.metadata.name for i in pp.get(namespace="default").items)
    if left != ["c"]:
        fail(f"after deletecollection: {left}")
    print(f"deletecollection left {left}", flush=True)

    # server-side apply: a GitOps manager applies, a second manager's change conflicts, and
    # with force_conflicts takes the field over
    applied = json.loads(json.dumps(body))
    applied["metadata"]["name"] = "ssa"
    pp.server_side_apply(body=applied, name="ssa", namespace="default", field_manager="gitops")
    changed = json.loads(json.dumps(applied))
    changed["spec"]["priority"] = 9
    try:
        pp.server_side_apply(body=changed, name="ssa", namespace="default", field_manager="py-other")
        fail("a conflicting server-side apply succeeded")
    except ApiException as e:
        status = json.loads(e.body)
        fields = [c.get("field") for c in status.get("details", {}).get("causes", [])]
        if e.status != 409 or status.get("reason") != "Conflict":
            fail(f"a conflicting apply: {e.status} {status.get('reason')}")
        print(f"conflicting apply: {e.status} {status.get('reason')} fields={fields}", flush=True)
    forced = pp.server_side_apply(
        body=changed, name="ssa", namespace="default", field_manager="py-other", force_conflicts=True
    )
    owners = sorted(
        (m.manager, m.operation) for m in forced.metadata.managedFields
    )
    print(f"forced priority={forced.spec.priority} managers={owners}", flush=True)
    print("OK", flush=True)


if __name__ == "__main__":
    main()
