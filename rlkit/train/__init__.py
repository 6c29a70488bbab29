"""The training loop: the LightningModule, fit, objectives' shared update, callbacks, data module, DDP."""
