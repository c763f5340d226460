"""runlens: an offline profiler and advisor for TensorFlow (and JAX) training runs.

The one top-level name runlens installs. In the repository, analyzer/, checkers/, cli.py
and cli_options.py stay at the top (the layout the product card fixes); this package
links to them (runlens/analyzer -> ../analyzer, ...), so the source tree imports as
`runlens.analyzer` without installing, and a wheel copies the real files under runlens/.
Import the engine by its full name (`from runlens.analyzer.load import load_run`); the
command line is `analyze` (runlens.cli:main). Nothing is imported here: `analyze --help`
and `import runlens.analyzer.x` load only what they use.
"""
