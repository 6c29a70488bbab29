"""rlkit's Hydra configs, shipped as ``rlkit.conf``. Importing the package (Hydra does, to find ``pkg://rlkit.conf``)
registers the run's defaults that ``config.yaml`` composes first (``rlkit.config.schemas.register_run_defaults``)."""

from rlkit.config.schemas import register_run_defaults

register_run_defaults()
