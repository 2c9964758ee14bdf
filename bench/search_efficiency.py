#!/usr/bin/env python3
"""How many trials each search needed: tuning databases of the same model compared task by task.

  search_efficiency.py --db evolutionary.db --db random.db [--tolerance 0.05] [--json]

For every workload (task) that all the databases measured on the same target, each database's
trial records are taken in the order they were measured (record id); the best ratio so far is
min(median_s / baseline_s) over its successful trials (a candidate against the default schedule
timed alongside it, so the databases compare even when the machine drifted). The target is the
best ratio any database reached, times (1 + tolerance); a database's count is the number of that
task's trials it measured up to and including the first one at or below the target. A database
that never reached it is counted as its trials + 1 and marked '>'. Prints one row per task and
the median count per database; the issue's figure is the ratio of the medians.
"""
import argparse
import json
import sqlite3
import statistics
import sys


def trials_by_task(path):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT w.hash, w.target, r.status, r.median_s, r.baseline_s FROM records r JOIN workloads w ON r.workload_id = w.id "
        "WHERE r.phase = 'trial' ORDER BY r.id").fetchall()
    con.close()
    tasks = {}
    for h, target, status, median_s, baseline_s in rows:
        ratio = median_s / baseline_s if status == "ok" and baseline_s and baseline_s > 0 and median_s > 0 else None
        tasks.setdefault((h, target), []).append(ratio)
    return tasks


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", action="append", required=True, help="a tuning database (give two or more)")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if len(a.db) < 2:
        sys.exit("search_efficiency.py: give at least two --db")
    dbs = [trials_by_task(p) for p in a.db]
    common = sorted(set.intersection(*(set(d) for d in dbs)))
    rows, counts = [], [[] for _ in dbs]
    for key in common:
        series = [d[key] for d in dbs]
        bests = [min((r for r in s if r is not None), default=None) for s in series]
        if any(b is None for b in bests) or all(len(s) <= 1 for s in series):
            continue  # a task nobody could improve on (one trial: its default)
        target = min(bests) * (1 + a.tolerance)
        row = {"workload": key[0], "target_ratio": target, "trials": []}
        for i, s in enumerate(series):
            best, hit = float("inf"), None
            for n, r in enumerate(s, 1):
                if r is not None:
                    best = min(best, r)
                if best <= target:
                    hit = n
                    break
            count = hit if hit is not None else len(s) + 1
            row["trials"].append({"db": a.db[i], "needed": count, "reached": hit is not None, "of": len(s), "best": bests[i]})
            counts[i].append(count)
        rows.append(row)
    medians = [statistics.median(c) if c else None for c in counts]
    if a.json:
        print(json.dumps({"tolerance": a.tolerance, "tasks": rows, "median_trials": dict(zip(a.db, medians))}, indent=2))
        return
    print(f"{'workload':18s} " + " ".join(f"{p.split('/')[-1][:24]:>26s}" for p in a.db))
    for row in rows:
        cells = [f"{('' if t['reached'] else '>')}{t['needed']}/{t['of']} (best {t['best']:.3f})" for t in row["trials"]]
        print(f"{row['workload']:18s} " + " ".join(f"{c:>26s}" for c in cells))
    print(f"median trials to within {a.tolerance:.0%} of the best either found, over {len(rows)} tasks: " +
          ", ".join(f"{p.split('/')[-1]} {m}" for p, m in zip(a.db, medians)))
    if len(medians) == 2 and all(medians):
        print(f"ratio {a.db[1].split('/')[-1]} / {a.db[0].split('/')[-1]}: {medians[1] / medians[0]:.2f}x")


if __name__ == "__main__":
    main()
