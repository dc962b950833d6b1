"""The dashboard's scripts as files: app.js and the ES modules it imports.

No browser needed: a module that imports a name its sibling does not export (or a file
that is not there) stops the whole dashboard at load, so the import graph is checked
here, where it fails fast and names the file."""

from __future__ import annotations

import re

from channels.web.server import STATIC_DIR

IMPORT = re.compile(r'^import \{([^}]*)\} from "\./([\w.-]+\.js)";$', re.MULTILINE)
EXPORT = re.compile(r"^export (?:async )?(?:function|const|let) ([\w$]+)", re.MULTILINE)
SCRIPT = re.compile(r'<script(?: type="(\w+)")? src="/static/([\w.-]+\.js)"')


def imports_of(name: str) -> dict[str, set[str]]:
    """The names ``name`` imports, per sibling module."""
    text = (STATIC_DIR / name).read_text(encoding="utf-8")
    found: dict[str, set[str]] = {}
    for names, module in IMPORT.findall(text):
        found.setdefault(module, set()).update(n.strip() for n in names.split(",") if n.strip())
    return found


def exports_of(name: str) -> set[str]:
    return set(EXPORT.findall((STATIC_DIR / name).read_text(encoding="utf-8")))


def dashboard_modules() -> set[str]:
    """app.js and every module reachable from it through its imports."""
    seen: set[str] = set()
    todo = ["app.js"]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(imports_of(name))
    return seen


def test_index_loads_app_js_as_a_module() -> None:
    html = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    scripts = SCRIPT.findall(html)
    assert ("module", "app.js") in scripts
    # the Markdown renderer stays classic scripts, read through window by the modules
    assert ("", "markdown_inline.js") in scripts and ("", "markdown.js") in scripts


def test_every_import_names_a_sibling_that_exports_it() -> None:
    modules = dashboard_modules()
    assert len(modules) > 1  # app.js is split into modules
    for name in sorted(modules):
        for module, names in imports_of(name).items():
            assert (STATIC_DIR / module).is_file(), f"{name} imports missing {module}"
            missing = names - exports_of(module)
            assert not missing, f"{name} imports {sorted(missing)} that {module} does not export"


def test_every_script_is_loaded_by_a_page_or_imported() -> None:
    # A module nobody imports is dead code that still looks like part of the dashboard.
    pages = "".join(p.read_text(encoding="utf-8") for p in STATIC_DIR.glob("*.html"))
    loaded = {name for _kind, name in SCRIPT.findall(pages)}
    every = {p.name for p in STATIC_DIR.glob("*.js")}
    assert every == loaded | dashboard_modules()


def dashboard_script_paths() -> list[str]:
    """The URL paths of app.js and its modules (all need a session, unlike login.js)."""
    return sorted(f"/static/{name}" for name in dashboard_modules())
