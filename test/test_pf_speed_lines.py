"""The summary lines of ``mbde bench pf --only speed`` (mbde_bench/pf_speed.py): the thread
scaling from wall times and, load-robust, from CPU times (one thread's process CPU over the
calling thread's own CPU with two), on made-up rows."""
from mbde_bench.pf_speed import bound_lines, speed_table


def _row(N, thr, cpu, main, wall):
    return {"integrator": "rk4", "backend": "numba", "particles": N, "threads": thr, "ms_per_step": cpu,
            "main_ms_per_step": main, "wall_ms_per_step": wall, "particle_steps_per_s": N / cpu * 1e3,
            "particle_steps_per_wall_s": N / wall * 1e3, "steps": 5, "predict_share": 0.4, "update_share": 0.5,
            "estimate_share": 0.1, "engine_ms_per_step": None, "x_bound": 10.0, "bound_ns": 24.0,
            "flops_per_particle_step": 1423, "flop_rate": 5.9e10, "load": 3.0}


def test_scaling_from_cpu_times_is_reported():
    rows = [_row(100000, 1, 20.0, 20.0, 20.0), _row(100000, 2, 22.0, 11.0, 30.0)]
    text = "\n".join(bound_lines(rows))
    assert "(wall particle-steps/s): 0.67x" in text  # a busy machine's wall times
    assert "20.00 / 11.00 = 1.82x, an upper bound" in text and "the idle wall figure decides" in text
    assert "main ms" in speed_table(rows, [])
    del rows[1]["main_ms_per_step"]  # rows of an older results.json: no estimate line
    assert "from CPU times" not in "\n".join(bound_lines(rows))
