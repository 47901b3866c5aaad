"""The read-only dashboard's static pages, shipped as package data and served by the live app.

`index.html` polls GET /v1/status every 2 s (authenticated by the session cookie) and renders
groups, a phase timeline and the jobs table, and signs out (POST /logout with the session's CSRF
token, which the server writes into the page); `login.html` posts the admin token to /login. The
routes and the server-side sessions are in `routes.py`.
Both are self-contained (inline CSS and JS, no CDN): the cluster may have no internet. Their
scripts and styles are inline, so a Content-Security-Policy must allow them (e.g. by hash).
"""

from __future__ import annotations

from functools import lru_cache
from importlib.resources import files

PAGES = ("index.html", "login.html")


@lru_cache(maxsize=None)
def page(name: str) -> str:
    """The text of one dashboard page; `name` is one of PAGES (KeyError otherwise, so no path is read)."""
    if name not in PAGES:
        raise KeyError(f"no dashboard page {name!r}; pages are {', '.join(PAGES)}")
    return files(__name__).joinpath(name).read_text(encoding="utf-8")
