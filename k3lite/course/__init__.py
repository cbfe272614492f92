"""Helpers the chapters use to teach, not to compute: plots, widgets, diagrams, source listings,
checkers, the run profile (CPU or GPU sizes), and the parameter, cache and FLOP accounting."""
