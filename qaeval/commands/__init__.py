"""What the verbs do: ``pipeline`` (run a suite through the system, then score), ``monitoring``
(score production logs), ``tracking`` (MLflow) and ``export``. ``qaeval.api`` is the facade the CLI and
the notebooks call; these modules are its implementations."""
