"""Setup wizard: choose and initialise the database backend (SETUP mode only)."""
