"""The experiment folder's file names and writers, kept here for the modules that import them
from output (the searchers write rejected.jsonl and stages.json): they live in
``tuner.record.files``, the one place that reads and writes an experiment's files."""

from tuner.record.files import (
    BEST_DIR,
    BEST_JSON,
    BROKEN_JSON,
    CONFIRM_JSON,
    INPUTS_JSON,
    JOURNAL,
    REJECTED,
    RESULTS_CSV,
    RULED_OUT_JSON,
    RUN_JSON,
    STAGES_JSON,
    append_jsonl,
    read_journal,
    read_json,
    write_json,
)

__all__ = ["BEST_DIR", "BEST_JSON", "BROKEN_JSON", "CONFIRM_JSON", "INPUTS_JSON", "JOURNAL",
           "REJECTED", "RESULTS_CSV", "RULED_OUT_JSON", "RUN_JSON", "STAGES_JSON",
           "append_jsonl", "read_journal", "read_json", "write_json"]
