"""The version of the tool and of its session schema: a leaf module every other module may import."""

__version__ = "0.1.0"
SCHEMA_VERSION = 1  # of the session files and the JSON report (models.py and the sampler share it)
