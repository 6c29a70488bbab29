"""A small OpenAI-compatible server for tests and local use, serving a local causal LM.

It answers ``POST /v1/chat/completions``, ``POST /v1/completions`` and ``GET /v1/models`` with a real Hugging Face
model loaded by :func:`rlkit.lm.models.load_policy` (the embedded tiny policy by default), using only the standard
library (``http.server`` in a background thread), so it adds no dependency beyond rlkit's own (peft for LoRA).
It binds ``127.0.0.1`` on a free port unless told otherwise; :attr:`OpenAICompatibleServer.url` is the base URL a
client needs (``.../v1``)::

    from rlkit.testing.openai_server import OpenAICompatibleServer

    with OpenAICompatibleServer() as server:          # the tiny policy
        print(server.url)                             # http://127.0.0.1:<port>/v1

Requests: ``messages`` (``content`` a string or a list of ``{"type": "text", "text": ...}`` parts) are rendered
with the tokenizer's chat template when it has one, else as ``role: content`` lines followed by ``assistant:``
(the ``hf`` judge backend renders the same way); ``max_tokens`` (or ``max_completion_tokens``, default 16);
``temperature`` (default 1.0 as in OpenAI's API; 0 is greedy); ``seed`` (makes sampling repeatable). Chat
requests run the model one at a time. Token completions are batched as an engine batches them: requests that arrive
less than ``batch_window_s`` apart are decoded in one left-padded pass (per group of equal sampling
settings), so B concurrent requests cost about one batched ``generate``, not B.

Token completions, weight updates and LoRA adapters speak the routes and fields of vLLM (>= 0.10.2) and SGLang, so
an RL generator talks to this server as it would to them (``rlkit_plugins.generators.openai_server``):

* ``POST /v1/completions`` (vLLM's ``CompletionRequest``): ``prompt`` as token ids (a list of ints, or a list of
  such lists; a string or list of strings is tokenised without special tokens), ``n`` (default 1),
  ``max_tokens`` (default 16), ``min_tokens`` (vLLM's: no EOS before that many; default 0), ``temperature``
  (default 1.0; 0 is greedy), ``seed`` (each sample's noise is a hash of the seed, its prompt's index and its
  own index: the Gumbel-max draw of ``rlkit.lm.seeded``, so a request gets the same samples whatever else is
  decoded beside it; one prompt with seed s draws what the ``hf`` generator's ``per_prompt_seed`` draws for a
  record with seed s), ``logprobs`` (an int >= 0: return log-probs),
  ``return_token_ids`` (vLLM's extension: ``token_ids`` and
  ``prompt_token_ids`` per choice), ``return_tokens_as_token_ids`` (``logprobs.tokens`` as ``"token_id:<id>"``),
  ``model`` (the served name, or a loaded LoRA adapter's name). The answer is vLLM's ``CompletionResponse``:
  ``choices`` ordered prompt by prompt, each prompt's ``n`` consecutive, ``index`` = prompt index × n + sample;
  each with ``text`` (special tokens skipped), ``finish_reason`` (``stop`` at an EOS, which ``token_ids`` and the
  log-probs include, else ``length``), ``token_ids``/``prompt_token_ids`` (or null), and ``logprobs`` (null
  unless asked): ``tokens``, ``token_logprobs``, ``top_logprobs`` (the sampled token and the ``logprobs`` most
  likely ones), ``text_offset``. Each log-prob is the sampled token's under the raw logits of the serving model
  (log-softmax at temperature 1, before temperature or any other processing): vLLM's ``raw_logprobs``
  ``logprobs_mode``, which is what a trainer compares with its own policy's log-probs. ``prompt_logprobs`` (vLLM's
  extension, an int >= 0) adds each choice's ``prompt_logprobs``: None for the first prompt token, then for each
  later one ``{"<token id>": {"logprob", "rank", "decoded_token"}}``, its raw log-prob given the tokens before it.
  With ``max_tokens`` 1 at temperature 0 one forward pass gives both (how a trainer scores sequences).
* A second, frozen model (``reference=PATH``, ``--reference-model``) is served under ``reference_name``
  (``"reference"``): weight updates and adapters never touch it, as a vLLM base model stays the reference for a
  LoRA policy. Its requests share the one model lock, in arrival order.
* ``POST /update_weights_from_disk`` (SGLang's route): ``{"model_path": DIR}`` reloads the model (and tokenizer)
  from that directory, dropping any LoRA adapters; answers ``{"success": true, "message": ...}`` (HTTP 400 with
  ``success: false`` when it cannot).
* ``POST /v1/load_lora_adapter`` (vLLM's route; vLLM needs ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``):
  ``{"lora_name", "lora_path", "load_inplace"}`` loads a peft adapter under that name (an existing name is HTTP
  400 unless ``load_inplace``); answers 200 with a plain-text line, as vLLM does. ``POST
  /v1/unload_lora_adapter`` ``{"lora_name"}`` drops one. ``GET /v1/models`` lists the adapters after the base.
  Failures answer as vLLM's do: no adapter at ``lora_path`` is 404 (``Loading lora <name> failed: No adapter found
  for <path>``), an adapter that does not load 400, unloading an unknown name 404, and a completion naming a model
  or adapter the server does not serve 404 (``The model `<name>` does not exist.``). ``runtime_lora=False``
  (``--no-runtime-lora``) serves without these two routes, as vLLM does without
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``.

A weight update or adapter load waits for the running generation and blocks the next one, so every answer comes
from one set of weights. :attr:`~OpenAICompatibleServer.weight_updates` counts the updates.

Fault injection, for testing clients (set at construction or with :meth:`~OpenAICompatibleServer.set_faults`);
every generation request (chat or token completions; not the weight routes) draws once from each seeded stream,
so which request gets a fault depends only on ``seed`` and its arrival index:

* ``fail_first``: the next N generation requests get HTTP 503;
* ``fail_rate``: that share of generation requests gets HTTP 500 or 503;
* ``garbage_rate``: that share gets a 200 whose body is malformed (not JSON, or JSON without
  ``choices[0].message.content`` nor ``choices[i].token_ids``);
* ``delay``: every generation request waits that many seconds before its answer (to trigger client timeouts);
* ``api_key``: when set, a request without ``Authorization: Bearer <api_key>`` gets HTTP 401.

Every request is recorded (:attr:`~OpenAICompatibleServer.log`, :attr:`~OpenAICompatibleServer.request_count`,
:attr:`~OpenAICompatibleServer.authorizations`), as is the largest number in flight at once
(:attr:`~OpenAICompatibleServer.max_in_flight`).

Command line: ``python -m rlkit.testing.openai_server [--model PATH_OR_HUB_ID] [--port 8000]``.

The package, by concern: ``server`` (the model, faults, statistics, lifecycle, chat completions), ``decoding``
(token completions, batched), ``weights`` (the full-weight and LoRA routes), ``handler`` (HTTP), ``wire`` (request
checks, records) and ``process`` (the command line, :func:`server_process`).
"""

from __future__ import annotations

from rlkit.testing.openai_server.process import main, server_process
from rlkit.testing.openai_server.server import OpenAICompatibleServer
from rlkit.testing.openai_server.wire import RequestRecord

__all__ = ["OpenAICompatibleServer", "RequestRecord", "main", "server_process"]
