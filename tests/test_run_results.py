"""How a run ends (dwatt.training.run_results): its CPU time beside its wall time."""

import time


def test_a_run_records_its_cpu_time_beside_its_wall_time_so_that_waiting_for_a_core_shows(monkeypatch):
    """Which clock each figure reads, with the clocks replaced: no timing of this machine is asserted."""
    from dwatt.training import run_results

    fields = run_results.RunClock.__dataclass_fields__  # the process's CPU time counts every thread's
    assert fields["wall"].default_factory is time.perf_counter and fields["cpu"].default_factory is time.process_time
    monkeypatch.setattr(run_results.time, "perf_counter", lambda: 112.5)
    monkeypatch.setattr(run_results.time, "process_time", lambda: 9.25)
    clock = run_results.RunClock(wall=100.0, cpu=7.0)  # 12.5 s waited, of which 2.25 s computing
    assert clock.elapsed() == {"wall_seconds": 12.5, "cpu_seconds": 2.25}
