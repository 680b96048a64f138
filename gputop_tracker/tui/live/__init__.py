"""The live view: a Textual app on a data source (the sampler, or a fake in tests)."""
