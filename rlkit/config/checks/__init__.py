"""The checks ``rlkit validate`` runs, one module per concern; :func:`rlkit.config.validate.check_config` runs
them in order.

``blocks``: the config's blocks against their schemas and the plugin names; ``model``: the policy model, its machine
and reference; ``judge``: the judge, rubric, held-out scoring, debiasing and monitors; ``objective``: the objective,
its parts and the prompt sampler; ``data``: the data file and its records; ``outcome``: :class:`CheckedConfig`.
No check loads model weights, starts an engine or binds a port: a plugin is built only as its (lazy) constructor
builds it, and what it checks of itself it checks through the members its kind's protocol declares.
"""
