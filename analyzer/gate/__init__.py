"""The CI gate (docs/ci.md): per-step samples of two runs compared (`compare`), baseline
files (`baseline`, `baseruns`), the statistics (`stats`) and the machine factor
(`machinefactor`). Above the analysis; below render and the command line."""
