"""The one-entry caches of HEFT, the ranks, the lower bound, the device classes, the validator and
peak memory never keep a graph alive; the line grammar the fast parser and the direct reader share."""

from __future__ import annotations

import gc
import weakref

from mapper.engine.memory import peak_memory
from mapper.engine.validate import validate
from mapper.frontend import direct, fastparse, lines
from mapper.mapping import bounds, get_mapper, heft
from mapper.mapping.base import MapOptions
from mapper.mapping.orders import identical_device_classes
from tests.randdag import random_instance


def test_heft_cache_hits_on_the_same_table_and_lets_it_go():
    cost = random_instance(1, 40, "layered", n_devices=3)
    first = get_mapper("heft").map(cost, MapOptions()).schedule
    again = get_mapper("heft").map(cost, MapOptions()).schedule
    assert again.slots is first.slots and again.cost is cost  # kept, rebuilt around the same table
    assert bounds.lower_bound(cost, "makespan") is not None
    assert identical_device_classes(cost) is identical_device_classes(cost)
    peak_memory(first)
    assert validate(first) == validate(again) == []
    gone = weakref.ref(cost)
    del cost, first, again
    gc.collect()
    assert gone() is None  # nothing cached holds the table (or its graph)
    assert heft._last == []


def test_peak_memory_cache_is_weak():
    cost = random_instance(2, 30, "random", n_devices=2)
    schedule = get_mapper("heft").map(cost, MapOptions()).schedule
    peaks = peak_memory(schedule)
    assert peak_memory(schedule) is peaks
    gone = weakref.ref(schedule)
    heft._last.clear()
    del schedule
    gc.collect()
    assert gone() is None


def test_one_line_grammar():
    # the direct reader and the fast parser read lines with the same expressions
    assert fastparse.TASK_LINE is lines.TASK_LINE and fastparse.EDGE_LINE is lines.EDGE_LINE
    assert direct.MIN_LINES == fastparse.MIN_LINES == lines.MIN_LINES
    m = lines.TASK_LINE.fullmatch("  task t1 cost { p0: 1.5ms, p1: 2 }")
    assert m is not None and m.group(1) == "t1"
    assert [i.groups() for i in lines.ITEM.finditer(m.group(2))] == [("p0", "1.5", "ms"), ("p1", "2", None)]
    e = lines.EDGE_LINE.fullmatch("t1 -> t2 comm 3 us")
    assert e is not None and e.groups() == ("t1", "t2", "comm", "3", "us")
