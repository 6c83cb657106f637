"""A started SGLang server: readiness, warm-up, measured rounds, the startup split, profile.

Started by ``SGLangWorkload.start`` (launcher.py). Each round measures every concurrency level
in turn (bench.py for the client side, metrics.py for the server's counters and step times).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import requests

from launchers import nccl_log
from launchers.base import LaunchPlan, Metrics, Running, TrialContext
from launchers.failures import Failure, FailureKind, TrialFailed
from launchers.process import ServerProcess
from launchers.sglang import datasets, metrics, resolved
from launchers.sglang import startup as sglang_startup
from launchers.sglang.bench import Bench, BenchError, BenchSettings


class BenchArgs(Protocol):
    """What a started server needs of the workload's args (SGLangArgs has it all)."""

    concurrency: list[int]
    objective_concurrency: int | None
    input_len: int
    output_len: int
    requests_per_round: int | None
    request_timeout: float
    warmup_requests: int
    metrics: bool

_HEALTH_TIMEOUT = (0.5, 5.0)  # connect, read: one readiness probe
_EXIT_WAIT_S = 2.0  # how long a dropped connection may take to show up as a dead process
PROFILE_ROUND = 1_000_000  # the bench round index of a profile (its own prompts)


def stop_now(process: ServerProcess) -> None:
    """Stop a server servetune is done with: every process of its tree killed together."""
    process.stop(grace=0.0)


class SGLangRunning(Running):
    """A started SGLang server: readiness over ``/health_generate``, rounds over ``/generate``."""

    def __init__(self, process: ServerProcess, plan: LaunchPlan, ctx: TrialContext,
                 args: BenchArgs, env: Mapping[str, str], dataset: datasets.Dataset | None = None,
                 launched: float | None = None) -> None:
        self.process = process
        self.plan = plan
        self.ctx = ctx
        self.args = args
        self.env = dict(env)
        self.launched = time.time() if launched is None else launched  # wall clock at spawn
        host = "127.0.0.1" if plan.host in ("0.0.0.0", "") else plan.host
        self.base_url = f"http://{host}:{plan.port}"
        self.bench = Bench(self.base_url, BenchSettings(
            input_len=args.input_len, output_len=args.output_len,
            requests_per_round=args.requests_per_round, request_timeout=args.request_timeout,
            seed=ctx.seed), dataset)
        self.objective = args.objective_concurrency or args.concurrency[0]
        self.concurrencies = list(dict.fromkeys([*args.concurrency, self.objective]))

    def stop(self) -> None:
        """SIGKILL the whole tree at once: what SGLang's own stop ends with
        (``kill_process_tree``), without the drain that polls every 5 s and the 5 s sleep
        "before crash diagnostics" that a SIGTERM costs (shared/reference/real-sglang.md).
        Nothing is measured after a stop, and the log shows no stop of SGLang's own."""
        stop_now(self.process)

    def _healthy(self) -> bool:
        try:
            resp = requests.get(self.base_url + "/health_generate", timeout=_HEALTH_TIMEOUT)
        except requests.RequestException:
            return False
        return resp.status_code == 200

    def wait_ready(self, timeout: float) -> float:
        return self.process.wait_ready(self._healthy, timeout, interval=0.05)

    def warmup(self) -> None:
        try:
            self.bench.warmup(self.args.warmup_requests)
        except BenchError as err:
            raise TrialFailed(self._bench_failure(err, "warm-up")) from err
        info = metrics.server_info(self.base_url)  # what the server resolved, as it says
        if info:
            self._ran_notes = resolved.record_server(self.ctx.trial_dir, info)

    def ran_notes(self) -> list[str]:
        return list(getattr(self, "_ran_notes", []))

    def _bench_failure(self, err: BenchError, where: str) -> Failure:
        """Dead server: crashed_mid_benchmark; alive but silent past the timeout: hang."""
        deadline = time.monotonic() + (0 if err.timed_out else _EXIT_WAIT_S)
        while self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        dead = self.process.poll() is not None
        kind = (FailureKind.BENCHMARK_HANG if err.timed_out and not dead
                else FailureKind.CRASHED_MID_BENCHMARK)
        state = "server exited" if dead else "server still running"
        failure = self.process.failure(f"{where}: {err.message} ({state})")
        if failure.kind is not FailureKind.CRASHED:
            failure.details["log_kind"] = failure.kind.value
        failure.kind = kind
        return failure

    def measure(self, round_index: int) -> Metrics:
        """One round: every concurrency level in turn, each with its own counter deltas and
        step-time windows. The objective level's metrics under their plain names; with
        several levels, every level's also as ``<name>_c<level>``."""
        where = f"round {round_index}"
        per: dict[int, dict[str, float | None]] = {}
        counters = metrics.scrape(self.base_url) if self.args.metrics else None
        info = metrics.server_info(self.base_url)
        for c in self.concurrencies:
            try:
                result = self.bench.round(c, round_index)
            except BenchError as err:
                raise TrialFailed(self._bench_failure(err, where)) from err
            if self.process.poll() is not None or not result["completed"]:
                what = ("the server exited during the round" if self.process.poll() is not None
                        else f"all {int(result['failed'] or 0)} requests of the round failed")
                raise TrialFailed(self._bench_failure(BenchError(what, False), where))
            after = metrics.scrape(self.base_url) if self.args.metrics else None
            after_info = metrics.server_info(self.base_url)
            result.update(metrics.per_cycle(counters, after))
            result["server_accept_length"] = metrics.server_accept_length(after_info)
            result["cycle_ms"] = metrics.cycle_ms(info, after_info, c)
            per[c] = result
            counters, info = after, after_info
        report: Metrics = dict(per[self.objective])
        if len(per) > 1:
            for c, result in per.items():
                report.update({f"{k}_c{c}": v for k, v in result.items()})
        return report

    def startup(self) -> dict[str, float | None]:
        """Launch -> weights loaded -> graphs captured -> ready, from the server's log
        (launchers/sglang/startup.py); None where the log does not show a step."""
        try:
            with open(self.process.log_path, encoding="utf-8", errors="replace") as log:
                return sglang_startup.parse(log, self.launched)
        except OSError:
            return dict.fromkeys(sglang_startup.STARTUP_KEYS)

    def profile(self, steps: int) -> list[Path]:
        """SGLang's own profiler (``/start_profile``) over ``steps`` forward steps of a bench
        round at the objective concurrency; one trace per rank under traces/."""
        from launchers.sglang import profile as sglang_profile

        argv = list(self.plan.argv)
        ranks = int(argv[argv.index("--tp-size") + 1]) if "--tp-size" in argv else 1

        def load() -> None:
            try:
                self.bench.round(self.objective, PROFILE_ROUND)
            except BenchError as err:
                raise TrialFailed(self._bench_failure(err, "profile")) from err

        try:
            return sglang_profile.capture(self.base_url, self.ctx.trial_dir / "traces", steps,
                                          ranks, load)
        except sglang_profile.ProfileError as err:
            raise TrialFailed(self._bench_failure(BenchError(str(err), True), "profile")
                              ) from err

    def effective(self) -> dict[str, Any]:
        eff = nccl_log.parse_files(nccl_log.debug_files(self.ctx.trial_dir))
        inherited = {k: v for k, v in self.env.items()
                     if k.startswith("NCCL_") and k not in self.plan.env}
        data = eff.to_json()
        data["columns"] = eff.to_columns()
        data["warnings"] = nccl_log.mismatches(self.plan.env, eff, inherited)
        return data
