"""Baseline files are validated before they can decide a CI run (issue 17, point 6).

A valid baseline saved from a real capture (fixtures/compare/base_a) is damaged in
seeded, generated ways; every damaged file must exit 2 with one line naming the file,
and none may turn the gate off ("result: OK" against a regressed run).
"""

from __future__ import annotations

import copy
import json
import random
import re

import pytest

from runlens.analyzer.errors import InputFileError
from runlens.analyzer.gate.baseline import load_baseline, save_baseline
from runlens.analyzer.gate.compare import samples_from_run
from runlens.analyzer.load import load_run
from tests.conftest import COMPARE, run_cli


@pytest.fixture(scope="module")
def good_doc(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("baseline") / "good.json"
    save_baseline(samples_from_run(load_run(COMPARE / "base_a", use_cache=False), "base_a"),
                  path)
    return json.loads(path.read_text())


# Each damage takes (doc, rng) and returns the text of a bad baseline file.
def _set(path: list, value):
    def damage(doc, rng):
        target = doc
        for key in path[:-1]:
            target = target[key(target, rng) if callable(key) else key]
        last = path[-1]
        target[last if not callable(last) else last(target, rng)] = value
        return json.dumps(doc)
    return damage


def _index(items, rng):
    """A random position in the list reached so far on the path."""
    return rng.randrange(len(items))


def _raw(text_fn):
    return lambda doc, rng: text_fn(json.dumps(doc), rng)


def _first_value(text: str, token: str) -> str:
    """The first value of the first metric replaced by a raw JSON token."""
    return re.sub(r'("values_us": \[)[^,\]]+', r"\g<1>" + token, text, count=1)


DAMAGES = {
    "schema as a string": _set(["schema"], "1"),
    "schema as a bool": _set(["schema"], True),
    "unknown newer schema": _set(["schema"], 99),
    "unknown older schema": _set(["schema"], 0),
    "scope_depth as a string": _set(["scope_depth"], "abc"),
    "scope_depth too big": _set(["scope_depth"], 10**30),
    "node medians as a list": _set(["node_medians_us"], [1.0, 2.0]),
    "node median as a string": _set(["node_medians_us", "x/y"], "12"),
    "node median negative": _set(["node_medians_us", "x/y"], -1.0),
    "node op types as a list": _set(["node_op_types"], ["MatMul"]),
    "node op type a number": _set(["node_op_types", lambda t, rng: next(iter(t))], 5),
    "metric name null": _set(["metrics", _index, "name"], None),
    "metric name empty": _set(["metrics", _index, "name"], ""),
    "metric kind unknown": _set(["metrics", _index, "kind"], "layer"),
    "values as a string": _set(["metrics", _index, "values_us"], "1,2,3"),
    "values too short": _set(["metrics", _index, "values_us"], [1.0]),
    "value as a string": _set(["metrics", _index, "values_us", _index], "5"),
    "value null": _set(["metrics", _index, "values_us", _index], None),
    "value too big an integer": _set(["metrics", _index, "values_us", _index],
                                     10**400),
    "value negative": _set(["metrics", _index, "values_us", _index], -3.0),
    "metric not an object": _set(["metrics", _index], 7),
    "empty metrics": _set(["metrics"], []),
    "empty samples": _set(["samples"], []),
    "sample id a number": _set(["samples", _index], 4),
    "meta a list": _set(["meta"], [1]),
    "value NaN": _raw(lambda t, rng: _first_value(t, "NaN")),
    "value Infinity": _raw(lambda t, rng: _first_value(t, "Infinity")),
    "value -Infinity": _raw(lambda t, rng: _first_value(t, "-Infinity")),
    "node median NaN": _raw(lambda t, rng: t.replace('"node_medians_us": {',
                                                     '"node_medians_us": {"nan/node": NaN, ', 1)),
    "value 1e999": _raw(lambda t, rng: _first_value(t, "1e999")),
    "deeply nested": _raw(lambda t, rng: t[:-1] + ', "meta2": ' + "[" * 100_000
                          + "]" * 100_000 + "}"),
    "huge integer literal": _raw(lambda t, rng: t.replace('"scope_depth": 3',
                                                          '"scope_depth": ' + "9" * 5000)),
    "truncated": _raw(lambda t, rng: t[: rng.randrange(10, len(t) - 1)]),
    "not an object": _raw(lambda t, rng: "[" + t + "]"),
}


EXPECT = {"value NaN": "NaN is not a number", "value Infinity": "Infinity is not a number",
          "value -Infinity": "-Infinity is not a number", "value 1e999": "is not a time",
          "deeply nested": "nested too deeply", "empty metrics": "metrics must be a non-empty",
          "scope_depth as a string": "scope_depth must be an integer",
          "unknown newer schema": "upgrade runlens", "metric name null": ".name must be"}


def _cases(seed: int = 17, per_damage: int = 2):
    rng = random.Random(seed)
    for name in DAMAGES:
        for k in range(per_damage):
            yield pytest.param(name, rng.randrange(10**6), id=f"{name}-{k}")


@pytest.mark.parametrize("damage, seed", list(_cases()))
def test_damaged_baselines_are_refused(good_doc, tmp_path, damage, seed):
    bad = tmp_path / "baseline.json"
    bad.write_text(DAMAGES[damage](copy.deepcopy(good_doc), random.Random(seed)))
    with pytest.raises(InputFileError) as err:
        load_baseline(bad)
    message = str(err.value)
    assert message.startswith(f"{bad}: ") and "\n" not in message
    assert EXPECT.get(damage, "") in message


@pytest.mark.parametrize("damage", ["value NaN", "value Infinity", "empty metrics",
                                    "deeply nested", "scope_depth as a string",
                                    "node medians as a list", "unknown newer schema"])
def test_cli_refuses_them_with_exit_2_never_ok(good_doc, tmp_path, damage):
    bad = tmp_path / "baseline.json"
    bad.write_text(DAMAGES[damage](copy.deepcopy(good_doc), random.Random(1)))
    out = run_cli(["compare", bad, COMPARE / "slow_dense2", "--no-cache"],
                  expect_exit=2).output
    assert len(out.strip().splitlines()) == 1 and str(bad) in out
    assert "result: OK" not in out


def test_the_good_baseline_still_loads_and_gates(good_doc, tmp_path):
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(good_doc))
    assert load_baseline(path).n_samples == len(good_doc["samples"])
    run_cli(["compare", path, COMPARE / "slow_dense2", "--no-cache"], expect_exit=1)


def test_json_report_never_holds_nan_or_infinity(tmp_path):
    # A metric that is 0 in every base step has no percent change (division by zero):
    # it must be null in the JSON report, which strict parsers must accept.
    out = run_cli(["compare", COMPARE / "base_a", COMPARE / "slow_dense2", "--no-cache",
                   "--format", "json"], expect_exit=1).stdout

    def refuse(token):
        raise AssertionError(f"non-JSON token {token}")

    doc = json.loads(out, parse_constant=refuse)
    assert any(m["change_pct"] is None for m in doc["metrics"])
