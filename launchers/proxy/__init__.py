"""The verify-pass proxy: a tensor-parallel decoder stack timed under CUDA graphs, no server."""
