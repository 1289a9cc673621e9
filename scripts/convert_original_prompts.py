"""Convert the original MAS-Orchestra repository's orchestrator prompts into a prompt template folder.

Usage: python scripts/convert_original_prompts.py ORIGINAL_CHECKOUT --out DIR [--variant NAME]

Writes ``DIR/high`` (from the ``harmony_medium`` prompts) and ``DIR/low`` (from ``harmony_minimal``), each
with ``system.txt``, ``user.txt`` and ``second_user.txt`` (see :mod:`mas_orchestra.prompt_templates`), so
``--prompt DIR`` runs a released checkpoint on the prompts it was trained on. The prompt modules are read
with :mod:`ast` — their string constants only; nothing is imported or executed. Their markers become our
placeholders: ``[QUESTION]`` → ``{question}``, ``[ARCHIVE]`` → ``{archive}``, ``[MODEL]`` → ``{model}``,
``[COT]``/``[COT_SC]``/``[Reflexion]``/``[Debate]``/``[Websearch]`` → ``{agent_cot}`` … ``{agent_search}``,
and ``[EXAMPLE]`` → ``""`` (what the original put there). ``--variant igsm_depth`` (etc.) takes the high-DoM
user prompt ``propose_harmony_medium_<variant>.py`` and, when there is one, ``harmony_medium_igsm.py`` as the
second message, as the original did for MASBench training files.

Layout read (under ``mas_r1_reasoner/agents/prompts/`` of the checkout, or the folder given itself):
``system_prompt/<name>.py`` (constant ``system_prompt``) → the system message;
``user_prompt/propose_<name>.py`` (constant ``base``) → the user message;
``developer_prompt/<name>.py`` (constant ``developer_prompt``) → the second user message.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

MARKERS = {
    "[QUESTION]": "{question}", "[ARCHIVE]": "{archive}", "[MODEL]": "{model}", "[COT]": "{agent_cot}",
    "[COT_SC]": "{agent_sc}", "[Reflexion]": "{agent_reflexion}", "[Debate]": "{agent_debate}",
    "[Websearch]": "{agent_search}", "[EXAMPLE]": '""',
}
_LITERAL = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")
# DoM -> (prompt name, user-prompt module names to try, in order)
_DOMS = {"high": ("harmony_medium", ("propose_harmony_medium",)),
         "low": ("harmony_minimal", ("propose_harmony_minimal", "propose_harmony_minmal"))}


class ConversionError(ValueError):
    """A prompt module that is missing, has no such constant, or whose constant is not a plain string."""


def string_constant(path: Path, name: str) -> str:
    """The value of the top-level ``name = "..."`` in ``path``, read with ``ast`` (never executed)."""
    if not path.is_file():
        raise ConversionError(f"{path}: no such prompt module")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        raise ConversionError(f"{path}: not valid Python ({exc.msg}, line {exc.lineno})") from None
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                return value.value
            raise ConversionError(f"{path}: {name} is not a plain string constant (line {node.lineno}); "
                                  "only literal strings are read")
    raise ConversionError(f"{path}: no top-level string constant {name!r}")


def to_template_text(text: str) -> str:
    """Original prompt text → our template text: literal ``{name}`` escaped, markers → placeholders."""
    text = _LITERAL.sub(lambda m: "{{" + m.group(1) + "}}", text)
    for marker, placeholder in MARKERS.items():
        text = text.replace(marker, placeholder)
    return text


def _prompts_root(checkout: Path) -> Path:
    nested = checkout / "mas_r1_reasoner" / "agents" / "prompts"
    return nested if nested.is_dir() else checkout


def convert(checkout: str | Path, out: str | Path, *, variant: str | None = None) -> list[Path]:
    """Write ``out/high`` and ``out/low``; returns the files written."""
    root = _prompts_root(Path(checkout))
    written: list[Path] = []
    for dom, (name, user_modules) in _DOMS.items():
        developer = root / "developer_prompt" / f"{name}.py"
        if dom == "high" and variant:
            user_modules = (f"propose_{name}_{variant}",)
            specific = root / "developer_prompt" / f"{name}_igsm.py"
            developer = specific if specific.is_file() else developer
        candidates = [root / "user_prompt" / f"{m}.py" for m in user_modules]
        user_path = next((p for p in candidates if p.is_file()), candidates[0])
        parts = {
            "system.txt": string_constant(root / "system_prompt" / f"{name}.py", "system_prompt"),
            "user.txt": string_constant(user_path, "base"),
            "second_user.txt": string_constant(developer, "developer_prompt"),
        }
        folder = Path(out) / dom
        folder.mkdir(parents=True, exist_ok=True)
        for file_name, text in parts.items():
            path = folder / file_name
            path.write_text(to_template_text(text), encoding="utf-8")
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkout", help="a checkout of the original repository (or its prompts folder)")
    parser.add_argument("--out", required=True, help="template folder to write (high/ and low/ inside)")
    parser.add_argument("--variant", default=None, help="MASBench user-prompt variant, e.g. igsm_depth")
    args = parser.parse_args(argv)
    try:
        written = convert(args.checkout, args.out, variant=args.variant)
        from mas_orchestra.prompt_templates import load_template

        for dom in ("high", "low"):
            load_template(args.out, dom)  # the result must be a usable template
    except (ConversionError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
