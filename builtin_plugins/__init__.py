"""Builtin plugins: one package per feature area."""
