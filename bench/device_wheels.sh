#!/usr/bin/env bash
# Download, here, the wheels the GPU machine lacks (no registry is reachable there) into .whl/ (git-ignored):
# the tool's dependencies that are not in its image, for Python 3.12 on x86-64 manylinux. Run from the repo root;
# the device run names `.whl` in its carry list and bench/device_gpu_check.sh installs them with --target.
# Versions: those this checkout is tested with (one of each: two versions stop the install there).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WANT=(
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0
  platformdirs==4.14.8
  # the live view's (the headless runs do not import it; carried so that nothing is missing)
  textual==8.2.8 rich==15.0.0 markdown-it-py==4.3.0 mdit-py-plugins==0.7.0 linkify-it-py==2.2.0 uc-micro-py==2.0.0
)
rm -rf .whl && mkdir -p .whl
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${WANT[@]}"
# every wheel's own needs are in the list or in the image (KINDS.md); say what each asks for, to check by eye
for w in .whl/*.whl; do
  echo "$(basename "$w"): $(unzip -p "$w" '*.dist-info/METADATA' | grep '^Requires-Dist' | grep -v 'extra ==' \
    | sed 's/Requires-Dist: //' | tr '\n' ' ')"
done
du -sh .whl
