"""The built book as a reader sees it, in headless Chromium: no page wider than a phone, no cut-off
code, math typeset offline.

    python book/check_layout.py [_build/html]      (or `make check-book-layout`, which builds first)

Serves the HTML on localhost, opens every page in Chromium (Debian's `chromium`; CHROMIUM=path to use
another) inside a small wrapper page and measures:

- in a 400 px wide frame: ``document.documentElement.scrollWidth`` (a page wider than 400 px scrolls sideways);
- in a 1280 px wide frame: how many code blocks (``pre``) scroll sideways (``scrollWidth > clientWidth``);
- the math, offline: the browser cannot resolve any host name (only the local server is reached),
  and on every page that has math (``.math`` elements) each one must have been typeset by MathJax
  (an ``mjx-container`` inside, no ``mjx-merror``), MathJax must come from the book itself
  (``_static/mathjax``, sphinx-mathjax-offline), and no script or stylesheet may come from elsewhere.

Fails when any page is wider than 400 px, when a code block of a lab or of the appendix scrolls,
or when any math is left as raw TeX offline.
Needs no Python package: ``chromium --headless --dump-dom`` prints the wrapper after its script ran.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

PHONE, LAPTOP = 400, 1280
MARK = "LAYOUT-CHECK"
# Headless Chromium's window is at least 500 px wide, so each page is opened in two iframes of the
# exact widths, inside one wrapper page on the same origin, which measures them once both have loaded.
WRAPPER = """<!DOCTYPE html><html><body style="margin:0">
<iframe id="phone" width="%(phone)d" height="900" src="%(page)s" style="border:0"></iframe>
<iframe id="laptop" width="%(laptop)d" height="900" src="%(page)s" style="border:0"></iframe>
<script>
let loaded = 0;
function measure(frame) {
  const doc = document.getElementById(frame).contentDocument;
  const blocks = [...doc.querySelectorAll("article pre, .bd-article pre")];
  const cut = blocks.filter(p => p.scrollWidth > p.clientWidth + 1);
  const win = doc.defaultView, over = e => e.getBoundingClientRect().right > %(phone)d + 1;
  const clipped = e => { for (let p = e.parentElement; p; p = p.parentElement)
                           if (win.getComputedStyle(p).overflowX !== "visible") return true;
                         return false; };
  const wide = [...doc.body.querySelectorAll("*")].filter(e => over(e) && !clipped(e)
      && ![...e.children].some(c => over(c) && !clipped(c)));
  return {width: doc.documentElement.scrollWidth, blocks: blocks.length, cut: cut.length,
          wide: wide.slice(0, 3).map(e => e.tagName.toLowerCase() + "." + [...e.classList].join(".") + ": "
                                      + (e.textContent || "").trim().slice(0, 60)),
          first: cut.slice(0, 3).map(p => p.textContent.split("\\n").find(l => l.length > 80) || "")};
}
// MathJax typesets after the page has loaded: wait for its startup promise (at most ~6 s).
async function settle(frame) {
  const win = document.getElementById(frame).contentWindow;
  if (!win.document.querySelector(".math")) return;
  for (let i = 0; i < 60 && !(win.MathJax && win.MathJax.startup && win.MathJax.startup.promise); i++)
    await new Promise(r => setTimeout(r, 100));
  if (win.MathJax && win.MathJax.startup && win.MathJax.startup.promise)
    await Promise.race([win.MathJax.startup.promise.catch(() => {}),
                        new Promise(r => setTimeout(r, 6000))]);
}
function math(frame) {
  const win = document.getElementById(frame).contentWindow, doc = win.document;
  const all = [...doc.querySelectorAll(".math")];
  const raw = all.filter(e => !e.querySelector("mjx-container"));
  const local = u => u.startsWith(location.origin + "/");
  const urls = [...doc.querySelectorAll("script[src]")].map(e => e.src)
      .concat([...doc.querySelectorAll("link[rel=stylesheet][href]")].map(e => e.href))
      .concat(win.performance.getEntriesByType("resource").map(e => e.name));
  return {count: all.length, raw: raw.length, errors: doc.querySelectorAll("mjx-merror").length,
          first_raw: raw.slice(0, 2).map(e => e.textContent.trim().slice(0, 60)),
          mathjax: [...new Set(urls.filter(u => /mathjax/i.test(u) && /\\.js$/.test(u)))].slice(0, 2),
          remote: [...new Set(urls.filter(u => /^https?:/.test(u) && !local(u)))].slice(0, 3)};
}
for (const id of ["phone", "laptop"]) document.getElementById(id).addEventListener("load", async () => {
  if (++loaded < 2) return;
  await Promise.all([settle("phone"), settle("laptop")]);
  const el = document.createElement("pre"); el.id = "%(mark)s";
  el.textContent = JSON.stringify({phone: measure("phone"), laptop: measure("laptop"), math: math("laptop")});
  document.body.appendChild(el);
});
</script></body></html>"""
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--virtual-time-budget=20000",
         # Offline: no host name resolves (the book is served on 127.0.0.1, which needs none), so a
         # CDN script would fail to load exactly as it does for a reader without a network.
         "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"]


def _chromium() -> str:
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        sys.exit("check_layout: Chromium not found (Debian: apt-get install chromium), or set CHROMIUM=path")
    return path


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def _serve(root: Path) -> tuple[http.server.ThreadingHTTPServer, int]:
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def _measure(chromium: str, url: str, profile: Path) -> dict:
    out = subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", f"--window-size={LAPTOP + 500},1000",
                          "--dump-dom", url], capture_output=True, text=True, timeout=120)
    m = re.search(rf'<pre id="{MARK}"[^>]*>(.*?)</pre>', out.stdout, re.S)
    if not m:
        raise RuntimeError(f"{url}: the probe did not report (chromium said: {out.stderr.strip()[-300:]})")
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                      .replace("&gt;", ">"))


def _math_failures(page: str, math: dict) -> list[str]:
    """Math left as raw TeX, a MathJax error, MathJax or any other script from outside the book."""
    out = []
    if math["raw"]:
        out.append(f"{page}: {math['raw']} of {math['count']} math elements not typeset offline, e.g. "
                   f"{math['first_raw'][0]!r} (MathJax loaded from: {math['mathjax'] or 'nowhere'})")
    if math["errors"]:
        out.append(f"{page}: {math['errors']} MathJax error(s) (mjx-merror)")
    if math["count"] and not all("/_static/mathjax/" in u for u in math["mathjax"]):
        out.append(f"{page}: MathJax is not served from the book: {math['mathjax']}")
    if math["remote"]:
        out.append(f"{page}: resources from outside the book: {math['remote']}")
    return out


def _strict(page: str) -> bool:
    """Pages whose code blocks must never scroll: the labs and the appendix."""
    return page.startswith("labs/") or "appendix" in page


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("html", type=Path, nargs="?", default=Path("_build/html"))
    args = ap.parse_args(argv)
    if not (args.html / "index.html").exists():
        sys.exit(f"check_layout: {args.html}/index.html not found: build the book first (make book)")
    chromium = _chromium()
    with tempfile.TemporaryDirectory(prefix="book-layout-") as tmp:
        site = Path(tmp) / "site"
        shutil.copytree(args.html, site)
        pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")
                       if not p.relative_to(site).as_posix().startswith(("_", "genindex", "search")))
        for i, page in enumerate(pages):
            (site / f"_layout_probe_{i}.html").write_text(
                WRAPPER % {"phone": PHONE, "laptop": LAPTOP, "page": page, "mark": MARK}, encoding="utf-8")
        server, port = _serve(site)
        failures, total_blocks, total_cut, total_math, total_raw = [], 0, 0, 0, 0
        try:
            print(f"{'page':40} {'width@400':>9} {'code blocks':>11} {'cut@1280':>8} {'math typeset':>12}")
            for i, page in enumerate(pages):
                both = _measure(chromium, f"http://127.0.0.1:{port}/_layout_probe_{i}.html", Path(tmp) / "profile")
                phone, laptop, math = both["phone"], both["laptop"], both["math"]
                total_blocks += laptop["blocks"]
                total_cut += laptop["cut"]
                total_math += math["count"]
                total_raw += math["raw"]
                typeset = f"{math['count'] - math['raw']}/{math['count']}" if math["count"] else "-"
                print(f"{page:40} {phone['width']:>9} {laptop['blocks']:>11} {laptop['cut']:>8} {typeset:>12}")
                failures += _math_failures(page, math)
                if phone["width"] > PHONE:
                    failures.append(f"{page}: {phone['width']} px wide on a {PHONE} px phone; widest: "
                                    + " | ".join(phone["wide"]))
                if laptop["cut"] and _strict(page):
                    failures.append(f"{page}: {laptop['cut']} code block(s) scroll at {LAPTOP} px, e.g. "
                                    f"{laptop['first'][0][:100]!r}")
        finally:
            server.shutdown()
    print(f"{len(pages)} pages; {total_cut} of {total_blocks} code blocks scroll at {LAPTOP} px; "
          f"{total_math - total_raw} of {total_math} math elements typeset offline")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
