"""Judges. ``qaeval.judges.offline:make_judge`` is the mechanical default (token overlap, no model);
``qaeval.judges.openai:make_judge`` speaks the OpenAI chat-completions protocol to any compatible
endpoint; ``qaeval.judges.fake_server`` is a deterministic local endpoint for tests and trying it out.
``qaeval.judges.generator`` is the generator ``qaeval propose --from-corpus`` asks for candidate cases: set
up, cached and called as the HTTP judge is.
What makes a verdict count is decided in ``qaeval.scoring.judge``, not by any judge."""
