"""The harness: one run of phases -> one Row, device probes, GPU rooflines, result files."""
