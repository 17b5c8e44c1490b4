"""Every hook is specified with a docstring, documented in docs/extensions.md and exercised by a test."""
import inspect
import re
from pathlib import Path

import pytest

import hookspecs

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "extensions.md"
SPECS = {name: fn for name, fn in vars(hookspecs).items()
         if inspect.isfunction(fn) and hasattr(fn, "agenthost_spec")}
# A documented hook has a heading that spells its signature: ### `register_routes(host)`
DOC_HEADING = re.compile(r"^### `([a-z_]+)\(([^)]*)\)`\s*$", re.MULTILINE)


def documented():
    return {name: args for name, args in DOC_HEADING.findall(DOC.read_text(encoding="utf-8"))}


def test_the_starting_hooks_are_specified():
    assert {"register_routes", "register_tools", "register_commands", "register_models",
            "startup", "shutdown", "notification_created", "settings_changed"} <= set(SPECS)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_hookspec_docstring_says_when_it_is_called_and_what_it_returns(name):
    doc = inspect.getdoc(SPECS[name]) or ""
    first = doc.splitlines()[0] if doc else ""
    assert first.startswith("Called "), f"{name}: the docstring opens with when it is called"
    assert re.search(r"\b[Rr]eturns?\b", doc), f"{name}: the docstring says what it returns"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_hookspec_takes_host_unless_it_runs_before_any_host(name):
    params = list(inspect.signature(SPECS[name]).parameters)
    assert params[0] == ("cli" if name == "register_commands" else "host")


@pytest.mark.parametrize("name", sorted(SPECS))
def test_hookspec_is_documented_with_its_signature(name):
    headings = documented()
    assert name in headings, f"docs/extensions.md has no '### `{name}(...)`' section"
    assert headings[name] == ", ".join(inspect.signature(SPECS[name]).parameters)


def test_the_doc_documents_no_hook_that_does_not_exist():
    assert set(documented()) <= set(SPECS)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_hookspec_is_implemented_by_a_test(name):
    """Some test module (other than this one) implements the hook in a test plugin."""
    here = Path(__file__).resolve()
    pattern = re.compile(rf"^\s*def {name}\(", re.MULTILINE)
    users = [p for p in (REPO / "tests").rglob("test_*.py")
             if p.resolve() != here and pattern.search(p.read_text(encoding="utf-8"))]
    assert users, f"no test implements the {name} hook"
