"""Model family normalisation: map a recorded model name to the vendor family used for same-family exclusion.

Traces from model family F must not be judged by teachers of family F: a teacher would be grading its own family's
choices (circular agreement).
Names arrive in many spellings (``anthropic/claude-sonnet-4-5``, ``litellm_proxy/claude-3-5-sonnet-20241022``,
``gpt-4o-2024-08-06_maxiter_30_N_v2.1``, ``Qwen/Qwen3-Coder-480B-A35B-Instruct``); this module strips routing
prefixes and matches the base name against known family markers.
"""

from __future__ import annotations

import re

# ordered: the first marker found at the start of a word of the base name wins
_FAMILY_MARKERS: tuple[tuple[str, str], ...] = (
    ("claude", "anthropic"),
    ("gpt-oss", "openai"),
    ("gpt", "openai"),
    ("chatgpt", "openai"),
    ("codex", "openai"),
    ("o1", "openai"),
    ("o3", "openai"),
    ("o4", "openai"),
    ("gemini", "google"),
    ("gemma", "google"),
    ("qwen", "qwen"),
    ("qwq", "qwen"),
    ("deepseek", "deepseek"),
    ("llama", "meta"),
    ("mistral", "mistral"),
    ("mixtral", "mistral"),
    ("devstral", "mistral"),
    ("codestral", "mistral"),
    ("magistral", "mistral"),
    ("grok", "xai"),
    ("kimi", "moonshot"),
    ("moonshot", "moonshot"),
    ("glm", "zhipu"),
    ("chatglm", "zhipu"),
    ("minimax", "minimax"),
    ("command", "cohere"),
    ("phi", "microsoft"),
    ("nemotron", "nvidia"),
)

# routing prefixes (litellm / OpenRouter / cloud providers) that say nothing about the family
_ROUTERS = {
    "litellm_proxy",
    "litellm",
    "openrouter",
    "bedrock",
    "vertex_ai",
    "azure",
    "together_ai",
    "together",
    "fireworks_ai",
    "hosted_vllm",
    "vllm",
    "openai",
    "anthropic",
    "google",
    "us",
    "eu",
}


def model_family(model: str) -> str:
    """Normalised family of a model name (``"anthropic"``, ``"openai"``, ...); the lower-cased base name when the
    family is unknown, ``""`` for an empty name.

    >>> model_family("openrouter/anthropic/claude-sonnet-4.5")
    'anthropic'
    >>> model_family("us.anthropic.claude-3-7-sonnet-20250219-v1:0")
    'anthropic'
    """
    name = model.strip().lower()
    if not name or name == "<synthetic>":
        return ""
    parts = [p for p in re.split(r"[/:]", name) if p]
    # drop leading routing prefixes, keep at least the last part
    while len(parts) > 1 and parts[0] in _ROUTERS:
        parts = parts[1:]
    joined = "/".join(parts)
    words = re.split(r"[/._\s-]+", joined)
    for marker, family in _FAMILY_MARKERS:
        for i, word in enumerate(words):
            # match "gpt" in "gpt-4o" and "gpt4o", "o3" only as a whole word ("o3-mini"), "qwen" in "qwen2.5"
            if len(marker) <= 2:
                if word == marker:
                    return family
            elif word.startswith(marker) or "-".join(words[i : i + 2]).startswith(marker):
                return family
    return parts[-1]


def family_of(declared: str, model: str) -> str:
    """The family a state or a teacher belongs to: the declared ``model_family`` when set, else the family of its
    model name; lower-cased, so a trace's and a teacher's families compare as equal strings."""
    return (declared or model_family(model)).strip().lower()
