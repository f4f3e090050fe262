"""One result vocabulary across ``fairvision.stats`` (docs/METHODS.md §4).

Every public test function returns an object with ``statistic`` and ``pvalue``
(or, for a family of tests, a table with those columns); one chi-square, one
cluster bootstrap, one intersection builder; one default correction.
"""

import inspect
import re
import typing
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import fairvision.stats as S
from fairvision.stats.corrections import DEFAULT_CORRECTION
from fairvision.stats.results import TestResult

SRC = Path(__file__).resolve().parents[1] / "src" / "fairvision"
RNG = np.random.default_rng(0)
_X = RNG.normal(size=60)
_G = np.repeat(["a", "b", "c"], 20)
_TABLE = np.array([[12, 5, 9], [3, 14, 8]])


def _parity():
    q = np.repeat(["x", "y"], 30)
    r = np.where(RNG.random(60) < 0.5, "x", "y")
    cat = np.array(["x"] * 50 + ["y"] * 50)
    return S.parity_test(q, r, cat)


# one example call per public test function; a new test function must be added here
EXAMPLES = {
    "adjust_group_tests": lambda: S.adjust_group_tests(pd.DataFrame({
        "attribute": ["g", "g", "h", "h", "h"], "group": ["a", "b", "x", "y", "z"], "n_samples": [5, 5, 3, 3, 3],
        "statistic": [4.0, 4.0, 1.0, 3.0, 0.2], "pvalue": [0.01, 0.01, 0.3, 0.04, 0.6]}), [], "holm"),
    "chi2_test": lambda: S.chi2_test(_TABLE),
    "chi2_independence": lambda: S.chi2_independence(pd.DataFrame({"a": _G, "b": np.tile(["u", "v"], 30)}), "a", "b"),
    "pairwise_mannwhitney": lambda: S.pairwise_mannwhitney(_X, _G),
    "kruskal_test": lambda: S.kruskal_test(_X, _G),
    "van_elteren": lambda: S.van_elteren(_X[:30], _X[30:], np.repeat([0, 1], 15), np.repeat([0, 1], 15)),
    "cochran_mantel_haenszel": lambda: S.cochran_mantel_haenszel(np.array([[[10, 5], [4, 11]], [[8, 6], [5, 9]]])),
    "cmh_from_samples": lambda: S.cmh_from_samples(
        np.tile([0, 1, 1, 0], 15), np.repeat(["x", "y"], 30), np.tile(["s1", "s2", "s3"], 20), x="x", y="y"),
    "mcnemar": lambda: S.mcnemar(np.tile([0, 1, 1, 0, 1], 12).astype(bool), np.tile([1, 1, 0, 0, 1], 12).astype(bool)),
    "clustered_mcnemar": lambda: S.clustered_mcnemar(np.tile([1.0, -1, 0, 1], 15), np.repeat([0, 1], 30),
                                                     np.repeat(np.arange(20), 3), 2),
    "parity_test": _parity,
    "contrast_tests": lambda: S.contrast_tests(pd.DataFrame(
        [[20, 10], [12, 18], [50, 50]], index=pd.Index(["x", "y", "catalog"], name="query"),
        columns=pd.Index(["x", "y"], name="result")), n_queries=pd.Series({"x": 5, "y": 5})),
    "signed_rank_test": lambda: S.signed_rank_test(_X[:20]),
    "flip_test": lambda: S.flip_test(7, 2),
    "change_test": lambda: S.change_test(np.tile([1.0, -1.0, 1.0, 0.0], 5), "sign"),
    "metamorphic_scores": lambda: S.metamorphic_scores(pd.DataFrame(
        {"change": _X, "word": np.tile(["w1", "w2", "w3"], 20), "seed_id": np.repeat(np.arange(20), 3)}),
        topic=None, n_boot=50).words,
    "paired_difference_test": lambda: S.paired_difference_test(0.3, 0.1, _X[:30] * 0.1 + 0.3, _X[30:] * 0.1 + 0.1),
    "paired_od_tests": lambda: S.paired_od_tests(
        np.tile(["u", "v"], 30), {"m1": np.tile(["u", "v", "u"], 20), "m2": np.tile(["u", "v"], 30)}, _G, n_boot=50),
    "signed_rank": lambda: S.signed_rank(_X[:30], np.repeat(np.arange(15), 2)),
    "paired_differences": lambda: S.paired_differences(_X[:30, None], _X[30:, None], np.repeat(np.arange(15), 2),
                                                       [("all", "all", np.arange(30))], ["m"], n_boot=50),
    "group_heterogeneity": lambda: S.group_heterogeneity(_X[:, None], np.repeat(np.arange(30), 2),
                                                         [("g", "a", np.arange(30)), ("g", "b", np.arange(30, 60))],
                                                         ["m"], min_subjects=5),
    "position_bias": lambda: S.position_bias(_X > 0),
    "rank_correlation": lambda: S.rank_correlation(_X[:30], _X[30:]),
    "compare_elo_groups": lambda: S.compare_elo_groups(pd.Series(_X, index=[f"i{i}" for i in range(60)]),
                                                       pd.Series(_G, index=[f"i{i}" for i in range(60)])),
}

_TEST_NAME = re.compile(r"(_test$|^test_|mannwhitney|elteren|mantel|mcnemar|chi2_|_tests$|compare_.*groups)")


def _returns_test_result(fn) -> bool:
    try:
        hint = typing.get_type_hints(fn).get("return")
    except Exception:
        return False
    return isinstance(hint, type) and issubclass(hint, TestResult)


def test_every_public_test_function_has_an_example():
    tests = {n for n in S.__all__ if callable(getattr(S, n)) and not inspect.isclass(getattr(S, n))
             and (_TEST_NAME.search(n) or _returns_test_result(getattr(S, n)))}
    assert tests <= set(EXAMPLES), f"add an example for {sorted(tests - set(EXAMPLES))}"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_public_test_functions_return_statistic_and_pvalue(name):
    res = EXAMPLES[name]()
    if isinstance(res, pd.DataFrame):
        assert {"statistic", "pvalue"} <= set(res.columns), f"{name}: columns {list(res.columns)}"
        assert not {"p_value", "p_adj", "p_adjusted", "dof"} & set(res.columns), f"{name}: old column names"
    else:
        assert np.isfinite(float(res.statistic)) or np.isnan(float(res.statistic))
        assert 0.0 <= float(res.pvalue) <= 1.0, f"{name}: pvalue {res.pvalue}"
        assert not hasattr(res, "p_value") and not hasattr(res, "dof"), f"{name}: old field names"


def _functions_with_param(name: str):
    import importlib
    import pkgutil

    import fairvision

    for info in pkgutil.walk_packages(fairvision.__path__, "fairvision."):
        if info.name.startswith(("fairvision.cli", "fairvision.retrieval", "fairvision.vision",
                                 "fairvision.__main__")):
            continue
        mod = importlib.import_module(info.name)
        for fname, fn in vars(mod).items():
            if inspect.isfunction(fn) and fn.__module__ == mod.__name__ and not fname.startswith("_"):
                p = inspect.signature(fn).parameters.get(name)
                if p is not None:
                    yield f"{mod.__name__}.{fname}", p


def test_one_default_correction_everywhere():
    seen = dict(_functions_with_param("correction"))
    assert seen, "no function takes a correction"
    for where, p in seen.items():
        if p.default is inspect.Parameter.empty:
            continue
        assert p.default == DEFAULT_CORRECTION, f"{where}: correction defaults to {p.default!r}"


def test_one_name_for_level_and_seed():
    import importlib
    import pkgutil

    import fairvision

    for info in pkgutil.walk_packages(fairvision.__path__, "fairvision."):
        if info.name.startswith(("fairvision.cli", "fairvision.retrieval", "fairvision.__main__")):
            continue
        mod = importlib.import_module(info.name)
        for fname, fn in vars(mod).items():
            if inspect.isfunction(fn) and fn.__module__ == mod.__name__ and not fname.startswith("_"):
                params = inspect.signature(fn).parameters
                for old in ("ci_level", "confidence", "random_state", "yates"):
                    assert old not in params, f"{mod.__name__}.{fname} takes {old!r}"


def _src_lines():
    for p in sorted(SRC.rglob("*.py")):
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            yield p.relative_to(SRC), i, line


def test_one_chi_square_one_bootstrap_one_intersection_builder():
    chi = [f"{p}:{i}" for p, i, ln in _src_lines() if "chi2_contingency(" in ln and not ln.lstrip().startswith("#")]
    assert not chi, f"chi-square outside stats/chisquare.py: {chi}"
    # Not cluster bootstraps, so allowed elsewhere: the power analysis simulates data under an
    # alternative, and the skin estimator resamples pixels within one image for its stability measure.
    not_cluster = {"stats/resample.py", "stats/power.py", "skin/thong.py"}
    draws = [f"{p}:{i}" for p, i, ln in _src_lines()
             if re.search(r"\.multinomial\(", ln) and str(p) not in not_cluster]
    assert not draws, f"bootstrap draws outside stats/resample.py: {draws}"
    builders = [f"{p}:{i}" for p, i, ln in _src_lines()
                if re.search(r"(itertools\.)?combinations\(", ln) and str(p).startswith("audits")]
    assert not builders, f"intersections built in audits/: {builders}"
