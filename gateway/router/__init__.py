"""Deployments of model groups: names (aliases, wildcards), selection, cooldowns, usage."""
