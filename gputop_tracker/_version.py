"""The tool's version and the schema version of what it saves. A leaf module: no imports, so core modules
(the sampler child included) read it without loading the package's API or pydantic."""

__version__ = "0.1.0"

SCHEMA_VERSION = 1  # of saved sessions and reports; a reader refuses files of a newer schema
