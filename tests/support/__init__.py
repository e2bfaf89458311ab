"""Helpers shared by the tests: paths, trace builders, simulated GPU activity, fake peers."""
