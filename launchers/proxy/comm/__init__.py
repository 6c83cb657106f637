"""The proxy's collectives: which path SGLang would give each one (``dispatch``, pure: SGLang's
rules from ``launchers/sglang/release``, read with ``settings``) and the torch code that runs
it on a rank (``collectives``); or, in native mode, the installed SGLang's own distributed
layer (``native``: the mode, decided in the plan with ``native_probe``; ``native_group``:
SGLang's GroupCoordinator on a rank)."""
