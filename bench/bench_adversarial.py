"""Adversarial workloads: truth vs reported, label and verdict, side by side.

    python bench/bench_adversarial.py [-n N] [-k SUBSTRING] [--json FILE]

Runs every case of tests/adversarial.py through the real CLI (N times), and prints one line per checked
figure: case, figure, truth (the kernel's own figure read in the same run; lo..hi where it is an interval),
reported, the report's label, and the verdict: ok / WRONG-EXACT (labelled exact, not the kernel's figure) /
BOUND-VIOLATED (a lower bound above the truth or an upper bound below it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import adversarial as adv


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=1, help="runs of each case")
    ap.add_argument("-k", default="", help="only cases whose id contains this")
    ap.add_argument("--json", help="also write every row to this file")
    ap.add_argument("--all-rows", action="store_true", help="print rows without a label too")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gputop-adv-"))
    big = Path(tempfile.gettempdir()) / "gputop-adv-1GiB.bin"
    adv.make_file(str(big), adv.BIG_FILE_MIB)
    rows: list[adv.Row] = []
    errors: list[str] = []
    hdr = f"{'case':<26} {'figure':<44} {'truth':>22} {'reported':>11}  {'verdict':<15} label"
    print(hdr)
    print("-" * len(hdr))
    for case in adv.cases(str(big)):
        if args.k not in case.id:
            continue
        for i in range(args.n):
            t0 = time.monotonic()
            try:
                report, truth, _ = adv.run_case(case, work / f"{case.id}-{i}")
            except Exception as e:
                errors.append(f"{case.id}: {e}")
                print(f"{case.id:<26} ERROR {e}")
                continue
            for r in adv.check(case.id, report, truth):
                if r.kind == "none" and not args.all_rows:
                    continue
                rows.append(r)
                print(
                    f"{case.id:<26} {r.figure:<44} {r.truth_str():>22} {r.reported_str():>11}  {r.verdict:<15} "
                    f"{r.label[:70]}"
                )
            print(f"{'':<26} ({time.monotonic() - t0:.1f} s)")
    bad = [r for r in rows if r.verdict not in ("ok", "no-label")]
    print(f"\n{len(rows)} figures checked, {len(bad)} wrong; {len(errors)} errors")
    if args.json:
        Path(args.json).write_text(json.dumps([r.__dict__ for r in rows], indent=1))
    return 1 if bad or errors else 0


if __name__ == "__main__":
    sys.exit(main())
