"""Built-in preference constructors: (chosen, rejected) completion pairs drawn from each prompt's group."""
