"""Helpers shared by the tests: file builders, DDP runner, resume check, handler fixtures."""
