"""The front end: program text or an imported model to a :class:`~mapper.core.graph.TaskGraph`.

- :mod:`.syntax`, :mod:`.parse`, :mod:`.fastparse`, :mod:`.lark_parse`: DSL text to a ``syntax.Program``;
- :mod:`.lowering`: a ``Program`` to a task graph (:mod:`.lowering.program` drives it);
- :mod:`.sources`: what a program is read from (a DSL file with ``--param`` values, or a model file);
- :mod:`.importers`: ONNX, WfCommons, dnn-partitioning, DOT and GXL task graphs, and the DSL writer.
"""
