"""The summary shown: text and JSON reports, plots, comparisons, cluster-job views and scheduler advice."""
