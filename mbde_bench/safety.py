"""mbde bench safety: the data-safety table replayed through the command line.

Every row is a way a user can lose or fake data, run for real (``mbde`` in a process of
its own, real signals, real files): ``--out`` equal to, inside or above the input, an
unrelated folder under ``--force``, two runs into one output, Ctrl-C and SIGTERM to
simulate / replay (one process, or the terminal's whole process group) and to smooth /
identify / tune / bench, a bag cut short, a duration that would fill the disk, bad
seeds, a failed run, bags without sensor readings or with a ground truth of the wrong
type, and bare ``mbde``. Prints one line per row (what happens now, and whether it is
what must happen) and writes safety.json and safety.md into --out. Exit status 1 if a
row is not as required. 104 s wall on a 2-core machine with a load average of 12 (the
same cases run in test/test_safety.py).
"""
from __future__ import annotations

from mbde_bench.safety_cases import CASES, Workspace
from mbde_core.errors import DataError

HELP = "data safety: outputs, interrupts, bad inputs and bags (the table of issue 40), run for real"


def add_arguments(p):
    p.add_argument("--out", help="directory for safety.json and safety.md (optional)")
    p.add_argument("--only", default="", help="comma-separated row numbers (1-based) to run (default: all)")


def run(args) -> int:
    import json
    import os
    import platform
    import tempfile
    import time

    picked = list(range(len(CASES)))
    if args.only:
        try:
            picked = [int(v) - 1 for v in args.only.split(",") if v.strip()]
        except ValueError:
            raise DataError(f"--only: expected row numbers, got {args.only!r}") from None
        if not picked or not all(0 <= i < len(CASES) for i in picked):
            raise DataError(f"--only: rows are 1..{len(CASES)}")
    rows = []
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mbde-safety-") as tmp:
        ws = Workspace(tmp)
        for i in picked:
            name, case = CASES[i]
            t0 = time.perf_counter()
            try:
                now, ok = case(ws)
            except Exception as exc:  # noqa: BLE001 - a case that breaks is a failed row, the others run
                now, ok = f"case failed: {type(exc).__name__}: {exc}", False
            rows.append({"row": i + 1, "case": name, "now": now, "ok": bool(ok),
                         "seconds": round(time.perf_counter() - t0, 2)})
            print(f"{i + 1:>2}  {'ok  ' if ok else 'FAIL'}  {name}: {now}", flush=True)
    total = time.perf_counter() - t_all
    bad = [r for r in rows if not r["ok"]]
    print(f"{len(rows) - len(bad)} of {len(rows)} rows as required; {total:.0f} s wall "
          f"(other processes may have been running)")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        meta = {"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
                "date": time.strftime("%Y-%m-%d %H:%M"), "wall_s": round(total, 1)}
        with open(os.path.join(args.out, "safety.json"), "w", encoding="utf-8") as fh:
            json.dump({"meta": meta, "rows": rows}, fh, indent=1)
        with open(os.path.join(args.out, "safety.md"), "w", encoding="utf-8") as fh:
            fh.write(f"# mbde bench safety\n\n{meta['date']}, {meta['machine']}, Python {meta['python']}\n\n"
                     "| # | case | what happens | as required |\n|---|---|---|---|\n")
            for r in rows:
                fh.write(f"| {r['row']} | {r['case']} | {r['now'].replace('|', '/')} | {'yes' if r['ok'] else 'NO'} |\n")
        print("results: safety.json, safety.md")
    return 1 if bad else 0
