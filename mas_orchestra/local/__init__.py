"""The local inference engine: running a Hugging Face causal LM in this process, fast, on a CPU or one GPU.

One entry point, :meth:`mas_orchestra.local.engine.LocalEngine.submit` (a model loaded once per path and
device by :func:`~mas_orchestra.local.engine.load_engine`), and one options object,
:class:`~mas_orchestra.local.options.LocalEngineOptions`. What lives here:

- :mod:`~mas_orchestra.local.engine`: loaded models, the generation entry point, replies;
- :mod:`~mas_orchestra.local.options`: every knob, explicit value > environment variable > default;
- :mod:`~mas_orchestra.local.batching`: concurrent requests decoded together, step by step;
- :mod:`~mas_orchestra.local.prefix_cache` / :mod:`~mas_orchestra.local.prefix_store`: prompt key/values reused
  in memory and kept on disk;
- :mod:`~mas_orchestra.local.precision` / :mod:`~mas_orchestra.local.packed_weights`: bf16 prefills and int4
  decode steps on a CPU with native bf16;
- :mod:`~mas_orchestra.local.threads`: the torch thread rule;
- :mod:`~mas_orchestra.local.decoding`: the xgrammar logits processor of constrained decoding;
- :mod:`~mas_orchestra.local.embedded`: the embedded SmolLM2 (GGUF → safetensors conversion).

The LangChain side (model strings, :class:`~mas_orchestra.models.hf_chat.HFChatModel`, the backend-neutral output
constraints) stays in :mod:`mas_orchestra.models`. Importing this package loads no torch or transformers.
"""
