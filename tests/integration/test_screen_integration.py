"""--screen proxy: the NCCL knobs screened on the proxy, the top k promoted to server trials,
and the proxy-vs-server ranking reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.runs import Experiment, ray_tmpdir, read_results
from tuner.run.screen import env_part

pytestmark = pytest.mark.integration


def test_screen_promotes_the_proxys_top_settings_to_the_server(tmp_path: Path) -> None:
    with ray_tmpdir() as ray_tmp:
        exp = Experiment.create(tmp_path, ray_tmp, "screened")
        result = exp.run(["run", *exp.args("--space", "nccl-pcie", "--samples", "5", "--rounds", "1",
                                  "--speculative-algorithm", "EAGLE3", "--screen", "proxy",
                                  "--model-config", "tiny", "--screen-top", "2",
                                  "--screen-spread", "1", "--no-dashboard")], timeout=300)
        assert result.returncode == 0, str(result)
        screen = read_results(exp.out / "screen" / "results.csv")
        assert len(screen) == 5 and screen["baseline"].iloc[0]
        # The proxy's two best NCCL settings (completed, baseline excluded) ran on the server,
        # and its worst (the spread of one: the bottom of the ranking).
        done = screen[(screen["status"] == "ok") & ~screen["baseline"]]
        ranked = done.sort_values("score", ascending=False)["trial_id"].tolist()
        best_two, worst = ranked[:2], ranked[-1]
        proxy_journal = [json.loads(x) for x in
                         (exp.out / "screen" / "results.jsonl").read_text().splitlines()]
        proxy_configs = {e["trial_id"]: env_part(e["config"]) for e in proxy_journal
                         if e["event"] == "start"}
        server_configs = [env_part(e["config"]) for e in exp.journal() if e["event"] == "start"
                          and e.get("phase", "search") == "search"]  # not the confirm stage
        for tid in [*best_two, worst]:
            assert proxy_configs[tid] in server_configs
        assert len(server_configs) == 1 + len(best_two) + (len(ranked) > 2)  # baseline first
        server = exp.table()
        assert server["baseline"].iloc[0] and (server["status"] == "ok").all()  # FIFO: all rounds
        report = json.loads((exp.out / "screen.json").read_text())
        assert len(report["settings"]) == len(server_configs) == report["n"]
        assert set(report["roles"]) <= {"baseline", "top", "spread"}
        assert "Spearman" in result.stdout and f"n={report['n']}" in result.stdout
        assert exp.leftovers() == [] and exp.cleanup() == []
