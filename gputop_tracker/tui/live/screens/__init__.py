"""The live view's dialogs, one a file."""
