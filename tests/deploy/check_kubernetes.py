#!/usr/bin/env python3
"""The Helm chart and the plain manifests against the real tools.

- `helm lint --strict` on deploy/helm/kestrel;
- `helm template` of several value sets (the defaults; the HPA with prometheus-adapter's rules and a
  ServiceMonitor; KEDA with a node's directory and an API key), each validated by kubeconform -strict against
  the pinned Kubernetes release's schemas and the ServiceMonitor/ScaledObject CRDs' (scripts/setup.sh);
- contradictory values (HPA and KEDA both) refused by the chart with a message that says why;
- deploy/kubernetes/kestrel.yaml is the defaults' render (regenerate: see docs/deploy.md);
- what the manifests promise: probes on /health (startup, liveness) and /ready (readiness), a non-root
  read-only container, a grace period above --shutdown-timeout, and autoscaling on a metric the server
  exposes (its name checked against a running `kestrel serve`'s /metrics).

Usage: check_kubernetes.py KESTREL_BINARY MODEL SOURCE_DIR
"""
import pathlib
import re
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from common import fail, served_series  # noqa: E402

KUBERNETES_VERSION = "1.34.4"


def main():
    kestrel, model, source = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
    tools = source / ".tools"
    helm, kubeconform = tools / "bin" / "helm", tools / "bin" / "kubeconform"
    schemas = tools / "kubernetes-schemas" / f"v{KUBERNETES_VERSION}-standalone-strict"
    missing = [str(p) for p in (helm, kubeconform, schemas / "deployment-apps-v1.json",
                                tools / "crd-schemas" / "scaledobject_v1alpha1.json") if not p.exists()]
    if missing:
        print(f"missing: {', '.join(missing)}: run scripts/setup.sh (it installs Helm, kubeconform and the schemas)")
        return 1
    chart = source / "deploy" / "helm" / "kestrel"
    problems = []

    def run(args, stdin=None):
        return subprocess.run(args, input=stdin, capture_output=True, text=True)

    lint = run([str(helm), "lint", "--strict", str(chart)])
    print(lint.stdout.strip())
    if lint.returncode != 0:
        problems.append(f"helm lint failed: {lint.stdout}{lint.stderr}")

    def render(*sets):
        args = [str(helm), "template", "kestrel", str(chart)]
        for s in sets:
            args += ["--set", s]
        return run(args)

    value_sets = {
        "defaults": [],
        "hpa": ["autoscaling.hpa.enabled=true", "serviceMonitor.enabled=true"],
        "keda": ["autoscaling.keda.enabled=true", "models.hostPath=/srv/models", "server.apiKeySecret=kestrel-key"],
    }
    rendered = {}
    for name, sets in value_sets.items():
        r = render(*sets)
        if r.returncode != 0:
            problems.append(f"helm template ({name}) failed: {r.stderr}")
            continue
        rendered[name] = r.stdout
        kc = run([str(kubeconform), "-strict", "-summary", "-kubernetes-version", KUBERNETES_VERSION,
                  "-schema-location", str(tools / "kubernetes-schemas") +
                  "/{{.NormalizedKubernetesVersion}}-standalone{{.StrictSuffix}}/{{.ResourceKind}}{{.KindSuffix}}.json",
                  "-schema-location", str(tools / "crd-schemas") + "/{{.ResourceKind}}_{{.ResourceAPIVersion}}.json", "-"],
                 stdin=r.stdout)
        print(f"kubeconform ({name}): {kc.stdout.strip()} {kc.stderr.strip()}")
        if kc.returncode != 0 or "Skipped: 0" not in kc.stdout:
            problems.append(f"kubeconform ({name}) did not validate every resource: {kc.stdout}{kc.stderr}")

    both = render("autoscaling.hpa.enabled=true", "autoscaling.keda.enabled=true")
    if both.returncode == 0 or "KEDA makes its own HPA" not in both.stderr:
        problems.append(f"HPA and KEDA together were not refused: {both.stderr}")

    plain = (source / "deploy" / "kubernetes" / "kestrel.yaml").read_text()
    if rendered.get("defaults") and plain != rendered["defaults"]:
        problems.append("deploy/kubernetes/kestrel.yaml is not the chart's default render: regenerate it "
                        "(helm template kestrel deploy/helm/kestrel > deploy/kubernetes/kestrel.yaml)")

    d = rendered.get("defaults", "")
    for probe, path in (("startupProbe", "/health"), ("readinessProbe", "/ready"), ("livenessProbe", "/health")):
        if not re.search(rf"{probe}:\n\s+httpGet:\n\s+path: {path}\n", d):
            problems.append(f"the Deployment's {probe} does not GET {path}")
    for needed in ("runAsNonRoot: true", "readOnlyRootFilesystem: true", "allowPrivilegeEscalation: false",
                   "terminationGracePeriodSeconds: 45", "- --shutdown-timeout\n            - \"30\""):
        if needed not in d:
            problems.append(f"the Deployment lacks '{needed}'")

    # The autoscalers' metric is one the server exposes.
    served = served_series(kestrel, model)
    scaled = set(re.findall(r"\b(kestrel_[a-z_]+)\b", rendered.get("hpa", "") + rendered.get("keda", "")))
    if not scaled:
        problems.append("no autoscaling metric found in the HPA and KEDA renders")
    for name in sorted(scaled):
        if name not in served:
            problems.append(f"the autoscalers read {name}, which the server does not expose")
    print(f"autoscaling on: {', '.join(sorted(scaled))}")
    return fail(problems)


if __name__ == "__main__":
    sys.exit(main())
