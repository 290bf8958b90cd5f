"""A loose guard on the binding's host cost (scripts/host_cost.py measures it properly): a tiny call must stay far
below what the binding cost before its fast path (~115 us for numpy on a CI-class core), with bounds wide enough that
a busy CI machine cannot fail them (measured here on an idle core: ~10-15 us numpy, ~15-20 us torch CPU; see
scripts/host_cost.py). The best of several medians is taken, so a burst of load on a shared machine does not count."""

import statistics
import time

import numpy as np
import pytest

import libflash


def per_call_us(fn, calls=200, repeats=5):
    for _ in range(20):
        fn()
    medians = []
    for _ in range(repeats):
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        medians.append(statistics.median(times) * 1e6)
    return min(medians)


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    monkeypatch.setenv("LIBFLASH_NUM_THREADS", "1")  # read by the library at each call


def test_tiny_numpy_call_host_cost():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 8, 2, 16)).astype(np.float32) for _ in range(3))
    us = per_call_us(lambda: libflash.attention(q, k, v))
    assert us < 200, "a tiny numpy attention() call took %.1f us (expected ~10-30 us)" % us
    kc = np.zeros((1, 32, 2, 16), np.float32)
    us = per_call_us(lambda: libflash.attention_with_kvcache(q[:, :1], kc, kc, cache_seqlens=16))
    assert us < 200, "a tiny numpy attention_with_kvcache() call took %.1f us (expected ~10-30 us)" % us


def test_tiny_torch_cpu_call_host_cost():
    torch = pytest.importorskip("torch")
    from libflash.torch import flash_attn_func

    q, k, v = (torch.randn(1, 8, 2, 16) for _ in range(3))
    us = per_call_us(lambda: libflash.attention(q, k, v))
    assert us < 250, "a tiny torch CPU attention() call took %.1f us (expected ~15-35 us)" % us
    us = per_call_us(lambda: flash_attn_func(q, k, v))
    assert us < 250, "a tiny torch CPU flash_attn_func() call took %.1f us (expected ~15-35 us)" % us
