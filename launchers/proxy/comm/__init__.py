"""The proxy's collectives: which path SGLang would give each one (``dispatch``, pure, with
``settings`` and ``v2_tables``) and the torch code that runs it on a rank (``collectives``)."""
