"""Durable workflow schedules: interval and calendar timing, one firing loop per host, claimed fires."""
