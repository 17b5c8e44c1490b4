"""Webhook triggers: run a published workflow when a caller with the trigger's secret posts to its hook."""
