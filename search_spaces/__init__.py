"""What to try: the knob catalogue (knobs), search spaces and shipped presets (space).

Nothing is imported here: a process that needs only the catalogue (the stand-in server and
its rank processes, started hundreds of times in a campaign) does not pay for pydantic and
YAML through the space module."""
