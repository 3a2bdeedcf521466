"""Platforms: the machine a graph is mapped onto.

- :mod:`.devices`: the ``Device``, ``Link``, ``Switch``, ``Cluster``, ``Fleet`` and ``Platform`` values and routes;
- :mod:`.schema`: the checks of a platform file's tables (device tables with a ``count``);
- :mod:`.cluster`: clusters and fleets (``[cluster]``, ``[[fleet]]``, ``--nodes``);
- :mod:`.loader`: reads platform files (the one ``tomllib`` import) and lists the shipped ones.
"""
