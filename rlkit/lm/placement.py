"""Placing a model too big for one device: accelerate plans which module goes where, transformers loads it so.

A model-loading plugin (the ``hf`` judge backend, the ``grm`` judge) takes three params and hands them to
:func:`plan_placement`:

* ``device_map``: null loads the model as before, whole, on the CPU (nothing here runs). ``auto``, ``balanced``,
  ``balanced_low_0`` or ``sequential`` let accelerate plan the map: GPUs first, then the CPU, then disk. A device
  (``cpu``, ``cuda``, ``cuda:1``, ``mps``, or a GPU index) puts the whole model there. A mapping of module names
  to devices (``{model.embed_tokens: 0, model.layers: cpu, lm_head: disk}``) is used as written once it covers
  every weight.
* ``max_memory``: for a planned map only, the most each device may hold, ``{0: 20GiB, cpu: 60GiB}``; sizes are
  bytes or strings as accelerate reads them (``KB``/``MB``/``GB`` powers of ten, ``KiB``/``MiB``/``GiB`` powers of
  two; a lowercase ``b`` means bits). A device left out holds nothing, so ``{cpu: 200MB}`` keeps a model off the
  GPUs. Null: what each device has free when the model loads.
* ``offload_folder``: where weights that fit nowhere else go. Without it a model that does not fit is an error.

The map is planned from the model's config alone, on weights that take no memory (accelerate's
``init_empty_weights``), so ``rlkit validate`` reports a bad ``max_memory`` or a model that cannot fit in
seconds, as a one-line :class:`ConfigError` naming the param. It is planned again when the weights load, because
free memory changes in between (the policy may have taken a GPU's share), and that plan is what
``from_pretrained(device_map=...)`` receives, so the model lands where the check said it would.

Offloaded modules run on the first GPU of the map (the CPU when it has none); accelerate's hooks copy their
weights in for each forward pass, which is slow but changes no number: greedy answers are the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlkit.core.errors import ConfigError

_DTYPES = ("auto", "float32", "float16", "bfloat16")
PLANNED = ("auto", "balanced", "balanced_low_0", "sequential")
_DEVICE = re.compile(r"cpu|mps|cuda(:\d+)?")
_MAP_DEVICE = re.compile(r"cpu|mps|disk|cuda(:\d+)?")


@dataclass(frozen=True)
class Placement:
    """A model's placement: the device map ``from_pretrained`` takes, the memory caps and the offload folder.

    ``device_map`` is the planned ``{module: device}`` once :func:`plan_placement` has seen the model, else the
    request as configured (a single device is passed as it is, for transformers to resolve)."""

    device_map: str | dict[str, int | str]
    max_memory: dict[int | str, int] | None = None
    offload_folder: str | None = None
    where: str = ""

    def from_pretrained_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``from_pretrained`` that place the model."""
        kwargs: dict[str, Any] = {"device_map": self.device_map}
        if self.max_memory is not None:
            kwargs["max_memory"] = dict(self.max_memory)
        if self.offload_folder is not None:
            kwargs["offload_folder"] = self.offload_folder
        return kwargs


def plan_placement(path: str | Path | None, *, device_map: Any = None, max_memory: Any = None,
                   offload_folder: str | None = None, dtype: str = "float32", where: str) -> Placement | None:
    """Check a model's placement params (``where`` prefixes their names in errors) and, given the model's
    folder, plan its device map with accelerate; None when ``device_map`` is null (load as before)."""
    if device_map is None:
        for name, value in (("max_memory", max_memory), ("offload_folder", offload_folder)):
            if value is not None:
                raise ConfigError("takes effect only with a device_map; set device_map: auto to plan one",
                                  f"{where}.{name}")
        return None
    if dtype not in _DTYPES:
        raise ConfigError(f"must be one of {', '.join(_DTYPES)}, got {dtype!r}", f"{where}.dtype")
    request = _check_request(device_map, f"{where}.device_map")
    memory = _check_max_memory(max_memory, f"{where}.max_memory")
    if memory is not None and request not in PLANNED:
        raise ConfigError(f"caps the devices of a planned map only ({', '.join(PLANNED)}); device_map is "
                          f"{device_map!r}", f"{where}.max_memory")
    if offload_folder is not None and (not isinstance(offload_folder, str) or not offload_folder.strip()):
        raise ConfigError(f"must be a folder path or null, got {offload_folder!r}", f"{where}.offload_folder")
    placement = Placement(request, memory, offload_folder, where)
    if path is None or (isinstance(request, str) and request not in PLANNED):
        return placement  # a single device needs no plan; without a folder there is nothing to plan from
    return _plan(placement, Path(path), dtype)


def input_device(model: Any) -> Any:
    """The device a model's inputs go to: where its first parameter is, or, for a model dispatched over several
    devices (``hf_device_map``), the device its offloaded modules run on."""
    import torch

    mapping = getattr(model, "hf_device_map", None)
    if mapping:
        compute = [d for d in mapping.values() if str(d) not in ("cpu", "disk")]
        if not compute:
            return torch.device("cpu")
        first = compute[0]
        return torch.device("cuda", first) if isinstance(first, int) else torch.device(first)
    return next(model.parameters()).device


# --- checking the params ---------------------------------------------------------------------------------


def _device_problem(device: str | int) -> str | None:
    """Why ``device`` is not usable on this machine, or None."""
    import torch

    if isinstance(device, int) or device.startswith("cuda"):
        index = device if isinstance(device, int) else int(device.partition(":")[2] or 0)
        count = torch.cuda.device_count()
        if index >= count:
            return f"GPU {index} is not available: this machine has {count} CUDA device{'s' * (count != 1)}"
    elif device == "mps" and not torch.backends.mps.is_available():
        return "mps is not available on this machine"
    return None


def _check_request(device_map: Any, where: str) -> str | dict[str, int | str]:
    if isinstance(device_map, bool):
        raise ConfigError(f"must be null, {', '.join(PLANNED)}, a device or a mapping, got {device_map!r}", where)
    if isinstance(device_map, int):
        device_map = f"cuda:{device_map}" if device_map >= 0 else device_map
    if isinstance(device_map, str):
        if device_map in PLANNED:
            return device_map
        if not _DEVICE.fullmatch(device_map):
            raise ConfigError(f"must be {', '.join(PLANNED)}, a device (cpu, cuda, cuda:N, mps) or a mapping of "
                              f"module names to devices, got {device_map!r}", where)
        problem = _device_problem(device_map)
        if problem:
            raise ConfigError(problem, where)
        return device_map
    if not isinstance(device_map, dict) or not device_map:
        raise ConfigError(f"must be null, {', '.join(PLANNED)}, a device or a non-empty mapping of module names to "
                          f"devices, got {device_map!r}", where)
    mapping: dict[str, int | str] = {}
    for module, device in device_map.items():
        if isinstance(device, str) and device.isdigit():
            device = int(device)
        ok = (isinstance(device, int) and not isinstance(device, bool) and device >= 0) or (
            isinstance(device, str) and _MAP_DEVICE.fullmatch(device))
        if not isinstance(module, str) or not ok:
            raise ConfigError(f"{module!r}: {device!r} is not a device; use a GPU index, cuda:N, cpu, mps or disk",
                              where)
        problem = None if device == "disk" else _device_problem(device)
        if problem:
            raise ConfigError(f"{module!r}: {problem}", where)
        mapping[module] = device
    return mapping


def _check_max_memory(max_memory: Any, where: str) -> dict[int | str, int] | None:
    from accelerate.utils import convert_file_size_to_int

    if max_memory is None:
        return None
    if not isinstance(max_memory, dict) or not max_memory:
        raise ConfigError(f"must be a mapping of devices to sizes, e.g. {{0: 20GiB, cpu: 60GiB}}, got {max_memory!r}",
                          where)
    caps: dict[int | str, int] = {}
    for key, size in max_memory.items():
        device: int | str = key
        if isinstance(key, str) and (key.isdigit() or re.fullmatch(r"cuda:\d+", key)):
            device = int(key.rpartition(":")[2])
        if isinstance(device, bool) or not (isinstance(device, int) and device >= 0 or device in ("cpu", "mps")):
            raise ConfigError(f"unknown device {key!r}; the keys are GPU indices (0, 1, ...), cpu or mps", where)
        problem = _device_problem(device) if device != "cpu" else None
        if problem:
            raise ConfigError(problem, where)
        try:
            if isinstance(size, bool) or not isinstance(size, int | str):
                raise ValueError(size)
            caps[device] = convert_file_size_to_int(size.strip() if isinstance(size, str) else size)
        except ValueError:
            raise ConfigError(f"{key!r}: {size!r} is not a size; give bytes or a string such as 200MB or 20GiB",
                              where) from None
    return caps


# --- planning --------------------------------------------------------------------------------------------


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _empty_model(path: Path, dtype: str) -> Any:
    """The model of ``path``'s config with weights on the meta device: sizes and names, no memory."""
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path, local_files_only=True)
    if dtype == "auto":
        chosen = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or torch.float32
        torch_dtype = getattr(torch, chosen) if isinstance(chosen, str) else chosen
    else:
        torch_dtype = getattr(torch, dtype)
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    model.tie_weights()  # so accelerate keeps tied weights (embeddings and LM head) on one device
    return model


def _plan(placement: Placement, path: Path, dtype: str) -> Placement:
    from accelerate import infer_auto_device_map
    from accelerate.utils import check_device_map, compute_module_sizes, get_balanced_memory, get_max_memory

    where = placement.where
    try:
        model = _empty_model(path, dtype)
    except Exception as exc:  # an architecture this transformers cannot build: loading would fail the same way
        raise ConfigError(f"cannot plan a device map for {path}: {type(exc).__name__}: {exc}".splitlines()[0],
                          f"{where}.device_map") from None
    request = placement.device_map
    if isinstance(request, dict):
        modules = dict(model.named_modules())
        unknown = [name for name in request if name and name not in modules]
        if unknown:
            raise ConfigError(f"the model has no module {unknown[0]!r}", f"{where}.device_map")
        try:
            check_device_map(model, request)
        except ValueError as exc:
            raise ConfigError(str(exc).replace("The device_map provided does not", "does not"),
                              f"{where}.device_map") from None
        planned = dict(request)
    else:
        no_split = sorted(getattr(model, "_no_split_modules", None) or [])
        caps = None if placement.max_memory is None else dict(placement.max_memory)
        if request == "sequential":
            memory = get_max_memory(caps)
        else:
            memory = get_balanced_memory(model, max_memory=caps, no_split_module_classes=no_split,
                                         low_zero=request == "balanced_low_0")
        planned = dict(infer_auto_device_map(model, max_memory=memory, no_split_module_classes=no_split))
    if "disk" in planned.values() and placement.offload_folder is None:
        total = compute_module_sizes(model)[""]
        if isinstance(request, dict):
            raise ConfigError("puts modules on disk; set offload_folder to the folder their weights go to",
                              f"{where}.offload_folder")
        if placement.max_memory is None:
            raise ConfigError(f"the model ({_size(total)}) does not fit in the memory free here; set max_memory and "
                              "offload_folder to spill the rest to disk", f"{where}.device_map")
        shown = ", ".join(f"{k}: {_size(v)}" for k, v in placement.max_memory.items())
        raise ConfigError(f"the model ({_size(total)}, plus room to bring its largest layer in) does not fit in "
                          f"{{{shown}}}; raise it, or set offload_folder to spill the rest to disk",
                          f"{where}.max_memory")
    return Placement(planned, placement.max_memory, placement.offload_folder, where)
