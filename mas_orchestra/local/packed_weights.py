"""Decode steps on a model's 4-bit weights: int4-packed linear layers for few-token forward passes on a CPU.

A decode step of a small model on a CPU is bound by reading its weights: 135M float32 parameters are 540 MB
per generated token. The embedded SmolLM2-135M comes from a Q4_1 GGUF, so every linear layer of its transformer
blocks holds 4-bit group-wise values (groups of 32 along the input, one scale and one minimum per group) stored
as float32: eight times the bytes the values need. Packed, the same values are read as 4-bit by torch's CPU
kernel (``_weight_int4pack_mm_for_cpu``, bf16 activations and outputs), and the output head (tied to
the Q8_0 embedding, not 4-bit) is read from a bf16 copy.

Measured side by side on a CPU with native bf16 (AMD EPYC with AVX-512 BF16, 1 thread,
``benchmarks/batched_generation.py --parts decode-weights``): a one-row decode step of the embedded model
takes 0.38–0.40× the float32 step; the 210 layers' matrix multiplies at 1 row take 7 ms packed against 42 ms
in float32, at 8 rows 22 against 59 ms, at 32 rows 81 against 109 ms, and at 64 rows both about the same. With a
rank-16 LoRA adapter beside every layer (GRPO rollouts: the adapter added to the packed product by one float32
``addmm``, against float32 weights and the adapter as PEFT runs it) the packed side stays ahead further: at 64
rows 187 against 214 ms on 1 thread and 99 against 148 ms on 2, at 96 rows 171 against 240 ms on 2 (rollouts'
jump-forward passes reach 40–80 positions).
So forward passes of at most :data:`MAX_PACKED_ROWS` token positions run packed (decode steps, jump-forward
runs) inside :func:`packed_decoding`, which the batched decoder enters for decode steps only.
Prefills (whose key/values the prefix cache keeps) and training forwards always use the float32 weights.

The weights are the model's own; what changes is the arithmetic: activations, scales and the head are rounded
to bf16 (about three significant digits), so greedy text can differ from float32 after some tokens, as with
the bf16 prefill of :mod:`mas_orchestra.local.precision`.

The choice, per request: ``HFChatModel(decode_weights=...)``, else ``MAS_DECODE_WEIGHTS``, else ``auto``.

* ``auto``: packed on a CPU with native bf16, for a float32 model whose block layers all hold exact 4-bit
  group-wise values (checked when first asked: the embedded model does; a float32 ``hf:`` checkpoint does not,
  and decodes in float32);
* ``float32``: never packed (bit-for-bit what ``model.generate`` computes);
* ``int4``: packed on any CPU, rounding weights that are not 4-bit to the nearest 4-bit group grid (a lossy
  quantization: the largest rounding error, in quantization steps, is logged and kept in :class:`PackReport`).

Packing is done once per model, in place (a forward method on each packed ``nn.Linear``; nothing is added to
its ``state_dict``). Adapter weights (LoRA, which train) are never packed, and a layer whose weight changed after
packing (an in-place update bumps its version counter, a new tensor its storage) runs on its float32 weight.

Imports torch lazily.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from mas_orchestra.errors import MasOrchestraError
from mas_orchestra.local.precision import cpu_has_native_bf16, read_setting

__all__ = [
    "DECODE_WEIGHTS",
    "DECODE_WEIGHTS_ENV_VAR",
    "GROUP_SIZE",
    "MAX_PACKED_ROWS",
    "DecodeWeightsError",
    "PackReport",
    "decode_packed",
    "pack_decode_weights",
    "packed_decoding",
    "packed_matmul",
]

log = logging.getLogger(__name__)

DECODE_WEIGHTS_ENV_VAR = "MAS_DECODE_WEIGHTS"
DECODE_WEIGHTS: tuple[str, ...] = ("auto", "float32", "int4")
#: Input features per 4-bit group (the GGUF Q4_1 block).
GROUP_SIZE = 32
#: Token positions (rows × width) of a forward pass that still run packed; more run in float32 (measured above).
MAX_PACKED_ROWS = 64
#: A weight group is "exactly 4-bit" when every value lies within this fraction of a step of its grid.
_EXACT_TOLERANCE = 1e-3

_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("mas_orchestra_packed_decoding", default=False)
_PACK_LOCK = threading.Lock()


class DecodeWeightsError(MasOrchestraError, ValueError):
    """A decode-weights setting is not one of the known values, or ``int4`` cannot run here."""


@dataclass
class PackReport:
    """What :func:`pack_decode_weights` did to one model.

    Attributes:
        exact: Every packed layer held exact 4-bit group-wise values.
        packed_layers: Linear layers read as int4.
        head_layers: Output heads read from a bf16 copy.
        max_error_steps: Largest rounding of a weight, in quantization steps (0 when exact).
        packed_bytes: Bytes of the packed weights, scales and bf16 head.
        seconds: Seconds the packing took.
        skipped: Why nothing was packed (auto on a model that is not 4-bit), else empty.
    """

    exact: bool
    packed_layers: int = 0
    head_layers: int = 0
    max_error_steps: float = 0.0
    packed_bytes: int = 0
    seconds: float = 0.0
    skipped: str = ""


def _setting(setting: str | None) -> str:
    return read_setting(setting, field="decode_weights", env_var=DECODE_WEIGHTS_ENV_VAR, choices=DECODE_WEIGHTS,
                        error=DecodeWeightsError)


def _kernel_available() -> bool:
    import torch

    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu") and hasattr(
        torch.ops.aten, "_convert_weight_to_int4pack_for_cpu")


def decode_packed(model: Any, device: str, setting: str | None = None) -> bool:
    """Whether a request with ``setting`` decodes ``model`` packed; packs the model on first use (see the module
    docstring).

    Args:
        model: The model.
        device: Its device.
        setting: ``float32`` | ``auto`` | ``int4`` (default: ``MAS_DECODE_WEIGHTS``, else ``auto``).

    Raises:
        DecodeWeightsError: An unknown setting, or ``int4`` off a CPU, without torch's CPU int4 kernel or on a
            model that is not float32.
    """
    import torch

    value = _setting(setting)
    if value == "float32":
        return False
    on_cpu = str(device).startswith("cpu")
    if value == "int4":
        if not on_cpu or not _kernel_available():
            raise DecodeWeightsError(
                f"decode_weights='int4' needs a CPU device and torch's CPU int4 kernel (device {device!r}, torch "
                f"{torch.__version__}); use 'auto' or 'float32'")
        if getattr(model, "dtype", None) != torch.float32:
            raise DecodeWeightsError(f"decode_weights='int4' packs float32 models; this one is {model.dtype}")
        return pack_decode_weights(model, lossy=True).packed_layers > 0
    if not on_cpu or getattr(model, "dtype", None) != torch.float32 or not cpu_has_native_bf16():
        return False
    if not _kernel_available():
        return False
    report = pack_decode_weights(model, lossy=False)
    return report.exact and report.packed_layers > 0


def pack_decode_weights(model: Any, *, lossy: bool = False) -> PackReport:
    """Pack ``model``'s linear layers (adapters excepted) as int4 and its output head as bf16, once (later calls
    return the same report). Without ``lossy`` nothing is packed unless every layer holds exact 4-bit values; with it,
    the layers are rounded to the 4-bit grid (and a model packed exactly before stays as it is).

    Args:
        model: The model.
        lossy: Round the layers to the 4-bit grid.
    """
    with _PACK_LOCK:
        report: PackReport | None = getattr(model, "_mas_decode_pack", None)
        if report is not None and (report.packed_layers > 0 or not lossy):
            return report
        report = _pack(model, lossy)
        model._mas_decode_pack = report
        if report.packed_layers:
            log.info("decode weights: %d layers int4 (%s), %d head(s) bf16, %.1f MB, %.2f s",
                     report.packed_layers, "exact" if report.exact else
                     f"rounded, max error {report.max_error_steps:.2f} steps",
                     report.head_layers, report.packed_bytes / 1e6, report.seconds)
        return report


def _pack(model: Any, lossy: bool) -> PackReport:
    import torch

    started = time.perf_counter()
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    adapters = _adapter_modules(model)
    layers = [module for module in model.modules()
              if type(module) is torch.nn.Linear and module is not head and id(module) not in adapters
              and module.in_features % GROUP_SIZE == 0 and not hasattr(module, "_mas_packed")]
    if not layers:
        return PackReport(exact=False, skipped="no linear layer with a multiple of 32 inputs")
    # Each layer is packed as soon as it is checked (its int32 levels are 8× the packed bytes: 0.4 GB for the
    # embedded model if all were kept); nothing is installed until every layer has passed the check.
    states = []
    worst = 0.0
    for module in layers:
        q, scales_and_zeros, error = _group_quantize(module.weight.detach())
        worst = max(worst, error)
        if error > _EXACT_TOLERANCE and not lossy:
            return PackReport(exact=False, max_error_steps=error,
                              skipped="its linear layers do not hold exact 4-bit group-wise values")
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        states.append((module, _PackedLinear(module.weight, packed, scales_and_zeros.to(torch.bfloat16), None)))
    total = 0
    for module, state in states:
        total += state.nbytes
        _install(module, state)
    heads = 0
    if type(head) is torch.nn.Linear and id(head) not in adapters and not hasattr(head, "_mas_packed"):
        state = _PackedLinear(head.weight, None, None, head.weight.detach().to(torch.bfloat16))
        total += state.nbytes
        _install(head, state)
        heads = 1
    return PackReport(exact=worst <= _EXACT_TOLERANCE, packed_layers=len(states), head_layers=heads,
                      max_error_steps=worst, packed_bytes=total, seconds=time.perf_counter() - started)


def _adapter_modules(model: Any) -> set[int]:
    """Ids of the modules inside adapter layers (PEFT's LoRA ``lora_A``/``lora_B``: they train, so they are never
    packed), found as the siblings of each adapter layer's ``base_layer``, which is packed like any layer."""
    adapters: set[int] = set()
    for module in model.modules():
        base = getattr(module, "base_layer", None)
        if base is None:
            continue
        for child in module.children():
            if child is not base:
                adapters.update(id(inner) for inner in child.modules())
    return adapters


def _group_quantize(weight: Any) -> tuple[Any, Any, float]:
    """4-bit group-wise values of ``weight`` [out, in]: (int32 levels 0..15, float32 (scale, zero) per group as
    ``[in / 32, out, 2]`` with zero = minimum + 8 × scale, the largest rounding error in steps)."""
    import torch

    out_features, in_features = weight.shape
    groups = weight.float().reshape(out_features, in_features // GROUP_SIZE, GROUP_SIZE)
    low = groups.amin(dim=-1)
    step = (groups.amax(dim=-1) - low) / 15
    safe_step = torch.where(step > 0, step, torch.ones_like(step))
    levels = ((groups - low[..., None]) / safe_step[..., None]).round().clamp_(0, 15)
    error = ((levels * step[..., None] + low[..., None] - groups).abs() / safe_step[..., None]).max().item()
    scales_and_zeros = torch.stack([step, low + 8 * step], dim=-1).transpose(0, 1).contiguous()
    return levels.to(torch.int32).reshape(out_features, in_features), scales_and_zeros, float(error)


class _PackedLinear:
    """The packed form of one ``nn.Linear`` and the identity of the weight it was made from."""

    def __init__(self, weight: Any, packed: Any, scales_and_zeros: Any, bf16_weight: Any) -> None:
        self.packed, self.scales_and_zeros, self.bf16_weight = packed, scales_and_zeros, bf16_weight
        self.version, self.data_ptr = weight._version, weight.data_ptr()
        self.nbytes = sum(t.numel() * t.element_size() for t in (packed, scales_and_zeros, bf16_weight)
                          if t is not None)

    def fresh(self, weight: Any) -> bool:
        return bool(weight._version == self.version and weight.data_ptr() == self.data_ptr)


def _install(module: Any, state: _PackedLinear) -> None:
    module._mas_packed = state
    # a bound method: a deep copy of the model binds the copy's forward to the copy's own weights
    module.forward = types.MethodType(_packed_forward, module)


def packed_matmul(module: Any, flat: Any) -> Any:
    """``flat @ weight.T`` of a packed layer, when this call runs packed; else None.

    A call runs packed inside :func:`packed_decoding`, without gradients, for at most :data:`MAX_PACKED_ROWS`
    rows, on a layer packed by :func:`pack_decode_weights` whose weight has not changed since.

    Args:
        module: An ``nn.Linear`` (any other module gives None).
        flat: The input ``[rows, in features]`` (cast to bf16 only when the call runs packed).

    Returns:
        ``[rows, out features]`` in bf16, without the layer's bias; or None.
    """
    import torch

    state: _PackedLinear | None = getattr(module, "_mas_packed", None)
    if state is None or not _ACTIVE.get() or torch.is_grad_enabled() or not state.fresh(module.weight):
        return None
    if not 0 < flat.shape[0] <= MAX_PACKED_ROWS:
        return None
    flat = flat.to(torch.bfloat16)
    if state.packed is not None:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(flat, state.packed, GROUP_SIZE, state.scales_and_zeros)
    return torch.nn.functional.linear(flat, state.bf16_weight)


def _packed_forward(self: Any, x: Any) -> Any:
    import torch

    y = packed_matmul(self, x.reshape(-1, x.shape[-1])) if _ACTIVE.get() else None  # training: not even a reshape
    if y is not None:
        y = y.to(x.dtype).reshape(*x.shape[:-1], y.shape[-1])
        return y if self.bias is None else y + self.bias
    return torch.nn.Linear.forward(self, x)


@contextlib.contextmanager
def packed_decoding(enabled: bool = True) -> Iterator[None]:
    """Within the block (this thread or task), forward passes of few token positions use packed weights.

    Args:
        enabled: False turns packed weights off within the block instead.
    """
    token = _ACTIVE.set(bool(enabled))
    try:
        yield
    finally:
        _ACTIVE.reset(token)
