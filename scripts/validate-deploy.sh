#!/usr/bin/env bash
# Validates the deploy files offline, with schema validators from PyPI installed project-local
# and pinned under target/test-peers (idempotently: only when missing or another version):
# - the Kubernetes manifests of deploy/cluster/k8s/ against the Kubernetes API schemas that
#   kubernetes-validate bundles, strictly (an unknown field fails), for two Kubernetes
#   releases; a kind or apiVersion it has no schema for fails too;
# - the compose files against the compose-spec schema that check-jsonschema bundles;
# - deploy/cluster/config.toml as TOML, with [cluster] enabled = true and a postgres:// [store],
#   and the ConfigMap's copy of it, which must be the same text.
# Prints what it validated; exits non-zero on any error. Needs the network only to install.
# Usage: scripts/validate-deploy.sh
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

# The validators, in one venv of their own beside the MCP peers of scripts/test.sh.
peers="$repo/target/test-peers"
kubernetes_validate_version="1.37.0"
check_jsonschema_version="0.39.0"
venv="$peers/deploy-py"
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('kubernetes-validate') != '$kubernetes_validate_version' or m.version('check-jsonschema') != '$check_jsonschema_version')" >/dev/null 2>&1; then
  echo "validate-deploy.sh: installing kubernetes-validate==$kubernetes_validate_version and check-jsonschema==$check_jsonschema_version" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check \
    "kubernetes-validate==$kubernetes_validate_version" "check-jsonschema==$check_jsonschema_version" >&2
fi

failed=0

# Kubernetes: the oldest release still common in managed clusters, and the newest bundled.
k8s_versions=(1.30.0 1.37.0)
manifests=(deploy/cluster/k8s/*.yaml)
k8s_args=(--strict)
for v in "${k8s_versions[@]}"; do k8s_args+=(-k "$v"); done
echo "validate-deploy.sh: Kubernetes manifests (kubernetes-validate $kubernetes_validate_version --strict, Kubernetes ${k8s_versions[*]}):"
k8s_out=$("$venv/bin/kubernetes-validate" "${k8s_args[@]}" "${manifests[@]}" 2>&1) || failed=1
printf '%s\n' "$k8s_out" | sed 's/^/  /'
# kubernetes-validate only warns when it has no schema for a kind (a misspelt kind or
# apiVersion): that is an error here.
if grep -q '^WARN' <<<"$k8s_out"; then failed=1; fi

echo "validate-deploy.sh: compose files (check-jsonschema $check_jsonschema_version, vendored compose-spec schema):"
compose_files=(deploy/docker-compose.yml deploy/cluster/docker-compose.yml)
if "$venv/bin/check-jsonschema" --builtin-schema vendor.compose-spec "${compose_files[@]}" 2>&1 | sed 's/^/  /'; then
  printf '  %s\n' "${compose_files[@]}"
else
  failed=1
fi

# The cluster config, and the manifests as a whole: every kind the deployment needs, and the
# ConfigMap holding deploy/cluster/config.toml unchanged.
echo "validate-deploy.sh: deploy/cluster/config.toml and the manifests' contents:"
"$venv/bin/python" - "${manifests[@]}" <<'EOF' || failed=1
import sys
import tomllib

import yaml

errors = []
path = "deploy/cluster/config.toml"
with open(path, "rb") as f:
    text = f.read().decode()
try:
    config = tomllib.loads(text)
except tomllib.TOMLDecodeError as e:
    sys.exit(f"  {path}: not valid TOML: {e}")
if config.get("cluster", {}).get("enabled") is not True:
    errors.append(f"{path}: [cluster] enabled is not true")
if not str(config.get("store", {}).get("url", "")).startswith("postgres://"):
    errors.append(f"{path}: [store] url is not a postgres:// URL (the cluster needs one)")
if not errors:
    print(f"  {path}: TOML, [cluster] enabled = true, [store] url postgres://")

kinds = {}
for manifest in sys.argv[1:]:
    with open(manifest) as f:
        for doc in yaml.safe_load_all(f):
            if doc:
                kinds.setdefault(doc.get("kind"), []).append((manifest, doc))
wanted = ["Namespace", "Secret", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget"]
missing = [k for k in wanted if k not in kinds]
if missing:
    errors.append(f"deploy/cluster/k8s/: no {', '.join(missing)}")
else:
    print(f"  deploy/cluster/k8s/: {', '.join(wanted)} present")
for manifest, doc in kinds.get("ConfigMap", []):
    if (doc.get("data") or {}).get("config.toml") != text:
        errors.append(f"{manifest}: data config.toml differs from {path}")
    else:
        print(f"  {manifest}: config.toml is {path}")

for e in errors:
    print(f"  ERROR {e}")
sys.exit(1 if errors else 0)
EOF

if [ "$failed" -ne 0 ]; then
  echo "validate-deploy.sh: FAILED" >&2
  exit 1
fi
echo "validate-deploy.sh: all valid"
