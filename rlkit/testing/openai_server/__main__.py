"""``python -m rlkit.testing.openai_server``: serve a local causal LM over OpenAI's completions APIs."""

from rlkit.testing.openai_server.process import main

raise SystemExit(main())
