"""Widgets both views use: panels, braille charts, the keyed process table, the job panel."""
