"""Evaluation: golden sets, judge calibration, scoring files of records."""
