"""LangChain chat providers: which package, which key and which structured-output method each one has.

``provider:model`` strings name any provider LangChain's ``init_chat_model`` knows. This table says, per
provider, the integration package (and our extra that installs it), the environment variable holding its
API key (None where the provider authenticates otherwise: cloud credentials, a local server), and how it
takes a schema for constrained decoding:

* ``openai``: an OpenAI-style ``response_format`` with a strict JSON schema (OpenAI-compatible APIs);
* ``tools``: a forced tool call whose input schema is the JSON schema (Anthropic, Google, Mistral …);
* ``None``: no structured output we can rely on; ``constrained=True`` is then an error naming the provider.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Literal

__all__ = ["PROVIDERS", "Provider", "StructuredMethod", "closest_provider"]

StructuredMethod = Literal["openai", "tools"]


@dataclass(frozen=True)
class Provider:
    """One LangChain chat provider as ``init_chat_model`` names it.

    Attributes:
        name: The provider's name.
        package: The importable module of the integration.
        distribution: What pip installs.
        extra: Our extra that installs it (None: install the distribution itself).
        key: The API key's environment variable, None if it authenticates otherwise.
        structured: How its chat models take structured-output requests (``openai`` or ``tools``; None: not
            at all).
    """

    name: str
    package: str
    distribution: str
    extra: str | None
    key: str | None
    structured: StructuredMethod | None


def _p(
    name: str, dist: str, key: str | None, structured: StructuredMethod | None, extra: str | None = None
) -> Provider:
    return Provider(name, dist.replace("-", "_"), dist, extra, key, structured)


PROVIDERS: dict[str, Provider] = {
    p.name: p
    for p in (
        _p("openai", "langchain-openai", "OPENAI_API_KEY", "openai", extra="openai"),
        _p("anthropic", "langchain-anthropic", "ANTHROPIC_API_KEY", "tools", extra="anthropic"),
        _p("azure_openai", "langchain-openai", "AZURE_OPENAI_API_KEY", "openai", extra="openai"),
        _p("azure_ai", "langchain-azure-ai", "AZURE_INFERENCE_CREDENTIAL", "tools"),
        _p("google_genai", "langchain-google-genai", "GOOGLE_API_KEY", "tools", extra="google"),
        _p("google_vertexai", "langchain-google-vertexai", None, "tools"),
        _p("google_anthropic_vertex", "langchain-google-vertexai", None, "tools"),
        _p("bedrock", "langchain-aws", None, "tools"),
        _p("bedrock_converse", "langchain-aws", None, "tools"),
        _p("cohere", "langchain-cohere", "COHERE_API_KEY", "tools"),
        _p("fireworks", "langchain-fireworks", "FIREWORKS_API_KEY", "openai"),
        _p("together", "langchain-together", "TOGETHER_API_KEY", "openai", extra="together"),
        _p("mistralai", "langchain-mistralai", "MISTRAL_API_KEY", "tools"),
        _p("huggingface", "langchain-huggingface", "HUGGINGFACEHUB_API_TOKEN", None),
        _p("groq", "langchain-groq", "GROQ_API_KEY", "tools"),
        _p("ollama", "langchain-ollama", None, "tools", extra="ollama"),
        _p("deepseek", "langchain-deepseek", "DEEPSEEK_API_KEY", "tools"),
        _p("ibm", "langchain-ibm", "WATSONX_APIKEY", "tools"),
        _p("nvidia", "langchain-nvidia-ai-endpoints", "NVIDIA_API_KEY", "tools"),
        _p("xai", "langchain-xai", "XAI_API_KEY", "openai"),
        _p("perplexity", "langchain-perplexity", "PPLX_API_KEY", None),
        _p("anthropic_bedrock", "langchain-aws", None, "tools"),
        _p("bedrock_mantle_anthropic", "langchain-aws", None, "tools"),
        _p("bedrock_mantle_openai", "langchain-aws", None, "tools"),
        _p("baseten", "langchain-baseten", "BASETEN_API_KEY", "tools"),
        _p("litellm", "langchain-litellm", None, "tools"),
        _p("meta", "langchain-meta", "LLAMA_API_KEY", "tools"),
        _p("openrouter", "langchain-openrouter", "OPENROUTER_API_KEY", "tools"),
        _p("upstage", "langchain-upstage", "UPSTAGE_API_KEY", "tools"),
    )
}


def closest_provider(name: str, valid: list[str]) -> str | None:
    """The valid provider (or model form) closest to a misspelt one, or None when nothing is close.

    Args:
        name: The misspelt name.
        valid: The valid names.
    """
    found = difflib.get_close_matches(name.lower(), valid, n=1, cutoff=0.6)
    return found[0] if found else None
