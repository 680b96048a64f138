"""What the tool's figures are: the pydantic models (one schema per shape), units, the sampler's configuration,
every path the tool reads or writes, checks of user input, and text made safe to show."""
