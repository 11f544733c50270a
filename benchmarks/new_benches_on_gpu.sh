#!/usr/bin/env bash
# Issue 33: the four new benches (graph-capture, launch-blocking, device-per-rank, int32-offset)
# and their GPU tests, for the lead to run on the device from the repository root:
#   bash benchmarks/new_benches_on_gpu.sh
# Written without a GPU (never run on one yet). Estimated GPU time: about 4 minutes on one
# H100/H200 (launch-blocking starts 10 fresh processes, ~7 s each; the GPU tests ~1 minute).
# device-per-rank measures the right placement (rank i on cuda:i) only with >= 2 GPUs; on one
# GPU its record says only the sharing cost was measured.
set -u
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT/ev"
export PYTHONPATH="$PWD/src"
status=0
for name in graph-capture launch-blocking device-per-rank int32-offset; do
  echo "=== gpulint bench $name" | tee "$OUT/$name.log"
  python3 -m gpulint bench "$name" --runs 5 --evidence-dir "$OUT/ev" 2>&1 | tee -a "$OUT/$name.log"
  rc=${PIPESTATUS[0]}
  echo "=== $name exit $rc" | tee -a "$OUT/$name.log"
  [ "$rc" -eq 0 ] || status=1
done
ls -l "$OUT/ev"  # outcomes are in each record's config: host_copy_in_capture, int32_past_2_31, note
echo "=== GPU tests"
python3 -m pytest -q -p no:cacheprovider tests/runtime/test_runtime_gpu.py \
  -k "graph_capture or launch_blocking or device_per_rank or int32_offset" 2>&1 | tee "$OUT/pytest.log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || status=1
exit $status
