"""read_file, write_file and list_directory see only the paths granted to the run, never the whole disk."""
import os

import pytest

from tests.agent.support import assert_problem
from tests.builtin_tools.support import live_api, run_steps, run_tool


@pytest.fixture
def tree(tmp_path):
    """granted/ (with a file, a sub folder and two symlinks), readonly/, and a secret outside both."""
    granted, readonly, outside = tmp_path / "granted", tmp_path / "readonly", tmp_path / "outside"
    for folder in (granted, readonly, outside, granted / "sub"):
        folder.mkdir()
    (granted / "notes.txt").write_text("hello\n")
    (granted / "sub" / "deep.txt").write_text("deep")
    (readonly / "fixed.txt").write_text("do not touch")
    (outside / "secret.txt").write_text("secret")
    os.symlink(outside / "secret.txt", granted / "escape.txt")
    os.symlink(outside, granted / "escape_dir")
    os.symlink(granted / "notes.txt", granted / "inside_link.txt")
    grants = [{"path": str(granted), "access": "read-write"}, {"path": str(readonly), "access": "read"}]
    return {"granted": granted, "readonly": readonly, "outside": outside, "grants": grants}


def test_read_and_list_inside_a_grant(make_app, live_server, tree):
    _, api = live_api(make_app, live_server)
    granted = tree["granted"]
    status, result, _ = run_tool(api, "read_file", {"path": str(granted / "notes.txt")}, fileGrants=tree["grants"])
    assert status == "complete"
    assert result == {"path": str(granted / "notes.txt"), "content": "hello\n", "truncated": False, "size": 6}
    _, result, _ = run_tool(api, "read_file", {"path": str(granted / "notes.txt"), "maxBytes": 2},
                            fileGrants=tree["grants"])
    assert (result["content"], result["truncated"], result["size"]) == ("he", True, 6)
    _, result, _ = run_tool(api, "read_file", {"path": str(granted / "inside_link.txt")}, fileGrants=tree["grants"])
    assert result["content"] == "hello\n"  # a link that stays inside the grant is fine
    _, result, _ = run_tool(api, "read_file", {"path": str(tree["readonly"] / "fixed.txt")},
                            fileGrants=tree["grants"])
    assert result["content"] == "do not touch"
    status, result, _ = run_tool(api, "list_directory", {"path": str(granted)}, fileGrants=tree["grants"])
    assert status == "complete"
    entries = {e["name"]: (e["kind"], e["size"]) for e in result["entries"]}
    assert entries["notes.txt"] == ("file", 6) and entries["sub"] == ("directory", None)
    assert [e["name"] for e in result["entries"]] == sorted(entries)


def test_paths_outside_every_grant_are_refused(make_app, live_server, tree):
    _, api = live_api(make_app, live_server)
    granted, outside = tree["granted"], tree["outside"]
    refused = [
        ("read_file", {"path": str(outside / "secret.txt")}, "is not inside a path granted"),
        ("read_file", {"path": str(granted / ".." / "outside" / "secret.txt")}, "is not inside a path granted"),
        ("read_file", {"path": str(granted / "escape.txt")}, "is not inside a path granted"),
        ("read_file", {"path": str(granted / "escape_dir" / "secret.txt")}, "is not inside a path granted"),
        ("list_directory", {"path": str(outside)}, "is not inside a path granted"),
        ("list_directory", {"path": str(granted / "escape_dir")}, "is not inside a path granted"),
        ("write_file", {"path": str(outside / "new.txt"), "content": "x"}, "is not inside a path granted"),
        ("write_file", {"path": str(granted / "escape.txt"), "content": "x"}, "is not inside a path granted"),
        ("read_file", {"path": "relative/notes.txt"}, "path must be absolute"),
        ("read_file", {"path": "/"}, "is not inside a path granted"),
    ]
    for tool, args, message in refused:
        status, result, error = run_tool(api, tool, args, fileGrants=tree["grants"])
        assert status == "failed" and message in error, (tool, args, error)
        assert result is None
    # Without grants nothing at all is readable.
    status, _, error = run_tool(api, "read_file", {"path": str(granted / "notes.txt")})
    assert status == "failed" and "is not inside a path granted" in error
    assert (outside / "secret.txt").read_text() == "secret"
    assert not (outside / "new.txt").exists()


def test_a_read_only_grant_refuses_writes(make_app, live_server, tree):
    _, api = live_api(make_app, live_server)
    target = tree["readonly"] / "fixed.txt"
    for args in ({"path": str(target), "content": "changed"}, {"path": str(tree["readonly"] / "new.txt"),
                                                                "content": "new"}):
        status, _, error = run_tool(api, "write_file", args, fileGrants=tree["grants"])
        assert status == "failed" and "is granted read-only" in error
    assert target.read_text() == "do not touch"
    assert not (tree["readonly"] / "new.txt").exists()
    # A read-only grant does not hide a read-write grant of a folder inside it.
    nested = [{"path": str(tree["granted"]), "access": "read"},
              {"path": str(tree["granted"] / "sub"), "access": "read-write"}]
    status, _, _ = run_tool(api, "write_file", {"path": str(tree["granted"] / "sub" / "w.txt"), "content": "ok"},
                            fileGrants=nested)
    assert status == "complete" and (tree["granted"] / "sub" / "w.txt").read_text() == "ok"
    status, _, error = run_tool(api, "write_file", {"path": str(tree["granted"] / "w.txt"), "content": "no"},
                                fileGrants=nested)
    assert status == "failed" and "is granted read-only" in error


def test_write_and_append_inside_a_read_write_grant(make_app, live_server, tree):
    _, api = live_api(make_app, live_server)
    path = tree["granted"] / "out.txt"
    detail = run_steps(api, [
        {"id": "w", "tool": "write_file", "arguments": {"path": str(path), "content": "one\n"}},
        {"id": "a", "tool": "write_file", "arguments": {"path": str(path), "content": "two\n", "append": True},
         "dependsOn": ["w"]},
        {"id": "r", "tool": "read_file", "arguments": {"path": str(path)}, "dependsOn": ["a"]},
        {"id": "o", "tool": "write_file", "arguments": {"path": str(tree["granted"] / "notes.txt"), "content": "new"},
         "dependsOn": ["r"]}], fileGrants=tree["grants"])
    assert detail["status"] == "complete"
    assert detail["result"]["outputs"]["w"] == {"path": str(path), "bytesWritten": 4}
    assert detail["result"]["outputs"]["r"]["content"] == "one\ntwo\n"
    assert path.read_text() == "one\ntwo\n"
    assert (tree["granted"] / "notes.txt").read_text() == "new"
    status, _, error = run_tool(api, "write_file", {"path": str(tree["granted"] / "nope" / "x.txt"), "content": "x"},
                                fileGrants=tree["grants"])
    assert status == "failed" and "parent folder does not exist" in error
    status, _, error = run_tool(api, "write_file", {"path": str(tree["granted"] / "sub"), "content": "x"},
                                fileGrants=tree["grants"])
    assert status == "failed" and "is a directory" in error


def test_grants_must_be_absolute_and_well_formed(make_app, live_server, tree):
    _, api = live_api(make_app, live_server)
    plan = {"steps": [{"tool": "list_directory", "arguments": {"path": str(tree["granted"])}}]}
    for grants in ([{"path": "relative/dir"}], [{"path": str(tree["granted"]), "access": "write"}],
                   [{"path": str(tree["granted"]), "scope": "forever"}], [{"access": "read"}],
                   [{"path": str(tree["granted"]), "extra": True}], "not a list"):
        resp = api.http.post(f"{api.base}/api/agent/run", json={"goal": "g", "config": {
            "plan": plan, "planApproval": "auto", "fileGrants": grants}})
        body = assert_problem(resp, 400, "validation_failed")
        assert "config" in body["errors"]
    assert api.http.get(f"{api.base}/api/agent/runs").json() == []
