"""The timing engine: the one timing semantics, and the independent check of it.

- :mod:`.schedule`: list scheduling of an assignment and per-device order (**the** timing semantics);
- :mod:`.timeline`: HEFT's insertion slots, indexed by idle gap;
- :mod:`.validate`: re-derives every rule, sharing no code with :mod:`.schedule`;
- :mod:`.memory`: each device's peak memory over time.
"""
