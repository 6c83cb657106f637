"""The engine: Ray Tune trials over a search space, results, exports, the CLI."""
