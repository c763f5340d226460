"""Build hook for the optional native StepStats decoder (metadata lives in pyproject.toml).

The extension is optional: where it cannot be compiled, runlens installs anyway and
ingest falls back to its protobuf walk (same frames, ~20x slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "analyzer._stepstats",
            sources=["analyzer/_stepstats.c"],
            optional=True,
            extra_compile_args=["-O3", "-std=c99"],
        )
    ]
)
