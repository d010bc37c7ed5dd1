from qaeval.cli import entry

entry()
