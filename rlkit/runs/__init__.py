"""Run outputs: loggers, the metric history, the run report, sweep identities, Lightning plumbing."""
