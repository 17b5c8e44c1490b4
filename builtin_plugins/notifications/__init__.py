"""Notification center: persisted history and the live stream."""
