"""The command implementations behind ``rlkit <command>``."""
