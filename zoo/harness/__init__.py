"""The harness: one run -> Measurement, device probes, GPU rooflines, result files."""
