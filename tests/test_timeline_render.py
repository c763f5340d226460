"""The timeline's JSON rows (analyzer/timeline/jsonrows.py): the C renderer
(analyzer/timeline/_jsonrows.c) and the polars fallback give the same bytes, on unit cases
and on whole traces."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from runlens.analyzer.load import load_run
from runlens.analyzer.render.chrome_trace import write_trace
from runlens.analyzer.timeline import TimelineOptions, build_trace, jsonrows
from runlens.analyzer.timeline.jsonfrag import jstr
from runlens.analyzer.timeline.jsonrows import Int, Lists, Rows, Text, Texts
from tests.conftest import FIXTURE_NAMES, FIXTURES

native = pytest.mark.skipif(jsonrows.native is None, reason="runlens.analyzer._jsonrows not built")

EDGE = [0, -1, 1, 9, 10, 99, 100, -100, 12345678901, -(2**63), 2**63 - 1, 10**18, -(10**18)]
TEXTS = ["", '"a\\"b"', "é ✓ 😀", ",", "x" * 1000, None]


def _rows() -> Rows:
    n = len(EDGE)
    frame = pl.DataFrame({"v": EDGE, "w": list(reversed(EDGE)),
                          "t": [i % len(TEXTS) for i in range(n)], "u": [0] * n},
                         schema={"v": pl.Int64, "w": pl.Int64, "t": pl.Int64, "u": pl.UInt32})
    texts = Texts(TEXTS)
    return Rows(frame, ['{"a":', Int("v"), ',"b":', Text("t", texts), Int("w"), "", Int("u"),
                        Text("u", texts), "}"])


def _both(rows: Rows, start: int, stop: int, prefix: str = ",", suffix: str = "\n"
          ) -> tuple[bytes, bytes]:
    return (rows.render(start, stop, prefix, suffix),
            rows.render(start, stop, prefix, suffix, use_native=False))


def test_the_renderer_is_built():
    assert jsonrows.native is not None, (
        "analyzer/timeline/_jsonrows.c was not compiled: install gcc and the Python headers, then "
        "reinstall (timelines are still written without it, about twice as slowly)")


@native
def test_native_and_polars_rows_are_the_same_bytes():
    rows = _rows()
    for start, stop in [(0, len(EDGE)), (0, 1), (3, 7), (5, 5), (12, 99)]:
        a, b = _both(rows, start, stop)
        assert a == b
    a, b = _both(rows, 0, len(EDGE), "", "")
    assert a == b
    text = rows.render(0, len(EDGE), "", "\n").decode()
    for line, v in zip(text.splitlines(), EDGE, strict=True):
        assert line.startswith(f'{{"a":{v},"b":')


def test_rows_in_chunks():
    rows = _rows()
    chunks = list(rows.chunks(4, first_prefix=""))
    assert [n for n, _ in chunks] == [1, 4, 4, 4]
    text = b"".join(t for _, t in chunks).decode()
    assert text.startswith('{"a":0,') and text.count("\n,{") == len(EDGE) - 1
    assert list(Rows(pl.DataFrame({"v": []}, schema={"v": pl.Int64}), [Int("v")]).chunks(3)) == []


def test_jstr_texts_are_json():
    values = ["plain", 'q"uote', "back\\slash", "nl\n\ttab\x01", "ü"]
    texts = Texts(pl.select(jstr(pl.lit(pl.Series(values)))).to_series())
    rows = Rows(pl.DataFrame({"i": range(len(values))}), ["[", Text("i", texts), "]"])
    for use_native in ([True, False] if jsonrows.native else [False]):
        out = rows.render(0, len(values), "", "\n", use_native=use_native).decode()
        assert [json.loads(line)[0] for line in out.splitlines()] == values


@native
def test_native_rejects_bad_input():
    render = jsonrows.native.render
    blob, offsets = Texts(["a", "b"]).packed()
    with pytest.raises(IndexError):
        render([(2, np.array([0, 2], np.int64), blob, offsets)], 0, 2, b"", b"")
    with pytest.raises(ValueError):
        render([(1, np.array([0], np.int64))], 0, 2, b"", b"")
    with pytest.raises(TypeError):
        render([(1, np.array([0], np.int32))], 0, 1, b"", b"")
    with pytest.raises(ValueError):
        render([(2, np.array([0], np.int64), b"x", np.array([0, 5], np.int64))], 0, 1,
               b"", b"")
    with pytest.raises(TypeError):
        render([(4, b"")], 0, 1, b"", b"")
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    with pytest.raises(IndexError):  # more items than there are
        render([(3, i64(0, 5), i64(0), blob, offsets, i64(0, 0), i64())], 0, 1, b"", b"")
    with pytest.raises(ValueError):  # dims_first does not end at the dims' size
        render([(3, i64(0, 1), i64(0), blob, offsets, i64(0, 1), i64())], 0, 1, b"", b"")
    with pytest.raises(ValueError):  # an item past the texts
        render([(3, i64(0, 1), i64(2), blob, offsets, i64(0, 0), i64())], 0, 1, b"", b"")
    assert render([(3, i64(0, 1), i64(1), blob, offsets, i64(0, 1), i64(-7))], 0, 1, b"",
                  b"") == b'["b[-7]"]'


def test_output_lists():
    # rows: 0 -> two outputs, 1 -> none, 2 -> null dtype, null shape, [] and a null dim
    texts = Texts(["float", 'q\\"x'])
    lists = Lists(first=np.array([0, 2, 2, 6]), item=np.array([0, 1, -1, -1, 0, 1]),
                  texts=texts, dims_first=np.array([0, 2, 2, 3, 3, 3, 4]),
                  dims=np.array([32, -1, 7, 5]))
    rows = Rows(pl.DataFrame({"x": [0, 0, 0]}), ['{"o":', lists, "}"])
    expect = ['{"o":["float[32,-1]","q\\"x[]"]}', '{"o":[]}',
              '{"o":[null,null,"float[]","q\\"x[5]"]}']
    for use_native in ([True, False] if jsonrows.native else [False]):
        out = rows.render(0, 3, "", "\n", use_native=use_native).decode()
        assert out.splitlines() == expect
        assert rows.render(1, 3, "", "\n", use_native=use_native).decode().splitlines() == \
            expect[1:]
    assert json.loads(expect[0])["o"] == ["float[32,-1]", 'q"x[]']


@native
@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_whole_traces_are_the_same_bytes_without_the_c_renderer(name, tmp_path, monkeypatch):
    run = load_run(FIXTURES / name, use_cache=False)
    trace = build_trace(run, TimelineOptions(tuple(run.steps)))
    write_trace(trace, tmp_path / "c.json")
    monkeypatch.setattr(jsonrows, "native", None)
    write_trace(trace, tmp_path / "polars.json")  # the same events, rendered by polars
    write_trace(build_trace(run, TimelineOptions(tuple(run.steps))), tmp_path / "built.json")
    c = (tmp_path / "c.json").read_bytes()
    assert c == (tmp_path / "polars.json").read_bytes()
    assert c == (tmp_path / "built.json").read_bytes()  # built without it: outputs as texts
    json.loads(c)



def test_a_failed_write_is_raised_not_lost(tmp_path):
    """The trace is written in a background thread (chrome_trace._Writer): a write that
    fails after the first bytes (a file-size limit: EFBIG) reaches the command as one line
    and exit 2, not lost in the thread with a truncated file and exit 0."""
    import subprocess
    import sys

    from tests.conftest import FIXTURES, ROOT

    code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000)); "
            "sys.argv = ['analyze', 'timeline', sys.argv[1], '-o', sys.argv[2], "
            "'--all-steps']; from runlens import cli; cli.main()")
    out = tmp_path / "t.json"
    proc = subprocess.run([sys.executable, "-c", code, str(FIXTURES / "rnn_while"), str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [x for x in proc.stderr.splitlines() if x.startswith("analyze: error")]
    assert len(errors) == 1 and "File too large" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()  # written atomically: no truncated trace left
