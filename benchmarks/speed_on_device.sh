#!/usr/bin/env bash
# The speed benchmark on a machine with no network (the lent 16-core GPU host): gpulint's
# dependencies, ruff, flake8 and TorchFix from wheels downloaded beforehand into
# benchmarks/.cache/devwheels (for that machine's Python), transformers' wheel in
# benchmarks/.cache. Writes the results and a README with the table regenerated to $OUT.
#   pip download --only-binary :all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     --implementation cp -d benchmarks/.cache/devwheels libcst tree-sitter tree-sitter-cuda \
#     pyyaml pathspec watchfiles markdown-it-py ruff==0.17.6 flake8==7.5.0 torchfix==0.7.0
set -euo pipefail
OUT=${OUT:-/tmp/speed-out}
mkdir -p "$OUT"
WHEELS=$PWD/benchmarks/.cache/devwheels
export PIP_NO_INDEX=1 PIP_FIND_LINKS=$WHEELS  # the benchmark's flake8 venv installs from here
python3 -m venv /tmp/speed-venv
/tmp/speed-venv/bin/pip install -q libcst tree-sitter tree-sitter-cuda pyyaml pathspec \
  watchfiles markdown-it-py ruff==0.17.6
export PYTHONPATH=$PWD/src
# gpulint from the source tree (no build backend offline), with the console script pip writes
cat > /tmp/speed-venv/bin/gpulint <<'SCRIPT'
#!/tmp/speed-venv/bin/python
import re
import sys
from gpulint.cli import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\.pyw|\.exe)?$', '', sys.argv[0])
    sys.exit(main())
SCRIPT
chmod +x /tmp/speed-venv/bin/gpulint
cp README.md "$OUT/README.md"
/tmp/speed-venv/bin/python benchmarks/bench_speed.py --readme "$OUT/README.md" \
  --json "$OUT/speed.json" "$@" 2>&1 | tee "$OUT/speed.log"
