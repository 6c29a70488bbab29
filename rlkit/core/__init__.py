"""The core every layer stands on: types, the rubric, hook specs, the plugin registry, errors, stats."""
