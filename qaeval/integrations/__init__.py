"""Adapters for the frameworks systems are built with: each turns a framework's retriever, model or chain
into a qaeval adapter factory (``qaeval.integrations.langchain``). Each lives behind its own extra and
imports only the system contract, never scoring or verdicts."""
