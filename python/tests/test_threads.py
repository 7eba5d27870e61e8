"""One session, many Python threads: ``run`` releases the GIL and each run leases its own context
in the dispatcher, so concurrent requests of different batches come back correct and unmixed."""

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from conftest import MODEL_NAMES, ON_GPU, feeds_for, session_of

THREADS = 8


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_eight_threads_on_one_session(name):
    session = session_of(name)
    requests = [feeds_for(session, name, batch, seed=batch) for batch in (1, 2, 3, 5, 8, 13, 21, 34)]
    expected = [session.run(None, feeds) for feeds in requests]
    barrier = threading.Barrier(THREADS)

    def worker(t):
        barrier.wait()
        for i in range(6):
            k = (t + i) % len(requests)
            got = session.run(None, requests[k])
            for a, b in zip(got, expected[k]):
                np.testing.assert_array_equal(a, b)
        return True

    with ThreadPoolExecutor(THREADS) as pool:
        assert all(pool.map(worker, range(THREADS)))
    stats = session.stats()
    assert stats["failed"] == 0, stats


def test_the_gil_is_released_during_run():
    """While one thread runs a long request, the main thread keeps running Python: the longest pause
    between its ticks is far shorter than the run (a run holding the GIL would pause it throughout)."""
    session = session_of("cnn")
    # A run of many milliseconds on any provider (on a GPU a batch of 64 takes under one), well
    # above the scheduler's jitter in the main thread's ticks.
    feeds = feeds_for(session, "cnn", 1024 if ON_GPU else 64, seed=1)
    session.run(None, feeds)
    durations, done = [], threading.Event()

    def runner():
        for _ in range(3):
            started = time.perf_counter()
            session.run(None, feeds)
            durations.append(time.perf_counter() - started)
        done.set()

    thread = threading.Thread(target=runner)
    interval = sys.getswitchinterval()
    # The runner takes the GIL back between runs within one switch interval.
    sys.setswitchinterval(0.0002)
    try:
        last, longest = time.perf_counter(), 0.0
        thread.start()
        while not done.is_set():
            now = time.perf_counter()
            longest, last = max(longest, now - last), now
        thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert longest < min(durations) / 2, (longest, durations)


def test_one_binding_per_thread_on_one_session():
    session = session_of("mlp")
    inputs = [np.random.default_rng(t).standard_normal((t + 1, 128)).astype(np.float32) for t in range(THREADS)]
    expected = [session.run(None, {"x": x})[0] for x in inputs]

    def worker(t):
        binding = session.io_binding()
        binding.bind_cpu_input("x", inputs[t])
        out = np.empty((t + 1, 10), np.float32)
        binding.bind_output("probs", out)
        for _ in range(5):
            session.run_with_iobinding(binding)
            np.testing.assert_array_equal(out, expected[t])
        return True

    with ThreadPoolExecutor(THREADS) as pool:
        assert all(pool.map(worker, range(THREADS)))
