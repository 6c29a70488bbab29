"""Built-in audit probes: cheap tricks ``rlkit rubric audit`` plays on a rubric (one module each)."""
