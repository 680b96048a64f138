"""Where samples become the report: `builder.SummaryBuilder` composed of small accumulators, the rules that pick
and label each peak, alerts and events, and how much of a job's request was used."""
