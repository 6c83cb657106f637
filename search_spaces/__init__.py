"""What to try: the knob catalogue, search spaces and shipped presets."""

from search_spaces.knobs import CATALOGUE, Knob, KnobKind, Value, check_config, expand_config
from search_spaces.space import SearchSpace, SpaceError, Stage, load, load_preset, preset_names

__all__ = [
    "CATALOGUE", "Knob", "KnobKind", "SearchSpace", "SpaceError", "Stage", "Value",
    "check_config", "expand_config", "load", "load_preset", "preset_names",
]
