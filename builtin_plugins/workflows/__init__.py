"""Workflows: reusable plan definitions with drafts, immutable published revisions, and manual runs."""
