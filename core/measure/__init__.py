"""Measuring a serving deployment: a streaming load generator, per-step statistics with the field's keys,
results saved in the run directory, and comparisons of layouts (per GPU, Pareto fronts).

Pure client side: this package talks HTTP to an OpenAI-compatible router and reads/writes result files;
it never starts or stops processes (cli/ and tui/ compose it with run/).
"""
