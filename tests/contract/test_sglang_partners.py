"""Partners completed from real SGLang's resolution (issue 31): the run's searcher, built as
``tuner.run.experiment`` builds it (the workload's identity, refusal and resolved knobs asked
on the driver), completes a suggestion SGLang refuses alone with the partners the installed
SGLang (0.5.23) resolved the baseline to, and launches nothing SGLang refuses."""

from __future__ import annotations

from pathlib import Path

from launchers.sglang.launcher import SGLangArgs
from tests.sglang_parser import CONTRACT
from tuner.run.experiment import resolved_knobs
from tuner.search.build import build_search, proposals
from tuner.setup import prepare
from tuner.spec import ExperimentSpec

pytestmark = CONTRACT

MODELS = Path(__file__).resolve().parents[1] / "launchers" / "models"
STEPS, TOPK, DRAFTS = ("--speculative-num-steps", "--speculative-eagle-topk",
                       "--speculative-num-draft-tokens")
# Steps the baseline does not resolve to: a completed suggestion's steps come from SGLang.
SPACE = f"""name: shape
knobs:
  {STEPS}: [1, 2]
  {TOPK}: [1, 4]
  {DRAFTS}: [4, 8]
"""


def test_a_refused_suggestion_runs_with_the_partners_sglang_resolved(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    args = SGLangArgs(model=str(MODELS / "tiny-llama"),
                      draft_model=str(MODELS / "tiny-llama-eagle3"), speculative_algorithm="EAGLE3",
                      tp=1, server_args=["--load-format", "dummy"])
    spec = ExperimentSpec(name="partners", out_dir=tmp_path / "out",
                          space=str(tmp_path / "space.yaml"), search="optuna", samples=10,
                          workload=args)
    setup = prepare(spec)
    resolved = resolved_knobs(setup)
    baseline = resolved(setup.space.baseline())
    assert baseline is not None
    steps = baseline[STEPS]  # SGLang picks the whole shape when none is given
    assert isinstance(steps, int) and steps not in setup.space.domains[STEPS]
    stack = build_search(setup.space, setup.objective, search="optuna", stage_search="grid",
                         samples=spec.samples, seed=0, failure_aware=True, max_concurrent=1,
                         out_dir=None, identity=setup.identity, refusal=setup.refusal,
                         resolved=resolved)
    launched = [config for _, config in proposals(stack, stack.num_samples)]
    counts = stack.filtering.counts()
    assert counts["completed"] >= 1, counts
    completed = [c for c in launched if c[STEPS] == steps]
    assert completed and all(c[TOPK] is not None or c[DRAFTS] is not None for c in completed)
    assert [c for c in launched if setup.refusal(c)] == []
