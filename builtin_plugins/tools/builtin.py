"""The builtin tools: HTTP, granted files, notifications, waiting, JSON picking, running workflows."""
import json
import os
from pathlib import Path

import gevent
import requests

from core.plans import lookup
from core.tools import Tool, ToolError

HTTP_MAX_BYTES = 1024 * 1024
FILE_MAX_BYTES = 4 * 1024 * 1024
DIR_MAX_ENTRIES = 1000


def _granted(path, ctx, write=False):
    """Resolve ``path`` inside one of the run's file grants, or refuse; never the whole disk.

    Symlinks are resolved first, so a link inside a grant that points outside it is
    refused; a writable grant anywhere wins over a read-only one covering the same path.
    """
    if not isinstance(path, str) or not path or "\x00" in path:
        raise ToolError("path must be a non-empty string")
    target = Path(path).expanduser()
    if not target.is_absolute():
        raise ToolError("path must be absolute")
    resolved = Path(os.path.realpath(target))
    read_only = False
    for grant in ctx.file_refs or []:
        granted = Path(str(grant.get("path") or "")).expanduser()
        if not granted.is_absolute():
            continue
        root = Path(os.path.realpath(granted))
        if resolved == root or resolved.is_relative_to(root):
            if write and grant.get("access") != "read-write":
                read_only = True
                continue
            return resolved
    if read_only:
        raise ToolError(f"{path} is granted read-only to this run")
    raise ToolError(f"{path} is not inside a path granted to this run")


def _open(path, flags):
    # O_NOFOLLOW: a symlink planted at the checked path after the check is not followed.
    try:
        return os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        raise ToolError(f"{path}: {exc.strerror}") from None


def http_request(args, ctx):
    method = args.get("method", "GET")
    timeout = args.get("timeoutMs", 15000) / 1000
    limit = args.get("maxBytes", HTTP_MAX_BYTES)
    body = args.get("body")
    kwargs = {"headers": args.get("headers") or {}, "timeout": timeout, "stream": True,
              "allow_redirects": args.get("followRedirects", True)}
    if isinstance(body, (dict, list)):
        kwargs["json"] = body
    elif body is not None:
        kwargs["data"] = str(body).encode("utf-8")
    try:
        # requests' timeout bounds each socket wait; this bounds the whole exchange, so a
        # server dripping one byte at a time cannot hold the step forever.
        with gevent.Timeout(timeout, _TotalTimeout):
            with requests.request(method, args["url"], **kwargs) as resp:
                chunks, size, truncated = [], 0, False
                for chunk in resp.iter_content(65536):
                    if ctx.cancelled is not None and ctx.cancelled.is_set():
                        raise ToolError("cancelled")
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > limit:
                        truncated = True
                        break
                raw = b"".join(chunks)[:limit]
                text = raw.decode(resp.encoding or "utf-8", "replace")
                content = text
                if "json" in (resp.headers.get("Content-Type") or "") and not truncated:
                    try:
                        content = json.loads(text)
                    except ValueError:
                        pass
                return {"status": resp.status_code, "headers": dict(resp.headers), "body": content,
                        "truncated": truncated}
    except (requests.Timeout, _TotalTimeout):
        raise ToolError(f"{method} {args['url']} timed out after {timeout:g} s") from None
    except requests.RequestException as exc:
        raise ToolError(f"{method} {args['url']} failed: {type(exc).__name__}") from None


class _TotalTimeout(Exception):
    pass


def read_file(args, ctx):
    path = _granted(args["path"], ctx)
    if not path.is_file():
        raise ToolError(f"{args['path']} is not a file")
    limit = args.get("maxBytes", FILE_MAX_BYTES)
    with os.fdopen(_open(path, os.O_RDONLY), "rb") as fh:
        data = fh.read(limit + 1)
        size = os.fstat(fh.fileno()).st_size
    return {"path": args["path"], "content": data[:limit].decode("utf-8", "replace"),
            "truncated": len(data) > limit, "size": size}


def write_file(args, ctx):
    path = _granted(args["path"], ctx, write=True)
    content = args["content"].encode("utf-8")
    if len(content) > FILE_MAX_BYTES:
        raise ToolError("content is larger than 4 MiB")
    if not path.parent.is_dir():
        raise ToolError("the parent folder does not exist")
    if path.is_dir():
        raise ToolError(f"{args['path']} is a directory")
    mode = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if args.get("append") else os.O_TRUNC)
    with os.fdopen(_open(path, mode), "wb") as fh:
        fh.write(content)
    return {"path": args["path"], "bytesWritten": len(content)}


def list_directory(args, ctx):
    path = _granted(args["path"], ctx)
    if not path.is_dir():
        raise ToolError(f"{args['path']} is not a directory")
    entries = []
    for entry in sorted(os.scandir(path), key=lambda e: e.name)[:DIR_MAX_ENTRIES]:
        kind = "directory" if entry.is_dir(follow_symlinks=False) else "file"
        entries.append({"name": entry.name, "kind": kind,
                        "size": entry.stat(follow_symlinks=False).st_size if kind == "file" else None})
    return {"path": args["path"], "entries": entries}


def notify(args, ctx):
    center = ctx.host.service("notifications") if ctx.host else None
    if center is None:
        raise ToolError("notifications are unavailable")
    note = center.create(source="agent", level=args.get("level", "info"), title=args["title"],
                         body=args.get("body"), link=args.get("link"))
    return {"id": note["id"]}


def wait(args, ctx):
    ms = args["ms"]
    if ctx.cancelled is not None:
        if ctx.cancelled.wait(ms / 1000):
            raise ToolError("cancelled")
    else:
        gevent.sleep(ms / 1000)
    return {"waitedMs": ms}


def json_extract(args, ctx):
    path = [p for p in args["path"].split(".") if p] if args["path"] else []
    try:
        return lookup(args["value"], path)
    except (KeyError, IndexError, TypeError):
        if "default" in args:
            return args["default"]
        raise ToolError(f"nothing at {args['path']!r}") from None


def run_workflow(args, ctx):
    service = ctx.host.service("workflows") if ctx.host else None
    if service is None:
        raise ToolError("workflows are unavailable")
    from core.errors import ApiError
    try:
        return service.run_and_wait(args["workflowId"], args.get("inputs") or {}, ctx)
    except ApiError as exc:
        raise ToolError(exc.detail or exc.code) from None


def builtin_tools():
    path = {"type": "string", "minLength": 1, "maxLength": 4096}
    return [
        Tool("http_request", "Make an HTTP request (1 MiB response cap, or maxBytes).", {
            "type": "object", "required": ["url"], "additionalProperties": False,
            "properties": {
                "url": {"type": "string", "pattern": "^https?://", "maxLength": 8192},
                "method": {"enum": ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]},
                "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                "body": {"type": ["string", "object", "array", "null"]},
                "timeoutMs": {"type": "integer", "minimum": 100, "maximum": 120000},
                "maxBytes": {"type": "integer", "minimum": 1, "maximum": HTTP_MAX_BYTES},
                "followRedirects": {"type": "boolean"}}}, http_request),
        Tool("read_file", "Read a text file inside a path granted to the run.", {
            "type": "object", "required": ["path"], "additionalProperties": False,
            "properties": {"path": path, "maxBytes": {"type": "integer", "minimum": 1,
                                                      "maximum": FILE_MAX_BYTES}}}, read_file, retry_safe=True),
        Tool("write_file", "Write a text file inside a read-write path granted to the run.", {
            "type": "object", "required": ["path", "content"], "additionalProperties": False,
            "properties": {"path": path, "content": {"type": "string"}, "append": {"type": "boolean"}}},
            write_file),
        Tool("list_directory", "List a directory inside a path granted to the run.", {
            "type": "object", "required": ["path"], "additionalProperties": False,
            "properties": {"path": path}}, list_directory, retry_safe=True),
        Tool("notify", "Create a notification (source agent).", {
            "type": "object", "required": ["title"], "additionalProperties": False,
            "properties": {"level": {"enum": ["info", "success", "warning", "error"]},
                           "title": {"type": "string", "minLength": 1, "maxLength": 200},
                           "body": {"type": "string", "maxLength": 4000},
                           "link": {"type": "string", "maxLength": 2048}}}, notify),
        Tool("wait", "Wait a number of milliseconds (cancellable).", {
            "type": "object", "required": ["ms"], "additionalProperties": False,
            "properties": {"ms": {"type": "integer", "minimum": 0, "maximum": 3_600_000}}}, wait,
            retry_safe=True),
        Tool("json_extract", "Pick a value from JSON by a dot path (keys and list indexes).", {
            "type": "object", "required": ["value", "path"], "additionalProperties": False,
            "properties": {"value": {}, "path": {"type": "string", "maxLength": 1000}, "default": {}}},
            json_extract, retry_safe=True),
        Tool("run_workflow", "Run a published workflow as a child run and return its result.", {
            "type": "object", "required": ["workflowId"], "additionalProperties": False,
            "properties": {"workflowId": {"type": "string", "maxLength": 36},
                           "inputs": {"type": "object"}}}, run_workflow),
    ]
