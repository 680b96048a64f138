"""The Python API: `Tracker` (`with Tracker(): ...`), code blocks (`block`, `tracked`, `mark`) and the Jupyter
magics. Exported lazily from `gputop_tracker` itself."""
