"""Owns the capture proxy: an OpenAI-compatible endpoint agents use as ``base_url``, which forwards
their chat completions to an upstream model server and records every call into a trace
(routes.py: HTTP; grouping.py: which trace a call joins; recorder.py: storing without waiting and
without losing calls; app.py: the standalone ``agentr proxy`` process)."""
