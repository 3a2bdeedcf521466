"""The parts of lowering (:mod:`mapper.frontend.lowering.program` drives them).

- :mod:`.values`: expressions, attribute values, units, indexed names and tensor types;
- :mod:`.annotations`: placement, work, cost, parallel and streamable annotations;
- :mod:`.edges`: data and explicit edges, with duplicate and cycle checks.
"""
