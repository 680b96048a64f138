#!/usr/bin/env bash
# The real-GPU checks in one short run on a lent GPU machine (Python 3.12 with PyTorch and nvidia-ml-py, no
# registry): installs the wheels carried in .whl/ (bench/device_wheels.sh downloads them here), builds nothing,
# then runs tests/test_gpu_real.py (marker gpu; each test prints its figures as "FIGURE: ..."; among them a real
# PyTorch CUDA out-of-memory error, caught then uncaught, untracked, tracked and with --gpu-history: about 40 s)
# and two short measurements of NVML on the real driver. Everything goes to $OUT/log as well. About 4 minutes on
# an H100.
#
#     bash bench/device_gpu_check.sh          (from the repo root; OUT defaults to /tmp/gpu-check)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
main() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheels did not install (run bench/device_wheels.sh here, carry .whl)"; return 2; }
  export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
  nvidia-smi --query-gpu=name,driver_version,memory.total,accounting.mode,mig.mode.current --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.cuda.is_available())' || echo "no torch"
  python3 -c 'import sys, pydantic, pytest, gputop_tracker.core.model.models as m; print("python", sys.version.split()[0],
    "pydantic", pydantic.VERSION, "pytest", pytest.__version__, "models from", m.__file__)' || return 2
  # addopts (-n 3 --dist loadfile) needs pytest-xdist: emptied, one process
  timeout -k 10 480 python3 -m pytest -p no:cacheprovider -o addopts="" -m gpu -s -v -rs tests/test_gpu_real.py
  local rc=$?
  echo "== pytest exit $rc"
  echo "== NVML calls on this driver (CPU per call)"
  timeout -k 5 60 python3 bench/bench_nvml.py --real --samples 200 || echo "bench_nvml failed: $?"
  timeout -k 5 30 python3 bench/bench_gpu_watch.py --real || echo "bench_gpu_watch failed: $?"
  return $rc
}
main 2>&1 | tee "$OUT/log"
exit "${PIPESTATUS[0]}"
