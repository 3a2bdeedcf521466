"""The steady heap policy: set inside the block, set back after, nestable."""

from __future__ import annotations

import numpy as np

from mapper.run import heap


def test_steady_heap_sets_and_restores_glibc_thresholds(monkeypatch):
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(heap, "_mallopt", lambda: lambda param, value: calls.append((param, value)) or 1)
    with heap.steady_heap() as on:
        assert on is True
        with heap.steady_heap():  # nested: one setting
            pass
        assert calls == [(heap.M_MMAP_THRESHOLD, heap.MMAP_THRESHOLD), (heap.M_TRIM_THRESHOLD, heap.TRIM_THRESHOLD)]
    assert calls[2:] == [(heap.M_MMAP_THRESHOLD, heap.GLIBC_DEFAULT), (heap.M_TRIM_THRESHOLD, heap.GLIBC_DEFAULT)]


def test_without_glibc_nothing_changes(monkeypatch):
    monkeypatch.setattr(heap, "_mallopt", lambda: None)
    with heap.steady_heap() as on:
        assert on is False


def test_real_mallopt_accepts_the_settings():
    fn = heap._mallopt()
    if fn is None:  # not glibc
        return
    with heap.steady_heap() as on:
        assert on
        a = np.ones(4 * 2**20)  # 32 MiB of f64 is at the threshold; these are below it
        del a
    assert fn(heap.M_MMAP_THRESHOLD, heap.GLIBC_DEFAULT) == 1  # glibc returns 1 on success
