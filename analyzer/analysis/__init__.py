"""What runlens derives from a Run: per-node numbers with tfprof's rules (`nodestats`), the
four views (`views`, `view_options`, `treeorder`, `codepaths`), the dataflow graph and its
critical path (`graph`), and the steps an analysis covers (`steps`, `warmup`, `stepselect`).
Above the core (model, load, products), below the outputs and the gate."""
