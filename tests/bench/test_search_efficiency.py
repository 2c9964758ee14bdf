"""bench/search_efficiency.py's comparison, on small real SQLite databases with the columns it reads."""
import importlib.util
import os
import sqlite3
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("search_efficiency", os.path.join(HERE, "..", "..", "bench", "search_efficiency.py"))
se = importlib.util.module_from_spec(spec)
spec.loader.exec_module(se)

sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))  # space_comparison imports search_efficiency by name
spec_sc = importlib.util.spec_from_file_location("space_comparison", os.path.join(HERE, "..", "..", "bench", "space_comparison.py"))
sc = importlib.util.module_from_spec(spec_sc)
spec_sc.loader.exec_module(sc)

NEAR, APART = 250.0, 1000.0  # hand-offs as the 2-vCPU host measured them, cores on one core complex and on two


def make_db(path, trials, handoff_column=True, confirmations=None, names=None):
    """trials: per workload hash, a list of (ratio or None for a failure, hand-off ns) in the order measured; the
    first is the task's default ("default" in every database), each other a schedule of this database's own
    ("<file>:s1", "<file>:s2", ...) unless names (per workload hash, a list of schedule names by trial index) says
    otherwise: a name two databases share is one schedule measured by both. confirmations: per workload hash,
    (trial index, ratio) pairs: the tuner's confirmation-phase records of that trial's schedule."""
    own = os.path.basename(path)

    def name(h, n):
        given = (names or {}).get(h)
        return given[n] if given else "default" if n == 0 else f"{own}:s{n}"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE workloads(id INTEGER PRIMARY KEY, hash TEXT, target TEXT)")
    con.execute("CREATE TABLE records(id INTEGER PRIMARY KEY, workload_id INTEGER, schedule TEXT, status TEXT, median_s REAL, baseline_s REAL, "
                "phase TEXT"
                + (", handoff_ns REAL NOT NULL DEFAULT 0)" if handoff_column else ")"))
    for wid, (h, series) in enumerate(sorted(trials.items()), 1):
        con.execute("INSERT INTO workloads VALUES(?, ?, 'cpu')", (wid, h))
        for n, (ratio, handoff) in enumerate(series):
            status = "ok" if ratio is not None else "crash"
            row = (wid, name(h, n), status, (ratio or 0) * 1e-3, 1e-3, "trial")
            if handoff_column:
                con.execute("INSERT INTO records(workload_id, schedule, status, median_s, baseline_s, phase, handoff_ns) VALUES(?, ?, ?, ?, ?, ?, ?)",
                            row + (handoff,))
            else:
                con.execute("INSERT INTO records(workload_id, schedule, status, median_s, baseline_s, phase) VALUES(?, ?, ?, ?, ?, ?)", row)
        for n, ratio in (confirmations or {}).get(h, []):
            con.execute("INSERT INTO records(workload_id, schedule, status, median_s, baseline_s, phase) VALUES(?, ?, 'ok', ?, 1e-3, 'confirmation')",
                        (wid, name(h, n), ratio * 1e-3))
    con.commit()
    con.close()


class Compare(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.a, self.b = os.path.join(self.dir.name, "a.db"), os.path.join(self.dir.name, "b.db")

    def tearDown(self):
        self.dir.cleanup()

    def needed(self, rows, workload):
        row = next(r for r in rows if r["workload"] == workload)
        return [(t["needed"], t["reached"]) for t in row["trials"]]

    def test_without_handoffs_the_best_ratio_either_found_is_the_target(self):
        make_db(self.a, {"w": [(1.0, 0), (0.95, 0), (0.90, 0), (0.99, 0)]}, handoff_column=False)
        make_db(self.b, {"w": [(1.0, 0), (None, 0), (0.80, 0)]}, handoff_column=False)
        rows, medians = se.compare([self.a, self.b], 0.05)
        self.assertEqual(self.needed(rows, "w"), [(5, False), (3, True)])  # 0.90 is not within 5% of 0.80
        self.assertEqual(medians, [5, 3])

    def test_a_ratio_taken_with_the_cores_apart_neither_sets_nor_reaches_the_target(self):
        # b's 0.67 against a default slowed by the cores apart: the same candidate measured 0.92 near.
        near = [(1.0, NEAR)] * 10  # enough near records for the near level
        make_db(self.a, {"w": [(1.0, NEAR), (0.99, NEAR), (0.92, NEAR)], "pad": near})
        make_db(self.b, {"w": [(1.0, NEAR), (0.67, APART), (0.98, NEAR), (0.91, NEAR)], "pad": near})
        rows, _ = se.compare([self.a, self.b], 0.05)
        self.assertEqual(self.needed(rows, "w"), [(3, True), (4, True)])
        row = next(r for r in rows if r["workload"] == "w")
        self.assertAlmostEqual(row["target_ratio"], 0.91 * 1.05)
        self.assertEqual([t["apart"] for t in row["trials"]], [0, 1])
        self.assertEqual([t["near_needed"] for t in row["trials"]], [3, 3])

    def test_the_default_is_one_wherever_it_ran_and_trials_apart_still_count(self):
        near = [(1.0, NEAR)] * 10
        make_db(self.a, {"w": [(1.03, APART), (0.60, APART), (0.97, NEAR)], "pad": near})
        make_db(self.b, {"w": [(1.0, NEAR), (0.95, NEAR)], "pad": near})
        rows, _ = se.compare([self.a, self.b], 0.05)
        # Target 0.95 * 1.05: a's default (1 as if near) does not reach it, its 0.60 apart cannot; its 0.97 does, at trial 3.
        self.assertEqual(self.needed(rows, "w"), [(3, True), (2, True)])
        row = next(r for r in rows if r["workload"] == "w")
        self.assertEqual([t["near_needed"] for t in row["trials"]], [1, 2])
        self.assertEqual([t["best"] for t in row["trials"]], [0.97, 0.95])
        # A looser tolerance takes the default itself, measured apart, as within reach.
        rows, _ = se.compare([self.a, self.b], 0.06)
        self.assertEqual(self.needed(rows, "w"), [(1, True), (1, True)])

    def test_the_default_timed_against_itself_counts_at_one(self):
        # The default's baseline is the same kernel: 1.015 and 0.995 are two readings of noise (ResNet-18 seed 2,
        # Sapphire Rapids). Read as measured, a's default missed the target 0.963 * 1.05 = 1.011 and b's reached it.
        make_db(self.a, {"w": [(1.015, 0), (1.2, 0), (0.963, 0)]}, handoff_column=False)
        make_db(self.b, {"w": [(0.995, 0), (1.1, 0)]}, handoff_column=False)
        rows, _ = se.compare([self.a, self.b], 0.05)
        self.assertEqual(self.needed(rows, "w"), [(1, True), (1, True)])
        # Nor does a default that read low set the target: 0.90 would have made it 0.945, which only it reached.
        make_db(os.path.join(self.dir.name, "c.db"), {"v": [(0.90, 0), (0.95, 0)]}, handoff_column=False)
        make_db(os.path.join(self.dir.name, "d.db"), {"v": [(1.0, 0), (1.2, 0), (0.97, 0)]}, handoff_column=False)
        rows, _ = se.compare([os.path.join(self.dir.name, n) for n in ("c.db", "d.db")], 0.05)
        row = next(r for r in rows if r["workload"] == "v")
        self.assertAlmostEqual(row["target_ratio"], 0.95 * 1.05)
        self.assertEqual(self.needed(rows, "v"), [(2, True), (3, True)])

    def test_a_schedule_both_measured_counts_at_the_median_of_their_readings(self):
        # "x" is one schedule read 0.82 in a and 0.89 in b (the noise of two processes minutes apart): it counts
        # 0.855 in both, so each reached the target 0.855 * 1.05 when it first measured it. Read apart, a's 0.82
        # set a target of 0.861 that b's reading of the very same schedule missed.
        make_db(self.a, {"w": [(1.0, 0), (1.2, 0), (0.82, 0)]}, handoff_column=False, names={"w": ["default", "a1", "x"]})
        make_db(self.b, {"w": [(1.0, 0), (0.89, 0), (0.95, 0)]}, handoff_column=False, names={"w": ["default", "x", "b2"]})
        rows, _ = se.compare([self.a, self.b], 0.05)
        self.assertEqual(self.needed(rows, "w"), [(3, True), (2, True)])
        row = next(r for r in rows if r["workload"] == "w")
        self.assertAlmostEqual(row["target_ratio"], 0.855 * 1.05)
        rows, _ = se.compare([self.a, self.b], 0.05, pooled=False)
        self.assertEqual(self.needed(rows, "w"), [(3, True), (4, False)])

    def test_a_confirmed_schedule_counts_at_its_confirmations_median(self):
        # a's 0.70 was a trial in a load spike: confirmed three times at about 1.6, it is no better than the default.
        make_db(self.a, {"w": [(1.0, 0), (0.70, 0), (0.93, 0)]}, handoff_column=False, confirmations={"w": [(1, 1.58), (1, 1.66), (1, 1.62)]})
        make_db(self.b, {"w": [(1.0, 0), (0.99, 0), (0.95, 0)]}, handoff_column=False)
        rows, _ = se.compare([self.a, self.b], 0.05)
        self.assertEqual(self.needed(rows, "w"), [(3, True), (3, True)])  # target 0.93 * 1.05: each reaches it at its third trial
        row = next(r for r in rows if r["workload"] == "w")
        self.assertEqual([t["best"] for t in row["trials"]], [0.93, 0.95])
        # Read by the trials' own ratios, the spike sets the target, which only a reaches.
        rows, _ = se.compare([self.a, self.b], 0.05, confirmed=False)
        self.assertEqual(self.needed(rows, "w"), [(2, True), (4, False)])


class PlanCheck(unittest.TestCase):
    """bench/space_comparison.py reads what each run's check in the model did from its output (the CLI's lines)."""

    def test_a_check_that_reverted_groups_and_one_taken_apart(self):
        reverted = ("end to end (median of 20 runs, alternating): untuned 47.893 ms, tuned 45.797 ms (1.05x), 58 of 58 groups tuned; "
                    "thread hand-off 230 ns (near 290)\n"
                    "in the model, 5 groups ran slower tuned than with their default schedule; the saved plan keeps their default:\n"
                    "  %14 nn.conv2d_nchwc+nn.relu (1, 8, 28, 28, 16): default 1.816 ms, tuned 1.941 ms\n")
        self.assertEqual(sc.plan_check(reverted), {"kept_default": 5, "apart": False})
        apart = ("end to end (median of 20 runs, alternating): untuned 54.695 ms, tuned 53.513 ms (1.02x), 58 of 58 groups tuned; "
                 "thread hand-off 641 ns (near 211)\n"
                 "the cores stayed apart for the check (thread hand-off 641 ns, near is 211; 5 tries): no group is reverted, "
                 "the plan keeps what the tuner chose from its measurements near\n")
        self.assertEqual(sc.plan_check(apart), {"kept_default": 0, "apart": True})
        self.assertEqual(sc.plan_check("end to end (median of 20 runs, alternating): untuned 5.2 ms, tuned 5.0 ms (1.04x)\n"),
                         {"kept_default": 0, "apart": False})


class TrialsStop(unittest.TestCase):
    """bench/space_comparison.py reads where a run stopped short of its budget from the CLI's line."""

    def test_a_run_that_ran_out_of_schedules_and_one_that_spent_its_budget(self):
        stopped = ("build/models/resnet50.onnx on x86_64-pc-linux-gnu/znver3/e1821e23/2t: 1502 trials this run (0 failed), 2000 before, "
                   "339 confirmation measurements, 297 s\n"
                   "no task had a schedule left to measure at 3502 of the 6000 trials asked for (each space measured through, or "
                   "sampling found no new point): more trials would find nothing new\n")
        self.assertEqual(sc.trials_stop(stopped), 3502)
        spent = "build/models/resnet50.onnx on x86_64-pc-linux-gnu/znver3/e1821e23/2t: 2000 trials this run (0 failed), 0 before\n"
        self.assertIsNone(sc.trials_stop(spent))


if __name__ == "__main__":
    sys.exit(unittest.main())
