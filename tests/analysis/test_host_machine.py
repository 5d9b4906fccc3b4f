"""The machine a measurement ran on: a description a row can print, and a fingerprint that
changes with what decides the peaks (the thread count, the torch build)."""

from __future__ import annotations

import os

import torch

from zoo.analysis import host_machine


def test_the_description_names_the_cpu_and_its_logical_cpus():
    description = host_machine.cpu_description()
    assert description.startswith(f"{host_machine.cpu_model()}, {os.cpu_count()} logical CPUs; flags: ")
    assert set(host_machine.cpu_flags()) <= {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}


def test_the_fingerprint_follows_what_decides_the_peaks():
    described = host_machine.machine()
    assert described["threads"] == torch.get_num_threads() and described["torch"] == torch.__version__
    same = host_machine.fingerprint(dict(reversed(described.items())))  # key order does not matter
    assert host_machine.fingerprint(described) == same
    assert host_machine.fingerprint({**described, "threads": described["threads"] + 1}) != same


def test_the_last_level_cache_is_a_positive_size_or_unknown():
    cache = host_machine.last_level_cache_bytes()
    assert cache is None or cache > 0
