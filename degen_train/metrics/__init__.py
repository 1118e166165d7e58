"""Degeneration instruments: isotropy metrics (pure functions), transforms, STS/WiC probes, generation measures and
the verdict rule's noise model. Each is imported from its own module (``degen_train.metrics.isotropy``): the package
itself imports nothing, so a command that only reads numbers (degen-report's verdicts) loads no torch."""
