"""Build hook for the optional native extensions (metadata lives in pyproject.toml).

They are built as modules of runlens.analyzer (installed under runlens/analyzer/; in an
editable install next to their sources in analyzer/, which is runlens.analyzer).

All are optional: where they cannot be compiled, runlens installs anyway. Without the
StepStats decoder, ingest falls back to its protobuf walk (same frames, ~20x slower);
without the JSON row renderer, the timeline is rendered by polars (same bytes, slower);
without the XSpace decoder, xplane files are walked with protobuf (same frames, slower);
without the ProfileProto run reader, tfprof profiles' runs are walked with protobuf.
"""

from glob import glob

from setuptools import Extension, setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    """The repository root is the package runlens (pyproject.toml's package-dir), and
    this file sits in it: it is the build's script, not a module of runlens."""

    def find_package_modules(self, package, package_dir):  # type: ignore[no-untyped-def]
        return [m for m in super().find_package_modules(package, package_dir)
                if not (package == "runlens" and m[1] == "setup")]


setup(
    cmdclass={"build_py": BuildPy},
    ext_modules=[
        Extension(
            "runlens.analyzer._stepstats",
            sources=["analyzer/_stepstats.c"],
            # its parts, #included into one translation unit: rebuilt when one changes,
            # and shipped in the sdist
            depends=sorted(glob("analyzer/stepstats_c/*.h")),
            optional=True,
            extra_compile_args=["-O3", "-std=c99"],
        ),
        Extension(
            "runlens.analyzer._xplane",
            sources=["analyzer/_xplane.c"],
            depends=sorted(glob("analyzer/xplane_c/*.h")),  # its wire reader, #included
            optional=True,
            extra_compile_args=["-O3", "-std=c99"],
        ),
        Extension(
            "runlens.analyzer._tfprof",
            sources=["analyzer/_tfprof.c"],
            optional=True,
            extra_compile_args=["-O3", "-std=c99"],
        ),
        Extension(
            "runlens.analyzer._jsonrows",
            sources=["analyzer/timeline/_jsonrows.c"],
            optional=True,
            extra_compile_args=["-O3", "-std=c99"],
        ),
    ]
)
