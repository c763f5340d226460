"""runlens: an offline profiler and advisor for TensorFlow and JAX training runs.

The repository root is the package `runlens` (pyproject.toml maps it: `package-dir`),
so the tree on disk is the package: analyzer/ is `runlens.analyzer`, checkers/ is
`runlens.checkers`, cli.py is `runlens.cli`; inside them every import is relative, and
outside (tests, benchmarks, fixture scripts, users) the installed name is used
(`from runlens.analyzer.load import load_run`). The command line is `analyze`
(runlens.cli:run, which runs the click group `main`). Nothing is imported here: `analyze --help` and
`import runlens.analyzer.x` load only what they use.
"""
