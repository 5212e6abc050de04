"""mbde_core.engine.thread_pools: one pool per (name, size), and a forked child makes its
own (a copied pool would accept the child's tasks and never run them)."""
import os

import pytest

from conftest import in_forked_child
from mbde_core.engine import thread_pools


def test_one_pool_per_name_and_size():
    a = thread_pools.pool("t", 2)
    assert thread_pools.pool("t", 2) is a
    assert thread_pools.pool("t", 1) is not a and thread_pools.pool("u", 2) is not a
    assert sorted(a.map(lambda x: x * x, range(5))) == [0, 1, 4, 9, 16]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_working_pools():
    assert list(thread_pools.pool("t", 2).map(abs, [-1, -2])) == [1, 2]  # the parent's pool has run
    assert in_forked_child(lambda: sum(thread_pools.pool("t", 2).map(lambda x: x + 1, range(10)))) == 55
