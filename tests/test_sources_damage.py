"""Damaged copies of real profiles say how they were damaged (analyzer/sources/damage.py).

Seen on public files: openxla/xprof's xprof/convert/test_xplanes/tpu_inference_2.xplane.pb
is binary decoded as text and re-encoded as UTF-8 (every invalid byte became EF BF BD), and
read as "truncated field". The same damage is made here, deterministically, to our real
fixtures of each binary kind; a Git LFS pointer stands in for a file cloned without LFS.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runlens.analyzer.sources import damage
from tests.conftest import ROOT, run_cli

FIXTURES = ROOT / "fixtures"
BINARY = {  # a real fixture of each binary kind, and the name a user's copy would have
    "xplane": (FIXTURES / "xplane/keras_fit/plugins/profile/run1/worker0.xplane.pb",
               "host.xplane.pb"),
    "tfprof": (FIXTURES / "sources/tfprof/profile_4", "profile_4"),
    "runmetadata": (FIXTURES / "sources/runmetadata/run_metadata_1.pb", "run_metadata_1.pb"),
}
LFS = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 9\n"


def _text_mangled(raw: bytes) -> bytes:
    return raw.decode("utf-8", errors="replace").encode("utf-8")


@pytest.mark.parametrize("kind", sorted(BINARY))
def test_a_binary_profile_decoded_as_text_says_so(kind, tmp_path):
    source, name = BINARY[kind]
    raw = source.read_bytes()
    assert damage.hint(raw) == ""  # the intact file: no false alarm
    bad = tmp_path / name
    bad.write_bytes(_text_mangled(raw))
    result = run_cli(["summary", bad, "--no-cache"], expect_exit=2)
    assert result.output.count("\n") == 1 and str(bad) in result.output
    assert "decoded as text" in result.output, result.output


@pytest.mark.parametrize("name", ["host.xplane.pb", "profile_4", "run_metadata_1.pb",
                                  "timeline-3.json"])
def test_a_git_lfs_pointer_says_so(name, tmp_path):
    bad = tmp_path / name
    bad.write_bytes(LFS)
    result = run_cli(["summary", bad, "--no-cache"], expect_exit=2)
    assert result.output.count("\n") == 1 and str(bad) in result.output
    assert "Git LFS pointer" in result.output, result.output


def test_no_committed_binary_fixture_looks_damaged():
    """The hint is only added after a parse failed; still, no real file should trip it."""
    files = [p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix in ("", ".pb")]
    assert len(files) > 20
    assert [p for p in files if damage.hint(Path(p).read_bytes()[:65536])] == []


@pytest.mark.parametrize(("plain", "name", "kind"), [
    (FIXTURES / "sources/profilerhook/timeline-3.json", "timeline-3.json.gz", "timeline"),
    (FIXTURES / "tracejson/keras_fit/plugins/profile/run1/worker0.trace.json.gz",
     "host.trace.json.gz", "tracejson"),
])
def test_a_damaged_gzip_is_one_line_not_an_internal_error(plain, name, kind, tmp_path):
    """Bytes flipped inside the deflate stream raise zlib.error (not an OSError): it
    was exit 3 ("internal error") for .json.gz timelines and trace viewer files."""
    import gzip

    raw = plain.read_bytes()
    packed = raw if plain.suffix == ".gz" else gzip.compress(raw, mtime=0)
    for at in range(len(packed) // 4, len(packed) - 16, len(packed) // 9):
        bad = tmp_path / str(at) / name
        bad.parent.mkdir()
        data = bytearray(packed)
        data[at] ^= 0xFF
        bad.write_bytes(bytes(data))
        for args in (["summary", bad], ["ops", "--source", kind, bad]):
            result = run_cli([*args, "--no-cache"], expect_exit=2)
            assert result.output.count("\n") == 1 and str(bad) in result.output
