"""The experiment folder as typed records: the one place that reads and writes an
experiment's files (``files`` names them). ``Experiment.load(dir)`` reads a folder once into
frozen records; the writers (the recorder, the confirm stage, the end of a run) write through
the same models, so what is read and what is written cannot drift. Every record carries a
``schema_version`` (absent in older files: version 1). Imports only the base rooms
(``tuner.spec``, ``tuner.limits``, ``tuner.stats``, launchers/, search_spaces/)."""
