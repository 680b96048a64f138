"""The history's screens, one a file."""
