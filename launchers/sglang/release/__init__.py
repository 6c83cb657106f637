"""What servetune knows about SGLang's releases without running SGLang: its rules re-read
from a release's source, as data and pure functions, each naming the release it was read from.

- ``speculative``: the speculative shape (a partial shape never starts; steps*topk+1 draft
  tokens at most; topk 1 runs steps + 1 draft tokens);
- ``combinations``: allreduce and decode-graph settings that have no effect beside another;
- ``env``: the env registry's value parsing (``EnvBool``, ``EnvInt``) where SGLang is not run;
- ``allreduce_settings``: the flags and SGLANG_* variables the allreduce dispatch reads;
- ``allreduce``: which path a tensor-parallel all-reduce and the logits all-gather take;
- ``v2_tables``: custom allreduce v2's size thresholds;
- ``logs``: SGLang's log-line formats (a line, ready, the lines that name a failure, where it
  checks its own arguments).

This room imports nothing of servetune: it is the floor below launchers/ (with search_spaces/),
so search_spaces/ (constraints, resolved twins) and the proxy (its dispatch) read the same rules
instead of holding copies. The installed SGLang is asked first wherever it can be (the reader
in ``launchers/sglang``: its parser, its env registry, its ``ServerArgs`` checks); these rules
are the fallback and what a search decides before any launch.
"""
