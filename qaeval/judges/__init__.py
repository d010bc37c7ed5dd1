"""Judges: ``offline`` (the mechanical default), ``openai`` (any OpenAI-compatible endpoint),
``fake_server`` (a deterministic local endpoint) and ``generator`` (what ``qaeval propose --from-corpus``
asks for candidate cases). What makes a verdict count is decided in ``qaeval.scoring.judge``."""
