#!/usr/bin/env bash
# Run scenarios/llamacpp_parallel.toml against llama-server at --parallel 1 2 4 8 and print the
# table docs/llamacpp.md shows. Each point starts the server with `python -m harness serve`
# (so through the harness's launcher), runs the scenario with `python -m harness run`, and
# stops the server. About 1.5 minutes per point on 2 cores.
#
#   bash scripts/install_llamacpp.sh                     # once
#   bash scripts/llamacpp_parallel_runs.sh               # OUT=results/llamacpp_parallel PS="1 2 4 8"
#
# (A stopgap until `python -m harness sweep` can restart llama.cpp per setting.)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
PY="${PYTHON:-python}"
OUT="$(mkdir -p "${OUT:-results/llamacpp_parallel}" && cd "${OUT:-results/llamacpp_parallel}" && pwd)"
PORT="${PORT:-18100}"

cat >"$OUT/config.toml" <<CFG
[server]
engine = "llama.cpp"
port = $PORT
log_dir = "$OUT"
[model]
max_model_len = 512
CFG

for P in ${PS:-1 2 4 8}; do
    echo "== --parallel $P  (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    "$PY" -m harness serve --config "$OUT/config.toml" --max-num-seqs "$P" >"$OUT/serve-p$P.txt" 2>&1 &
    server=$!
    for _ in $(seq 1 600); do
        curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
        kill -0 "$server" 2>/dev/null || { cat "$OUT/serve-p$P.txt"; exit 1; }
        sleep 0.2
    done
    (cd "$OUT" && "$PY" -m harness run "$REPO/scenarios/llamacpp_parallel.toml" --config "$OUT/config.toml" \
        --target "http://127.0.0.1:$PORT" --out "$OUT/p$P.json" >"$OUT/run-p$P.txt" 2>&1) \
        || echo "   run failed: see $OUT/run-p$P.txt"
    kill -TERM "$server"
    wait "$server" || true
done

"$PY" - "$OUT" ${PS:-1 2 4 8} <<'PYTABLE'
import sys
from pathlib import Path

import orjson

out = Path(sys.argv[1])
print("| --parallel | completed | output tok/s | TTFT from schedule p50 / p99 (s) "
      "| ITL mean / p50 / p99 (ms) | TPOT mean (ms) | peak running / waiting |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for p in sys.argv[2:]:
    f = out / f"p{p}.json"
    if not f.exists():
        continue
    r = orjson.loads(f.read_bytes())
    m = next(ph for ph in r["phases"] if ph["name"] == "main")
    lat, th = m["latency_ms"], m["throughput"]
    peaks = (r.get("server_metrics") or {}).get("peaks", {})
    run, wait = peaks.get("running", {}).get("max"), peaks.get("waiting", {}).get("max")
    print(f"| {p} | {m['requests']['completed']} | {th['output_tokens_per_s']:.1f} | "
          f"{lat['ttft_from_schedule']['p50'] / 1e3:.1f} / {lat['ttft_from_schedule']['p99'] / 1e3:.1f} | "
          f"{lat['itl']['mean']:.1f} / {lat['itl']['p50']:.1f} / {lat['itl']['p99']:.0f} | "
          f"{lat['tpot']['mean']:.1f} | {run:g} / {wait:g} |")
PYTABLE
