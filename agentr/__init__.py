"""The composition root of agentr: the ``agentr`` command line (``agentr.cli``) and the worker
process that wires settings, store, bus and a service together (``agentr.process``).

It sits above every other package: it may import ``api``, ``search_service``, ``critic_service``,
``splice_service``, ``train_service`` and ``core``; none of them may import it (checked by
import-linter, see ``[tool.importlinter]`` in pyproject.toml and ARCHITECTURE.md).
"""
