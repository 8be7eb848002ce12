"""pase.forked: a function run in a forked child, its answer or its error read back."""
from __future__ import annotations

import os
import time

import pytest

from pase import forked
from pase.errors import OptionError, PaseError


def test_the_answer_comes_back_from_the_child():
    big = list(range(300_000))  # more than a pipe holds at once
    job = forked.Forked(lambda: (os.getpid(), sum(big), big))
    pid, total, back = job.result()
    assert pid != os.getpid() and total == sum(big) and back == big


def test_an_error_in_the_child_is_raised_in_the_parent():
    def fail():
        raise OptionError("bad option 'x'")

    job = forked.Forked(fail)
    with pytest.raises(OptionError, match="bad option 'x'"):
        job.result()
    with pytest.raises(PaseError, match="read twice"):
        job.result()


def test_cancel_kills_a_child_still_working():
    start = time.perf_counter()
    job = forked.Forked(lambda: time.sleep(60))
    job.cancel()
    job.cancel()  # a second cancel does nothing
    assert time.perf_counter() - start < 30
    with pytest.raises(ProcessLookupError):
        os.kill(job.pid, 0)  # reaped: no such process
