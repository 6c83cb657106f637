"""The production workload: an SGLang server driven over HTTP."""
