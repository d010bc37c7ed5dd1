from qaeval.console import entry

entry()
