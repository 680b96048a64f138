"""Screens that both the live view and the history show."""
