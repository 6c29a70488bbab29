"""Built-in prompt samplers: which training prompts each step trains on."""
