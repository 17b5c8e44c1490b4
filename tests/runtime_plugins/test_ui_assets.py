"""Plugin UI assets: served without a token from the UI folder only, under a strict CSP; real Chromium proof."""
import re
import shutil
import subprocess

import pytest

from tests.core.problems import assert_problem
from tests.runtime_plugins.support import HELLO_DIR, HELLO_ID, hello_copy, install, set_enabled

BASE = f"/plugin-runtime/{HELLO_ID}"


@pytest.fixture
def hello(rt, hello_zip):
    install(rt, hello_zip)
    return HELLO_ID


@pytest.fixture
def anonymous(rt_app):
    return rt_app.test_client()  # no token: UI assets bypass the token filter


def csp_directives(resp):
    policy = resp.headers["Content-Security-Policy"]
    return {part.split()[0]: part.split()[1:] for part in (p.strip() for p in policy.split(";")) if part}


ASSETS = {"ui/index.html": ("text/html",), "ui/app.js": ("text/javascript", "application/javascript"),
          "ui/style.css": ("text/css",)}


def test_ui_assets_are_served_without_a_token_with_their_content_type(anonymous, hello):
    for asset, mimetypes in ASSETS.items():
        resp = anonymous.get(f"{BASE}/{asset}")
        assert resp.status_code == 200, asset
        assert resp.mimetype in mimetypes, (asset, resp.mimetype)
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert "Content-Security-Policy" in resp.headers
        assert resp.get_data() == (HELLO_DIR / asset).read_bytes()


def test_the_csp_refuses_inline_scripts_and_allows_only_the_plugins_own_tree(anonymous, hello):
    directives = csp_directives(anonymous.get(f"{BASE}/ui/index.html"))
    scripts = directives["script-src"]
    assert scripts, "script-src must name the plugin's tree"
    assert all(src.startswith("http") and src.endswith(f"/plugin-runtime/{HELLO_ID}/") for src in scripts), scripts
    assert "'unsafe-inline'" not in scripts and "'self'" not in scripts and "*" not in scripts
    assert not any(s.startswith(("'unsafe-", "'nonce-", "'sha")) for s in scripts)
    assert directives["default-src"] == ["'none'"]
    assert directives["object-src"] == ["'none'"]
    assert directives["frame-ancestors"] == ["'self'"]


def test_the_bare_plugin_path_redirects_to_the_ui_entry(anonymous, hello):
    resp = anonymous.get(f"{BASE}/")
    assert resp.status_code == 302
    assert resp.headers["Location"].endswith(f"{BASE}/ui/index.html")


OUTSIDE = [
    f"{BASE}/ui/../main.py",
    f"{BASE}/ui/%2e%2e/main.py",
    f"{BASE}/ui/%2E%2E/plugin.json",
    f"{BASE}/..%2fmain.py",
    f"{BASE}/ui/..%2f..%2f..%2fdatasource.properties",
    f"{BASE}//etc/passwd",
    f"{BASE}/%2fetc/passwd",
    f"{BASE}/main.py",
    f"{BASE}/plugin.json",
    f"{BASE}/ui",
    f"{BASE}/ui/",
    f"{BASE}/ui/missing.js",
    f"{BASE}/ui/app.js%00.html",
    "/plugin-runtime/no.such.plugin/ui/index.html",
    "/plugin-runtime/../api/health",
]


def test_nothing_outside_the_ui_folder_is_served(anonymous, hello):
    for path in OUTSIDE:
        resp = anonymous.get(path, follow_redirects=True)  # "//" is merged by a redirect first
        assert resp.status_code == 404, (path, resp.status_code)
        assert b"import" not in resp.get_data(), path


def test_a_disabled_plugin_serves_no_ui(anonymous, rt, hello):
    set_enabled(rt, HELLO_ID, False)
    assert_problem(anonymous.get(f"{BASE}/ui/index.html"), 404)
    assert_problem(anonymous.get(f"{BASE}/"), 404)
    set_enabled(rt, HELLO_ID, True)
    assert anonymous.get(f"{BASE}/ui/index.html").status_code == 200


def test_a_plugin_without_a_ui_serves_nothing(anonymous, rt, tmp_path):
    folder = hello_copy(tmp_path, ui=None)
    install(rt, folder)
    assert_problem(anonymous.get(f"{BASE}/ui/index.html"), 404)
    assert rt.get("/api/plugin-runtime").json[0]["ui"] is None


def element_text(dom, element_id):
    match = re.search(rf'<p id="{element_id}">([^<]*)</p>', dom)
    assert match, f"no #{element_id} in the DOM: {dom[:500]}"
    return match.group(1)


def chromium_dom(url, profile):
    """The DOM of ``url`` after real headless Chromium ran its scripts."""
    exe = shutil.which("chromium")
    assert exe, "chromium is not installed (apt-get install -y chromium; .ci/run installs it)"
    proc = subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
         f"--user-data-dir={profile}", "--virtual-time-budget=3000", "--dump-dom", url],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_in_a_real_browser_the_external_script_runs_and_the_inline_one_does_not(rt_app, hello, live_server,
                                                                                tmp_path):
    base = live_server(rt_app)
    dom = chromium_dom(f"{base}{BASE}/ui/index.html", tmp_path / "chromium-profile")
    assert element_text(dom, "external") == "external script ran"
    assert element_text(dom, "inline") == "inline script has not run"


def test_without_the_policy_the_same_page_runs_its_inline_script(tmp_path):
    """The control for the test above: opened as a plain file, the page's inline script does run."""
    dom = chromium_dom((HELLO_DIR / "ui" / "index.html").as_uri(), tmp_path / "chromium-profile")
    assert element_text(dom, "inline") == "inline script ran"
    assert element_text(dom, "external") == "external script ran"
