"""The test server's weight routes: SGLang's ``/update_weights_from_disk`` (full weights, copied in place where
they fit) and vLLM's runtime LoRA routes (``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter``), answering as
those engines answer, errors included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlkit.testing.openai_server.wire import _BadRequest

_ADMIN_ROUTES = {"/update_weights_from_disk": "_update_weights_from_disk",
                 "/v1/load_lora_adapter": "_load_lora_adapter", "/v1/unload_lora_adapter": "_unload_lora_adapter"}



class WeightRoutes:
    """The weight routes of :class:`~rlkit.testing.openai_server.OpenAICompatibleServer` (a mixin: the server holds
    the model, its adapters and the model lock)."""

    def _update_weights_from_disk(self, body: dict[str, Any]) -> dict[str, Any]:
        """SGLang's ``/update_weights_from_disk``: reload the model from ``model_path``."""
        from rlkit.lm.models import load_policy

        path = body.get("model_path")
        if not isinstance(path, str) or not path:
            raise _BadRequest(400, "'model_path' must be a directory")
        if self._load_weights_in_place(Path(path)):
            return {"success": True, "message": "Succeeded to update model weights."}
        try:
            model, tokenizer = load_policy(path, dtype=self._dtype)
        except Exception as exc:  # SGLang answers a failed load with success: false, not a 500
            raise _BadRequest(400, f"failed to load weights from {path}: {type(exc).__name__}: {exc}") from None
        model.eval()
        with self._model_lock:
            self.model, self.tokenizer = model.to(self.model.device), tokenizer
            self.adapters = {}
            self._stop_ids = self._stop_token_ids()
            self.weight_updates += 1
        return {"success": True, "message": "Succeeded to update model weights."}

    def _load_weights_in_place(self, path: Path) -> bool:
        """Copy the tensors of ``path/model.safetensors`` into the served model when they match its parameters name
        for name and shape, as SGLang updates weights in place; False (nothing changed) for anything else: sharded
        or other formats, another architecture, LoRA adapters loaded. Rebuilding the model and its tokenizer from the
        folder took ~35 ms of every weight sync of the tiny policy."""
        import torch
        from safetensors.torch import load_file

        file = path / "model.safetensors"
        if self.adapters or not file.is_file():
            return False
        try:
            tensors = load_file(str(file))
        except Exception:  # unreadable here: the full load reports it
            return False
        params = dict(self.model.state_dict())
        if set(tensors) - set(params) or any(tensors[k].shape != params[k].shape for k in tensors):
            return False
        # a name the file leaves out must share its storage with one it has (tied embeddings), or it would go stale
        covered = {params[k].data_ptr() for k in tensors}
        if any(params[k].data_ptr() not in covered for k in set(params) - set(tensors)):
            return False
        with self._model_lock, torch.no_grad():
            for name, value in tensors.items():
                params[name].copy_(value)
            self.weight_updates += 1
        return True

    def _load_lora_adapter(self, body: dict[str, Any]) -> str:
        """vLLM's ``/v1/load_lora_adapter``: load a peft adapter under ``lora_name``, with vLLM's answers to bad
        requests (``OpenAIServingModels.load_lora_adapter`` in ``vllm/entrypoints/openai/serving_models.py``): no
        name or path, 400; a name loaded already without ``load_inplace``, 400; no adapter at the path, 404
        (vLLM's ``LoRAAdapterNotFoundError``); an adapter that does not load, 400 with the reason."""
        from peft import PeftModel
        from peft.utils import load_peft_weights

        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not name or not isinstance(path, str) or not path:
            raise _BadRequest(400, "Both 'lora_name' and 'lora_path' must be provided.", "InvalidUserInput")
        if name == self.model_name:
            raise _BadRequest(400, f"{name!r} is the base model's name", "InvalidUserInput")
        if not Path(path, "adapter_config.json").is_file():
            raise _BadRequest(404, f"Loading lora {name} failed: No adapter found for {path}", "NotFoundError")
        with self._model_lock:
            if name in self.adapters and not body.get("load_inplace"):
                raise _BadRequest(400, f"The lora adapter '{name}' has already been loaded. If you want to load the "
                                       "adapter in place, set 'load_inplace' to True.", "InvalidUserInput")
            try:
                # read before the model is touched: peft wraps the base in place before it reads the weights, so an
                # unreadable file would leave a half-made adapter in the served model
                load_peft_weights(path, device="cpu")
                if name in self.adapters:
                    del self.adapters[name]  # gone whether or not its replacement loads
                    self.model.delete_adapter(name)
                if isinstance(self.model, PeftModel):
                    self.model.load_adapter(path, adapter_name=name, is_trainable=False)
                else:
                    self.model = PeftModel.from_pretrained(self.model, path, adapter_name=name, is_trainable=False)
            except Exception as exc:  # vLLM answers an adapter its engine cannot load with a 400 and the reason
                raise _BadRequest(400, f"Loading lora {name} failed: {type(exc).__name__}: {exc}",
                                  "BadRequestError") from None
            self.model.eval()
            self.adapters[name] = path
            self.weight_updates += 1
        return f"Success: LoRA adapter '{name}' added successfully."

    def _unload_lora_adapter(self, body: dict[str, Any]) -> str:
        """vLLM's ``/v1/unload_lora_adapter``: drop the adapter ``lora_name``."""
        name = body.get("lora_name")
        with self._model_lock:
            if name not in self.adapters:
                raise _BadRequest(404, f"The lora adapter '{name}' cannot be found.", "NotFoundError")
            del self.adapters[name]
            if self.adapters:
                self.model.set_adapter(next(iter(self.adapters)))  # peft warns when the active one goes
                self.model.delete_adapter(name)
            else:  # the last one: back to the plain base model
                self.model = self.model.unload()
        return f"Success: LoRA adapter '{name}' removed successfully."

