"""User settings: theme, language, layout, log level and computer use."""
