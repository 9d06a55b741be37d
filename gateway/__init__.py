"""An OpenAI-compatible gateway that repairs agent histories and recovers from refusals.

A citation ``SPEC §N`` (or ``§N.M``) in a docstring or comment refers to that section of
docs/spec.md, the behaviour spec; docs/architecture.md walks a request through the packages.
"""
