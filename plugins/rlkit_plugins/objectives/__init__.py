"""Built-in objectives: what the policy is trained to minimise."""
