"""Judges that call a model. ``qaeval.judges.openai:make_judge`` speaks the OpenAI chat-completions
protocol; the offline default lives in ``qaeval.judging``."""
