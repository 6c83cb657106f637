"""The simulator: a stand-in for SGLang's server whose timing is a pure function of the
settings (cost_model.py), never a measurement of SGLang. Used by the tests, the benchmarks
and demos that need no GPU (``python -m simulator.sglang_server --help``); ``runs.py`` runs
servetune against it as a user does."""
