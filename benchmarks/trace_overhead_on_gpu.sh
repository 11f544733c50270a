#!/usr/bin/env bash
# Issue 36 item 6: `gpulint trace --every 20` overhead, old vs new sampling, on the device.
# Run from the repository root:  bash benchmarks/trace_overhead_on_gpu.sh      (about 5-7 minutes)
#
#   old  = --keep-cupti  (spread sampling, CUPTI left attached between cycles: the behaviour
#                         before 2026-12-07, same schedule of steps as before)
#   new  = the default   (spread sampling, TEARDOWN_CUPTI=1: kineto detaches CUPTI after each
#                         recorded cycle)
#   tail = --sample tail (the 3 recorded steps at the window's end; only while time is left)
#
# Runs alternate old/new (then the other script) so host drift falls on both alike. Each run
# prints its overhead lines: the window mean, then by kind of step, then in-process (against
# the same process's steps before the profiler started, and how far those are from the
# untraced run's: the run-to-run drift). Full logs go to $OUT (or /tmp) as trace-*.log.
set -u
REPO=$(pwd)
LOGS=${OUT:-/tmp/trace36-logs}
mkdir -p "$LOGS"
BUDGET=${BUDGET:-330}   # seconds; tail runs start only while under it
HARD=${HARD:-420}       # seconds; no run of any mode starts after it (the device's 10-minute cap)
cd "$REPO/docs/trace-scripts" || exit 1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"

run() {  # run SCRIPT MODE N EXTRA...
  local script=$1 mode=$2 n=$3; shift 3
  local log="$LOGS/trace-${script%.py}-$mode-$n.log" t0=$SECONDS
  PYTHONPATH=$REPO/src timeout 150 python3 -m gpulint trace --force --no-record --overhead \
    --steps 3 --warmup 2 --every 20 --rows 4 "$@" -- python3 "$script" >"$log" 2>&1
  local rc=$?
  echo "== ${script%.py} $mode run $n (rc $rc, $((SECONDS - t0)) s)"
  if grep -q '^overhead' "$log"; then
    grep '^overhead' "$log" | sed 's/^/   /'
  else
    tail -n 8 "$log" | sed 's/^/   ! /'
  fi
  grep -h 'TEARDOWN\|teardown\|CUPTI' "$log" | grep -v '^overhead' | head -n 3 | sed 's/^/   log: /'
}

for n in 1 2 3; do
  for script in char_gpt.py cifar_resnet.py; do
    if [ "$SECONDS" -ge "$HARD" ]; then echo "== ${script%.py} run $n skipped (time)"; continue; fi
    run "$script" old "$n" --keep-cupti
    run "$script" new "$n"
  done
done
for n in 1 2 3; do
  for script in char_gpt.py cifar_resnet.py; do
    if [ "$SECONDS" -lt "$BUDGET" ]; then
      run "$script" tail "$n" --sample tail
    fi
  done
done

echo
echo "== summary: window-mean overhead (median-step overhead) [in-process; unrecorded-after-profiler vs before]"
for script in char_gpt cifar_resnet; do
  for mode in old new tail; do
    line=""
    for f in "$LOGS"/trace-$script-$mode-*.log; do
      [ -e "$f" ] || continue
      ov=$(grep -m1 '^overhead:' "$f" | sed -n 's/.*(\([+-][0-9]*%\) mean.*, \([+-][0-9]*%\) median).*/\1 (\2)/p')
      ip=$(grep -m1 '^overhead in-process' "$f" | sed -n 's/^overhead in-process: \([+-][0-9]*%\).*/\1/p')
      idle=$(grep -m1 '^overhead in-process' "$f" | sed -n 's/.*unrecorded steps after it \([+-][0-9]*%\).*/\1/p')
      line="$line  ${ov:-?} [${ip:--}; ${idle:--}]"
    done
    [ -n "$line" ] && printf '%-13s %-5s%s\n' "$script" "$mode" "$line"
  done
done
echo "total $SECONDS s"
