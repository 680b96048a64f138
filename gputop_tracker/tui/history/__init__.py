"""The history view: browse, inspect, compare, export and delete saved sessions."""
