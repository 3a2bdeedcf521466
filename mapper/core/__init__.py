"""The core every stage shares: the task graph and its op catalogue, units, files, limits, the terminal.

- :mod:`.graph`: :class:`~.graph.TaskGraph`, the one networkx import;
- :mod:`.ops` with :mod:`.opdefs`: the op catalogue (types, shapes, FLOPs, bytes);
- :mod:`.units`: times, bytes and objective values with their units;
- :mod:`.files`: inputs only from regular files, atomic outputs never over an input;
- :mod:`.limits`: a memory budget around steps whose size an input decides;
- :mod:`.terminal`: control characters escaped on their way to the terminal.
"""
