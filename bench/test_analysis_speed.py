"""Analysis of every preset on the meta device: the bar is under 2 seconds for all together.

Run: pytest bench/test_analysis_speed.py --benchmark-only
"""

import itertools

import zoo

_fresh = itertools.count()


def _analyse_all() -> None:
    tag = next(_fresh)
    for name in zoo.list_architectures():
        spec = zoo.spec(name).override({"name": f"{name}-{tag}"})  # defeat the caches
        zoo.count_params(spec)
        zoo.kv_bytes_per_token(spec)


def test_analysis_of_every_preset(benchmark):
    _analyse_all()  # imports and registry warm
    benchmark.pedantic(_analyse_all, rounds=5, iterations=1)
