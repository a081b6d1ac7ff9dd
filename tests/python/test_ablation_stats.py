"""The ablation report's statistics (ablations/stats.py) against values worked out independently
(t tables, closed forms, exact bootstrap distributions), and the commands ablations/run_suite.py
builds for each world (the skills world's setting is checked as arguments, not run)."""
import importlib.util
import itertools
import math
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "ablations"))
import stats  # noqa: E402


def load_run_suite():
    spec = importlib.util.spec_from_file_location("run_suite", os.path.join(ROOT, "ablations", "run_suite.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Student's t quantiles from a printed table (three decimals).
T_TABLE = [(0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 4, 2.776), (0.975, 9, 2.262), (0.975, 30, 2.042),
           (0.8, 2, 1.061), (0.8, 9, 0.883), (0.995, 5, 4.032), (0.9, 20, 1.325)]


@pytest.mark.parametrize("p,df,want", T_TABLE)
def test_t_quantile_matches_the_table(p, df, want):
    assert stats.t_quantile(p, df) == pytest.approx(want, abs=5e-4)
    assert stats.t_quantile(1 - p, df) == pytest.approx(-want, abs=5e-4)


def test_t_quantile_matches_the_closed_forms_of_one_and_two_degrees_of_freedom():
    for p in (0.55, 0.8, 0.9, 0.975, 0.999):
        # df = 1 is the Cauchy distribution; df = 2 has t = (2p - 1) / sqrt(2p(1 - p)).
        assert stats.t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-9)
        assert stats.t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-9)
    # Many degrees of freedom: the normal quantile.
    assert stats.t_quantile(0.975, 100000) == pytest.approx(1.95996, abs=1e-4)
    assert stats.t_cdf(0.0, 3) == pytest.approx(0.5)


def test_t_interval_of_one_two_three():
    lo, hi = stats.t_interval([1.0, 2.0, 3.0])  # mean 2, sd 1, n 3
    half = 4.302653 / math.sqrt(3)
    assert (lo, hi) == (pytest.approx(2 - half, abs=1e-5), pytest.approx(2 + half, abs=1e-5))
    assert stats.t_interval([5.0]) is None
    assert stats.t_interval([4.0, 4.0, 4.0]) == (4.0, 4.0)


def test_bootstrap_of_a_constant_sample_has_zero_width():
    lo, hi = stats.bootstrap_interval([2.5, 2.5, 2.5, 2.5], "constant")
    assert lo == hi == 2.5
    lo, hi = stats.bootstrap_interval([0.0, 0.0, 0.0], "zeros")
    assert lo == hi == 0.0


def test_bootstrap_of_three_seeds_matches_the_exact_resample_distribution():
    # Resamples of 3 values: 27 equally likely index triples, 10 distinct multisets.
    triples = list(itertools.product(range(3), repeat=3))
    assert len({tuple(sorted(t)) for t in triples}) == stats.distinct_resample_means(3) == 10
    # [1, 2, 3]: the smallest mean (1) and the largest (3) each have probability 1/27 = 3.7% > 2.5%,
    # so the 2.5% and 97.5% points are the extremes: an interval narrower than t's [-0.48, 4.48].
    assert stats.bootstrap_interval([1.0, 2.0, 3.0], "a") == (1.0, 3.0)
    # [0, 0, 3]: the mean is the number of times the 3 is drawn, Binomial(3, 1/3): P(0) = 8/27 and
    # P(3) = 1/27, so the interval is [0, 3].
    assert stats.bootstrap_interval([0.0, 0.0, 3.0], "b") == (0.0, 3.0)


def test_bootstrap_of_many_values_is_close_to_the_normal_interval():
    xs = [float(i % 10) for i in range(400)]  # mean 4.5, population sd sqrt(8.25)
    lo, hi = stats.bootstrap_interval(xs, "normal", resamples=4000)
    half = 1.959964 * math.sqrt(8.25) / math.sqrt(400)
    assert lo == pytest.approx(4.5 - half, abs=0.05)
    assert hi == pytest.approx(4.5 + half, abs=0.05)


def test_bootstrap_is_deterministic_for_a_key():
    xs = [0.5, -1.0, 2.0, 3.5, -0.25]
    assert stats.bootstrap_interval(xs, "open/abl1/L2/1.2") == stats.bootstrap_interval(xs, "open/abl1/L2/1.2")
    keys = {stats.bootstrap_interval(xs, f"key{i}", resamples=200) for i in range(20)}
    assert len(keys) > 1  # another key draws other resamples


def test_an_effect_is_detected_only_when_both_intervals_exclude_zero():
    e = stats.Effect([11.0, 12.0, 13.0], [10.0, 10.0, 10.0], "k")  # differences 1, 2, 3
    assert e.effect == 2.0 and e.sd == 1.0 and e.n == 3
    assert stats.excludes_zero(e.boot) and not stats.excludes_zero(e.t) and not e.detected
    e = stats.Effect([14.0, 15.0, 16.0], [10.0, 10.0, 10.0], "k")  # 4, 5, 6: t 5 +- 2.48
    assert e.detected
    e = stats.Effect([10.0, 10.0, 10.0], [10.0, 10.0, 10.0], "k")
    assert e.boot == (0.0, 0.0) and not e.detected  # an endpoint at 0 covers it
    assert not stats.Effect([12.0], [10.0], "k").detected  # one seed: no t interval


def test_minimal_detectable_effect_and_seeds_needed():
    # sd 1, n 3: (t(0.975, 2) + t(0.8, 2)) / sqrt(3) = (4.303 + 1.061) / 1.732.
    assert stats.mde(1.0, 3) == pytest.approx((4.302653 + 1.060660) / math.sqrt(3), abs=1e-5)
    assert stats.mde(2.0, 10) == pytest.approx((2.262157 + 0.883404) * 2 / math.sqrt(10), abs=1e-5)
    assert stats.mde(1.0, 1) is None
    # Seeds needed: the first n whose MDE is at most the effect (checked by walking n).
    for effect, sd in ((2.0, 1.0), (0.5, 3.0), (4.0, 10.0)):
        n = stats.seeds_needed(effect, sd)
        assert n == min(k for k in range(2, 1001) if stats.mde(sd, k) <= effect)
        assert stats.seeds_needed(-effect, sd) == n
    assert stats.seeds_needed(0.0, 1.0) is None
    assert stats.seeds_needed(0.01, 10.0) is None  # more than 1000 seeds
    assert stats.seeds_needed(3.0, 0.0) == 2


def test_each_world_passes_its_setting_to_every_harness_call():
    rs = load_run_suite()
    row = {"name": "abl1_noskill", "config": "experiments/abl1_noskill.toml", "set": ["eval.turns=2"]}
    for world in ("open", "skills"):
        extra = [] if world == "open" else ["--set", "sim.knowledge=skills"]
        assert rs.run_args("build", row, 2, "runs/ablations", world) == [
            "build/bin/harness", "run", "experiments/abl1_noskill.toml", "--seed", "2", "--out",
            f"runs/ablations/{world}", "--name", "abl1_noskill_s2", "--set", "eval.turns=2"] + extra
        assert rs.config_args("build", row, 2, "runs/ablations", world) == [
            "build/bin/harness", "config", "experiments/abl1_noskill.toml", "--set", "run.seed=2", "--set",
            "run.name=abl1_noskill_s2", "--set", f"run.out=runs/ablations/{world}", "--set", "eval.turns=2"] + extra
        # The oracle never consults the policy: one call per seed serves both worlds.
        assert rs.oracle_args("build", "experiments/main.toml", 3, 4000) == [
            "build/bin/harness", "oracle", "experiments/main.toml", "--set", "run.seed=3", "--budget", "4000",
            "--format", "json"]
        assert rs.run_dir("runs/ablations", world, row, 2) == f"runs/ablations/{world}/abl1_noskill_s2"


def test_run_suite_options():
    rs = load_run_suite()
    args = rs.parse_args(["--seeds", "2", "--world", "open", "--rows", "main,abl1_noskill"])
    assert rs.seeds_of(args.seeds, [1, 2, 3]) == [1, 2]
    assert rs.seeds_of(None, [7, 8]) == [7, 8]
    assert rs.worlds_of(args.world) == ["open"]
    assert rs.worlds_of(rs.parse_args([]).world) == ["open", "skills"]
    rows = [{"name": n} for n in ("main", "drkernel_baseline", "abl1_noskill")]
    assert [r["name"] for r in rs.select_rows(rows, args.rows)] == ["main", "abl1_noskill"]
    assert rs.select_rows(rows, None) == rows
    with pytest.raises(SystemExit):
        rs.select_rows(rows, "main,nosuchrow")
    with pytest.raises(SystemExit):
        rs.parse_args(["--seeds", "0"])


def test_effect_cells_say_what_was_detected():
    rs = load_run_suite()
    e = stats.Effect([14.0, 15.0, 16.0], [10.0, 10.0, 10.0], "k")
    assert rs.effect_cell(e) == "+5.0 [+4.0, +6.0] t[+2.5, +7.5] (3) detected"
    e = stats.Effect([10.0, 10.0, 10.0], [10.0, 10.0, 10.0], "k")
    assert rs.effect_cell(e) == "+0.0 [+0.0, +0.0] t[+0.0, +0.0] (3)"
    assert rs.power_cell(e) == "0.0 / -"
    e = stats.Effect([9.0, 8.0, 7.0], [10.0, 10.0, 10.0], "k")  # -1, -2, -3
    assert rs.power_cell(e) == f"{stats.mde(1.0, 3):.1f} / {stats.seeds_needed(2.0, 1.0)}"


def test_claims_are_read_from_detected_effects():
    from types import SimpleNamespace
    rs = load_run_suite()
    levels, thresholds = [1, 2, 3], [1.0, 1.2, 2.0]
    base = [50.0, 50.0, 50.0]

    def world(drops):
        """abl1_noskill losing drops[level] points at every seed (+-1), every other cell unmoved."""
        effects = {}
        for l in levels + [0]:
            for p in thresholds:
                d = drops.get(l, 0.0) if p == 1.0 else 0.0
                effects[("abl1_noskill", l, p)] = stats.Effect([50.0 - d - 1, 50.0 - d, 50.0 - d + 1], base, "k")
        return SimpleNamespace(name="skills", factors=["abl1_noskill"], effects=effects)

    ctx = SimpleNamespace(baseline="main", levels=levels, thresholds=thresholds)
    (text, ok, figures), = rs.claims_of(ctx, world({1: 5.0, 2: 10.0, 3: 20.0}))
    assert text.startswith("Abl.1") and ok, figures
    assert figures.startswith("L1 -5.0 [-6.0, -4.0] t[-7.5, -2.5] detected")
    # A drop of 1 point at L1 is within the t interval (+-2.5): not detected, so not reproduced.
    (_, ok, figures), = rs.claims_of(ctx, world({1: 1.0, 2: 10.0, 3: 20.0}))
    assert not ok and figures.startswith("L1 -1.0 [-2.0, +0.0] t[-3.5, +1.5], L2"), figures
    # Detected everywhere but shrinking with the level: not the paper's claim.
    (_, ok, _), = rs.claims_of(ctx, world({1: 20.0, 2: 10.0, 3: 5.0}))
    assert not ok
    summary = rs.detection_summary(world({1: 5.0, 2: 10.0, 3: 20.0}))
    assert summary.startswith("No effect detected in 9 of 12 row x cell comparisons; 3 detected.")
    assert "positive control: 3 of the skill factors' (abl1_noskill) 12 row x cell intervals" in summary
