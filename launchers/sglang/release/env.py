"""SGLang's env registry as it parses a value (``sglang.srt.environ``, read in SGLang 0.5.23),
for the places that read a variable without running SGLang (the proxy's dispatch). The resident
reader (``launchers/sglang/parser_server.py``) asks the installed registry itself.

``EnvBool`` takes true/1/yes/y and false/0/no/n in any case, ``EnvInt`` an integer; a bad value
raises ValueError naming the variable.
"""

from __future__ import annotations

_TRUE, _FALSE = ("true", "1", "yes", "y"), ("false", "0", "no", "n")


def parse_bool(name: str, value: object) -> bool:
    """SGLang's EnvBool parsing of one value (a bool or int passes as its text)."""
    text = str(int(value) if isinstance(value, bool) else value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{name}={value!r} is not a boolean SGLang accepts (true/1/yes/y, "
                     "false/0/no/n)")


def parse_int(name: str, value: object) -> int:
    """SGLang's EnvInt parsing of one value."""
    if isinstance(value, bool):
        raise ValueError(f"{name}={value!r} is not an integer")
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None
